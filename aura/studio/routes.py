"""The studio's JSON API, one router per concern: each function returns the Starlette routes of one part of
the page (runs, launch, try, pipelines); ``app.create_app`` puts them together behind the token and CSRF
middleware. Every NAME is resolved by ``RunsFolder`` (aura.studio.folder); what the page may change goes
through ``aura.studio.actions``.
"""

from __future__ import annotations

import asyncio
import json
import shlex
from pathlib import Path

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from aura.core.errors import AuraError
from aura.core.files import loads_json
from aura.core.rundir import list_checkpoints
from aura.pipeline.pipeline_state import describe, find_pipeline_dirs
from aura.studio import actions, try_chat as chat
from aura.studio.folder import RunsFolder, run_info
from aura.studio.page_data import LogCache
from aura.watch.runs import find_run_dirs

MAX_POINTS = 2000
# report.html is self-contained: inline styles and SVG, nothing fetched, no script
REPORT_POLICY = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-ancestors 'none'"


def not_found() -> JSONResponse:
    return JSONResponse({"error": "not found"}, status_code=404)


async def json_body(request: Request) -> dict:
    """A POST's JSON object (an empty body is ``{}``); anything else is the caller's mistake (400)."""
    try:
        data = json.loads(await request.body() or b"{}")
    except ValueError:
        raise AuraError("JSON body expected") from None
    if not isinstance(data, dict):
        raise AuraError("JSON object expected")
    return data


def run_detail(folder: RunsFolder, cache: LogCache, d: Path) -> dict:
    """A run's page: its record, run.json, configs, checkpoints and the studio's log of it."""
    info = run_info(d)
    rec = cache.describe(d)
    cfg = {}
    for name in ("model_config.json", "training_args.json", "config.json"):
        if (d / name).is_file():
            try:
                cfg[name] = loads_json((d / name).read_bytes())
            except (OSError, ValueError):
                pass
    ckpts = [
        {"name": c.path.name, "path": str(c.path), "step": c.step, "kind": c.kind, "saved": c.saved}
        for c in list_checkpoints(d)
    ]
    log = actions.log_path(d)
    tail = log.read_bytes()[-8000:].decode("utf-8", "replace") if log.is_file() else ""
    final = d / "final"
    return {
        **rec,
        "run_json": info,
        "history": info.get("history", []),
        "config": cfg,
        "checkpoints": ckpts,
        "studio_log": tail,
        "studio_log_path": str(log),
        # a LoRA run's final/ is an adapter: `aura export gguf` refuses it (merge it first)
        "final_adapter": (final / "adapter_config.json").is_file(),
        "pipeline": d.parent.name if folder.is_stage(d) else None,
    }


def run_routes(folder: RunsFolder, cache: LogCache) -> list[Route]:
    """The runs: list, one run's page and curves, and what the page may do to it (stop, resume, delete)."""
    root = folder.root
    shown: dict = {}  # run folder -> (its log's key, the series last served)

    async def runs(request: Request) -> Response:
        def describe_all():
            return [{**cache.describe(d), "id": folder.run_id(d)} for d in find_run_dirs(root)]

        return JSONResponse(await asyncio.to_thread(describe_all))

    async def run(request: Request) -> Response:
        d = folder.run_dir(request.path_params["name"])
        if d is None:
            return not_found()
        return JSONResponse(await asyncio.to_thread(run_detail, folder, cache, d))

    async def metrics(request: Request) -> Response:
        d = folder.run_dir(request.path_params["name"])
        if d is None:
            return not_found()
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

    async def delete(request: Request) -> Response:
        d = folder.run_dir(request.path_params["name"])
        if d is None:
            return not_found()
        actions.stage_refusal(d, root)
        data = await json_body(request)
        return JSONResponse(await asyncio.to_thread(actions.delete, d, run_info(d), root, data.get("confirm")))

    def resume(d: Path, info: dict, rec: dict) -> dict:
        actions.stage_refusal(d, root)
        return actions.resume(d, info, rec["resume_command"])

    def on_run(fn):
        async def handler(request: Request) -> Response:
            d = folder.run_dir(request.path_params["name"])
            if d is None:
                return not_found()
            rec = await asyncio.to_thread(cache.describe, d)
            info = run_info(d)
            return JSONResponse(await asyncio.to_thread(fn, d, info, rec))

        return handler

    return [
        Route("/api/runs", runs),
        # NAME may be PIPELINE/STAGE: the routes with a suffix come before the bare one
        Route("/api/runs/{name:path}/metrics", metrics),
        Route("/api/runs/{name:path}/delete", delete, methods=["POST"]),
        Route("/api/runs/{name:path}/stop", on_run(lambda d, info, rec: actions.stop(d, info)), methods=["POST"]),
        Route("/api/runs/{name:path}/resume", on_run(resume), methods=["POST"]),
        Route("/api/runs/{name:path}", run),
    ]


