"""The studio's web app (Starlette): the page, its static files and the JSON API under ``/api/``.

Security: off loopback every request needs the token (``?token=`` once, which sets a cookie, or an
``Authorization: Bearer`` header), else 401. State-changing requests are POSTs that must come from the
page itself: same Origin as the Host, and the ``X-Aura-CSRF`` header holding the token derived from the
browser's session cookie (a cross-site form or fetch can do neither). A run NAME is a folder directly
under the runs folder holding a run.json, or ``PIPELINE/STAGE``: a run that is a stage of a pipeline folder
(``pipeline.json``) directly under it; either reached without leaving it (no ``..`` or symlink out).
A pipeline's ``report.html`` is served with a policy that lets it load nothing and run no script.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import os
import secrets
import shlex
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from aura.core.access import TOKEN_COOKIE, given_token, token_matches
from aura.core.errors import AuraError
from aura.core.files import loads_json
from aura.core.i18n import current_lang
from aura.core.rundir import list_checkpoints
from aura.pipeline.state import STATE_FILE, describe, find_pipeline_dirs
from aura.studio import actions, chat
from aura.studio.metrics import LogCache
from aura.watch.runlog import column_labels
from aura.watch.runs import find_run_dirs

STATIC = Path(__file__).parent / "static"
SESSION_COOKIE, CSRF_HEADER = "aura_session", "x-aura-csrf"
MAX_POINTS = 2000
# report.html is self-contained: inline styles and SVG, nothing fetched, no script
REPORT_POLICY = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-ancestors 'none'"


def _plain(name: str) -> bool:
    """A single folder name: not empty, no separator, not ``.``/``..``, no NUL."""
    return bool(name) and name not in (".", "..") and not any(c in name for c in "/\\\0")


def create_app(root: Path, *, token: str | None = None) -> Starlette:
    """The app serving ``root`` (a runs folder). ``token``: required on every request when set."""
    root = Path(root)
    secret = secrets.token_bytes(32)
    cache = LogCache()
    engines = chat.Engines()
    shown: dict = {}
    monitor: dict = {}
    sampler = ThreadPoolExecutor(max_workers=1, thread_name_prefix="aura-studio-hardware")

    def csrf_for(session: str) -> str:
        return hmac.new(secret, session.encode(), hashlib.sha256).hexdigest()

    def inside(d: Path, parent: Path) -> bool:
        """``d`` is a real folder (no symlink) directly inside ``parent``."""
        try:
            return not d.is_symlink() and d.resolve(strict=True).parent == parent.resolve(strict=True)
        except (OSError, RuntimeError):
            return False

    def pipeline_dir_of(name: str) -> Path | None:
        d = root / name
        return d if _plain(name) and inside(d, root) and (d / STATE_FILE).is_file() else None

    def run_dir_of(name: str) -> Path | None:
        """NAME (a run directly in the folder) or PIPELINE/STAGE (a run that is a pipeline's stage)."""
        parts = name.split("/")
        if len(parts) == 2:
            pipe = pipeline_dir_of(parts[0])
            if pipe is None or not _plain(parts[1]):
                return None
            d, parent = pipe / parts[1], pipe
        elif len(parts) == 1 and _plain(name):
            d, parent = root / name, root
        else:
            return None
        return d if inside(d, parent) and (d / "run.json").is_file() else None

    def run_id(d: Path) -> str | None:
        """The NAME of the routes below, for runs directly in the folder or stages of its pipelines."""
        parent, real_root = d.parent.resolve(), root.resolve()
        if parent == real_root:
            return d.name
        if parent.parent == real_root and (d.parent / STATE_FILE).is_file() and run_dir_of(
                f"{d.parent.name}/{d.name}") is not None:
            return f"{d.parent.name}/{d.name}"
        return None

    def run_info(d: Path) -> dict:
        try:
            info = loads_json((d / "run.json").read_bytes())
        except (OSError, ValueError):
            return {}
        return info if isinstance(info, dict) else {}

    async def page(request: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})

    async def session(request: Request) -> Response:
        lang = current_lang() if os.environ.get("AURA_LANG") else \
            "es" if request.headers.get("accept-language", "es").lower().startswith("es") else "en"
        return JSONResponse({"csrf": csrf_for(request.state.session), "lang": lang,
                             "root": str(root.resolve()), "labels": column_labels()})

    async def runs(request: Request) -> Response:
        def describe_all():
            return [{**cache.describe(d), "id": run_id(d)} for d in find_run_dirs(root)]
        return JSONResponse(await asyncio.to_thread(describe_all))

    async def run(request: Request) -> Response:
        d = run_dir_of(request.path_params["name"])
        if d is None:
            return JSONResponse({"error": "not found"}, status_code=404)

        def detail():
            info = run_info(d)
            rec = cache.describe(d)
            cfg = {}
            for name in ("model_config.json", "training_args.json", "config.json"):
                if (d / name).is_file():
                    try:
                        cfg[name] = loads_json((d / name).read_bytes())
                    except (OSError, ValueError):
                        pass
            ckpts = [{"name": c.path.name, "path": str(c.path), "step": c.step, "kind": c.kind, "saved": c.saved}
                     for c in list_checkpoints(d)]
            log = actions.log_path(d)
            tail = log.read_bytes()[-8000:].decode("utf-8", "replace") if log.is_file() else ""
            final = d / "final"
            return {**rec, "run_json": info, "history": info.get("history", []), "config": cfg,
                    "checkpoints": ckpts, "studio_log": tail, "studio_log_path": str(log),
                    # a LoRA run's final/ is an adapter: `aura export gguf` refuses it (merge it first)
                    "final_adapter": (final / "adapter_config.json").is_file(),
                    "pipeline": d.parent.name if d.parent.resolve() != root.resolve() else None}
        return JSONResponse(await asyncio.to_thread(detail))

    async def metrics(request: Request) -> Response:
        d = run_dir_of(request.path_params["name"])
        if d is None:
            return JSONResponse({"error": "not found"}, status_code=404)
        try:
            max_points = max(4, min(100_000, int(request.query_params.get("max_points", MAX_POINTS))))
        except ValueError:
            return JSONResponse({"error": "max_points must be an integer"}, status_code=400)
        def points():
            log = cache.log(d)
            key = (log, log.n, max_points)  # the log object itself: a log read again is another one
            if shown.get(d, (None,))[0] != key:  # an unchanged log is not downsampled again
                shown[d] = (key, cache.series(d, max_points))
            return shown[d][1]
        try:
            return JSONResponse(await asyncio.to_thread(points))
        except AuraError as e:
            return JSONResponse({"columns": [], "series": {}, "rows": 0, "warning": str(e)})

    async def hardware(request: Request) -> Response:
        def sample():
            from aura.watch import monitor as mon
            import psutil

            if "gpus" not in monitor:  # cpu_percent measures since its previous call: give the first a window
                monitor["gpus"] = mon.GPUReader()
                psutil.cpu_percent(interval=None)
                monitor["since"] = time.monotonic()
                time.sleep(0.5)
            sample = mon.take_sample(monitor["gpus"], pid=None)
            now = time.monotonic()
            sample["cpu_window_s"], monitor["since"] = round(now - monitor["since"], 3), now
            return sample
        # one thread for every sample: psutil keeps cpu_percent's previous call per thread, and a sample taken
        # by another worker thread of the pool measured from nothing ("CPU 0 %" under full load)
        return JSONResponse(await asyncio.get_running_loop().run_in_executor(sampler, sample))

    async def form(request: Request) -> Response:
        try:
            fields = await asyncio.to_thread(actions.form, request.path_params["command"])
        except AuraError as e:
            return JSONResponse({"error": str(e)}, status_code=404)
        command = request.path_params["command"]
        return JSONResponse({"command": command, "fields": fields, "name": actions.free_name(root, command)})

    async def body(request: Request) -> dict:
        try:
            data = json.loads(await request.body() or b"{}")
        except ValueError:
            raise AuraError("JSON body expected") from None
        if not isinstance(data, dict):
            raise AuraError("JSON object expected")
        return data

    async def launch(request: Request) -> Response:
        data = await body(request)
        values = data.get("values") or {}
        if not isinstance(values, dict):
            raise AuraError("'values' must be an object")
        return JSONResponse(await asyncio.to_thread(actions.launch, str(data.get("command")),
                                                    str(data.get("name") or ""), values, root))

    async def preview(request: Request) -> Response:
        data = await body(request)
        name = actions.check_name(str(data.get("name") or ""))
        argv = await asyncio.to_thread(actions.build_argv, str(data.get("command")), data.get("values") or {},
                                       (root / name).resolve())
        # a folder that exists is shown under the name as it is typed, before Launch refuses it
        return JSONResponse({"argv": argv, "command": shlex.join(["aura", *argv]), "clash": actions.clash(name, root)})

    async def models(request: Request) -> Response:
        return JSONResponse({"models": await asyncio.to_thread(chat.models, root), "loaded": engines.loaded()})

    async def chat_answer(request: Request) -> Response:
        data = await body(request)
        path = await asyncio.to_thread(chat.model_path, root, data.get("model"))
        cfg, messages = chat.chat_config(path, data), chat.check_messages(data.get("messages"))
        return StreamingResponse(chat.stream_answer(engines, cfg, messages), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    async def job(request: Request) -> Response:
        return JSONResponse(await asyncio.to_thread(actions.job, request.path_params["name"], root))

    async def delete(request: Request) -> Response:
        d = run_dir_of(request.path_params["name"])
        if d is None:
            return JSONResponse({"error": "not found"}, status_code=404)
        actions.stage_refusal(d, root)
        data = await body(request)
        return JSONResponse(await asyncio.to_thread(actions.delete, d, run_info(d), root, data.get("confirm")))

    def resume(d: Path, info: dict, rec: dict) -> dict:
        actions.stage_refusal(d, root)
        return actions.resume(d, info, rec["resume_command"])

    def on_run(fn):
        async def handler(request: Request) -> Response:
            d = run_dir_of(request.path_params["name"])
            if d is None:
                return JSONResponse({"error": "not found"}, status_code=404)
            rec = await asyncio.to_thread(cache.describe, d)
            info = run_info(d)
            return JSONResponse(await asyncio.to_thread(fn, d, info, rec))
        return handler

    async def pipelines(request: Request) -> Response:
        def describe_all():
            out = []
            for d in find_pipeline_dirs(root):
                try:
                    p = describe(d)
                except AuraError as e:
                    p = {"path": str(d), "name": d.name, "stages": [], "report": False, "warning": str(e)}
                for s in p["stages"]:  # the stage's run page, when the stage is a run
                    s["run"] = f"{d.name}/{s['name']}" if s["run"] and run_dir_of(f"{d.name}/{s['name']}") else None
                out.append({**p, "id": d.name})
            return out
        return JSONResponse(await asyncio.to_thread(describe_all))

    async def report(request: Request) -> Response:
        d = pipeline_dir_of(request.path_params["name"])
        page_file = d / "report.html" if d is not None else None
        if page_file is None or page_file.is_symlink() or not page_file.is_file():
            return JSONResponse({"error": "not found"}, status_code=404)
        return Response(await asyncio.to_thread(page_file.read_bytes), media_type="text/html; charset=utf-8",
                        headers={"Content-Security-Policy": REPORT_POLICY, "Cache-Control": "no-store"})

    async def guard(request: Request, call_next):
        given = given_token(query_token=request.query_params.get("token"),
                            cookie_token=request.cookies.get(TOKEN_COOKIE),
                            authorization=request.headers.get("authorization"))
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
            if (not origin or urlsplit(origin).netloc != host or new_session
                    or not hmac.compare_digest(request.headers.get(CSRF_HEADER, ""), csrf_for(session_id))):
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
        sampler.shutdown(wait=False)

    app = Starlette(lifespan=lifespan, routes=[
        Route("/", page),
        Route("/api/session", session),
        Route("/api/runs", runs),
        Route("/api/pipelines", pipelines),
        Route("/pipelines/{name}/report.html", report),
        # NAME may be PIPELINE/STAGE: the routes with a suffix come before the bare one
        Route("/api/runs/{name:path}/metrics", metrics),
        Route("/api/hardware", hardware),
        Route("/api/forms/{command}", form),
        Route("/api/preview", preview, methods=["POST"]),
        Route("/api/launch", launch, methods=["POST"]),
        Route("/api/jobs/{name}", job),
        Route("/api/models", models),
        Route("/api/chat", chat_answer, methods=["POST"]),
        Route("/api/runs/{name:path}/delete", delete, methods=["POST"]),
        Route("/api/runs/{name:path}/stop", on_run(lambda d, info, rec: actions.stop(d, info)), methods=["POST"]),
        Route("/api/runs/{name:path}/resume", on_run(resume), methods=["POST"]),
        Route("/api/runs/{name:path}", run),
        Mount("/static", StaticFiles(directory=STATIC)),
    ], middleware=[Middleware(BaseHTTPMiddleware, dispatch=guard)],
        exception_handlers={AuraError: lambda request, exc: JSONResponse({"error": str(exc)}, status_code=400)})

    return app
