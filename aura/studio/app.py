"""The studio's web app (Starlette): the page, its static files and the JSON API under ``/api/``.

Security: off loopback every request needs the token (``?token=`` once, which sets a cookie, or an
``Authorization: Bearer`` header), else 401. State-changing requests are POSTs that must come from the
page itself: same Origin as the Host, and the ``X-Aura-CSRF`` header holding the token derived from the
browser's session cookie (a cross-site form or fetch can do neither). A run NAME is a folder directly
under the runs folder holding a run.json, or ``PIPELINE/STAGE``: a run that is a stage of a pipeline folder
(``pipeline.json``) directly under it; either reached without leaving it (no ``..`` or symlink out).
A pipeline's ``report.html`` is served with a policy that lets it load nothing and run no script.
The routes come from one router per concern (``aura.studio.routes``: runs, launch, try, pipelines; the page,
its session and static files here); NAMEs are resolved by ``aura.studio.folder``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import os
import secrets
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from aura.core.access import TOKEN_COOKIE, given_token, token_matches
from aura.core.errors import AuraError
from aura.core.i18n import current_lang
from aura.studio import actions, try_chat as chat
from aura.studio.folder import RunsFolder
from aura.studio.page_data import LogCache
from aura.studio.routes import launch_routes, pipeline_routes, run_routes, try_routes
from aura.watch.runlog import column_labels
from aura.watch.runs import find_run_dirs

STATIC = Path(__file__).parent / "static"
SESSION_COOKIE, CSRF_HEADER = "aura_session", "x-aura-csrf"


class Hardware:
    """``/api/hardware``: CPU, RAM and GPUs now, every sample taken by one thread: psutil keeps cpu_percent's
    previous call per thread, and a sample taken by another worker thread of a pool measured from nothing
    ("CPU 0 %" under full load)."""

    def __init__(self):
        self.monitor: dict = {}  # the GPU reader and when the previous sample was taken
        self.sampler = ThreadPoolExecutor(max_workers=1, thread_name_prefix="aura-studio-hardware")

    def sample(self) -> dict:
        import psutil

        from aura.watch import monitor as mon

        monitor = self.monitor
        if "gpus" not in monitor:  # cpu_percent measures since its previous call: give the first a window
            monitor["gpus"] = mon.GPUReader()
            psutil.cpu_percent(interval=None)
            monitor["since"] = time.monotonic()
            time.sleep(0.5)
        sample = mon.take_sample(monitor["gpus"], pid=None)
        now = time.monotonic()
        sample["cpu_window_s"], monitor["since"] = round(now - monitor["since"], 3), now
        return sample

    async def endpoint(self, request: Request) -> Response:
        return JSONResponse(await asyncio.get_running_loop().run_in_executor(self.sampler, self.sample))

    def close(self) -> None:
        self.sampler.shutdown(wait=False)


def page_routes(root: Path, csrf_for, hardware: Hardware) -> list[BaseRoute]:
    """The page itself: its HTML, the session it starts with (CSRF token, language, labels, the commands it
    may launch), the hardware strip, and its static files."""

    async def page(request: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})

    async def session(request: Request) -> Response:
        lang = (
            current_lang()
            if os.environ.get("AURA_LANG")
            else "es"
            if request.headers.get("accept-language", "es").lower().startswith("es")
            else "en"
        )
        return JSONResponse(
            {
                "csrf": csrf_for(request.state.session),
                "lang": lang,
                "root": str(root.resolve()),
                "labels": column_labels(),
                # the launch menu: the commands marked launchable in aura.core.commands, in order
                "commands": list(actions.launchable()),
            }
        )

    return [
        Route("/", page),
        Route("/api/session", session),
        Route("/api/hardware", hardware.endpoint),
        Mount("/static", StaticFiles(directory=STATIC)),
    ]


def create_app(root: Path, *, token: str | None = None) -> Starlette:
    """The app serving ``root`` (a runs folder). ``token``: required on every request when set."""
    root = Path(root)
    secret = secrets.token_bytes(32)
    folder, cache, hardware = RunsFolder(root), LogCache(), Hardware()

    def csrf_for(session: str) -> str:
        return hmac.new(secret, session.encode(), hashlib.sha256).hexdigest()

    async def guard(request: Request, call_next):
        given = given_token(
            query_token=request.query_params.get("token"),
            cookie_token=request.cookies.get(TOKEN_COOKIE),
            authorization=request.headers.get("authorization"),
        )
        if not token_matches(given, token):  # the rule aura serve applies too (aura.core.access)
            return JSONResponse({"error": "token required"}, status_code=401)
        session_id = request.cookies.get(SESSION_COOKIE) or ""
        new_session = len(session_id) != 43
        if new_session:
            session_id = secrets.token_urlsafe(32)
        request.state.session = session_id
        if request.method not in ("GET", "HEAD", "OPTIONS"):
            origin = request.headers.get("origin") or request.headers.get("referer")
            host = request.headers.get("host", "")
            if (
                not origin
                or urlsplit(origin).netloc != host
                or new_session
                or not hmac.compare_digest(request.headers.get(CSRF_HEADER, ""), csrf_for(session_id))
            ):
                return JSONResponse({"error": "cross-site request refused"}, status_code=403)
        response = await call_next(request)
        if new_session:
            response.set_cookie(SESSION_COOKIE, session_id, httponly=True, samesite="strict")
        if token is not None and request.query_params.get("token"):
            response.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="strict")
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["X-Frame-Options"] = "DENY"
        return response

    def prefetch() -> None:  # the runs read once when the server starts: the page's first load finds them
        with contextlib.suppress(Exception):
            for d in find_run_dirs(root):
                cache.describe(d)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        threading.Thread(target=prefetch, daemon=True, name="aura-studio-prefetch").start()
        yield
        hardware.close()

    routes = [
        *run_routes(folder, cache),
        *launch_routes(folder),
        *try_routes(folder, chat.Engines()),
        *pipeline_routes(folder),
        *page_routes(root, csrf_for, hardware),
    ]
    return Starlette(
        lifespan=lifespan,
        routes=routes,
        middleware=[Middleware(BaseHTTPMiddleware, dispatch=guard)],
        exception_handlers={AuraError: lambda request, exc: JSONResponse({"error": str(exc)}, status_code=400)},
    )