def launch_routes(folder: RunsFolder) -> list[Route]:
    """Launch: a command's form, the command line it would run, and the jobs started from the page."""
    root = folder.root

    async def form(request: Request) -> Response:
        try:
            fields = await asyncio.to_thread(actions.form, request.path_params["command"])
        except AuraError as e:
            return JSONResponse({"error": str(e)}, status_code=404)
        command = request.path_params["command"]
        return JSONResponse({"command": command, "fields": fields, "name": actions.free_name(root, command)})

    async def launch(request: Request) -> Response:
        data = await json_body(request)
        values = data.get("values") or {}
        if not isinstance(values, dict):
            raise AuraError("'values' must be an object")
        return JSONResponse(
            await asyncio.to_thread(actions.launch, str(data.get("command")), str(data.get("name") or ""), values, root)
        )

    async def preview(request: Request) -> Response:
        data = await json_body(request)
        name = actions.check_name(str(data.get("name") or ""))
        argv = await asyncio.to_thread(
            actions.build_argv, str(data.get("command")), data.get("values") or {}, (root / name).resolve()
        )
        # a folder that exists is shown under the name as it is typed, before Launch refuses it
        return JSONResponse({"argv": argv, "command": shlex.join(["aura", *argv]), "clash": actions.clash(name, root)})

    async def job(request: Request) -> Response:
        return JSONResponse(await asyncio.to_thread(actions.job, request.path_params["name"], root))

    return [
        Route("/api/forms/{command}", form),
        Route("/api/preview", preview, methods=["POST"]),
        Route("/api/launch", launch, methods=["POST"]),
        Route("/api/jobs/{name}", job),
    ]


def try_routes(folder: RunsFolder, engines: chat.Engines) -> list[Route]:
    """Try: the models of the runs folder and a chat with one of them, streamed as Server-Sent Events."""
    root = folder.root

    async def models(request: Request) -> Response:
        return JSONResponse({"models": await asyncio.to_thread(chat.models, root), "loaded": engines.loaded()})

    async def chat_answer(request: Request) -> Response:
        data = await json_body(request)
        path = await asyncio.to_thread(chat.model_path, root, data.get("model"))
        cfg, messages = chat.chat_config(path, data), chat.check_messages(data.get("messages"))
        return StreamingResponse(
            chat.stream_answer(engines, cfg, messages),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    return [Route("/api/models", models), Route("/api/chat", chat_answer, methods=["POST"])]


def pipeline_routes(folder: RunsFolder) -> list[Route]:
    """The pipeline folders: each with its stages' status (linked to their run pages) and its report."""
    root = folder.root

    async def pipelines(request: Request) -> Response:
        def describe_all():
            out = []
            for d in find_pipeline_dirs(root):
                try:
                    p = describe(d)
                except AuraError as e:
                    p = {"path": str(d), "name": d.name, "stages": [], "report": False, "warning": str(e)}
                for s in p["stages"]:  # the stage's run page, when the stage is a run
                    s["run"] = f"{d.name}/{s['name']}" if s["run"] and folder.run_dir(f"{d.name}/{s['name']}") else None
                out.append({**p, "id": d.name})
            return out

        return JSONResponse(await asyncio.to_thread(describe_all))

    async def report(request: Request) -> Response:
        d = folder.pipeline_dir(request.path_params["name"])
        page_file = d / "report.html" if d is not None else None
        if page_file is None or page_file.is_symlink() or not page_file.is_file():
            return not_found()
        return Response(
            await asyncio.to_thread(page_file.read_bytes),
            media_type="text/html; charset=utf-8",
            headers={"Content-Security-Policy": REPORT_POLICY, "Cache-Control": "no-store"},
        )

    return [Route("/api/pipelines", pipelines), Route("/pipelines/{name}/report.html", report)]
