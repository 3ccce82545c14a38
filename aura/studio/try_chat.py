"""**Try**: chat on the page with a run's final model, a checkpoint or an exported GGUF, tokens streaming.

The answer comes from ``aura.inference`` exactly as in ``aura chat``: ``ChatConfig`` validates the sampling
values (the CLI's messages), ``open_engine`` loads the model (transformers, or llama.cpp for a GGUF, each
with the model's own chat template), ``engine.stream`` yields the text pieces. Loaded engines stay in a
small LRU cache (``MAX_MODELS``); each generates one answer at a time (its lock), in a worker thread, off
the event loop; the pieces reach the browser as Server-Sent Events (``text/event-stream``) of a POST, so
the page reads them with ``fetch``. A model is named by its path relative to the runs folder, and only the
models ``models()`` lists can be loaded: final/, checkpoints and .gguf files of folders directly under it,
none reached through a symbolic link.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections import OrderedDict
from pathlib import Path

from aura.core.errors import AuraError
from aura.core.i18n import Messages
from aura.core.rundir import list_checkpoints
from aura.inference.backends import open_engine
from aura.inference.chat import ChatConfig
from aura.inference.generate import sampling_of

M = Messages(
    "studio_chat",
    {
        "unknown_model": (
            "{model!r} no es un modelo de la carpeta de ejecuciones (final/, un checkpoint o un .gguf "
            "de una ejecución): elige uno de la lista.",
            "{model!r} is not a model of the runs folder (final/, a checkpoint or a .gguf of a run): "
            "pick one from the list.",
        ),
        "bad_messages": (
            "'messages' debe ser una lista no vacía de objetos con 'role' (user o assistant) y 'content' "
            "(texto) que termina con uno del usuario.",
            "'messages' must be a non-empty list of objects with 'role' (user or assistant) and 'content' "
            "(text), ending with one from the user.",
        ),
        "bad_value": (
            "'{field}' debe ser un número; recibido {value!r}.",
            "'{field}' must be a number; got {value!r}.",
        ),
    },
)

MAX_MODELS = 2  # engines kept loaded in the studio process
MAX_TURNS, MAX_CHARS = 200, 200_000
SAMPLING_FIELDS = {
    "max_new_tokens": int,
    "temperature": float,
    "top_k": int,
    "top_p": float,
    "repetition_penalty": float,
    "seed": int,
}


def _real_inside(path: Path, real_root: Path) -> bool:
    try:
        return path.resolve(strict=True).is_relative_to(real_root) and not path.is_symlink()
    except (OSError, RuntimeError):
        return False


def _ggufs(folder: Path) -> list[Path]:
    try:
        return sorted(p for p in folder.iterdir() if p.suffix.lower() == ".gguf" and p.is_file() and not p.is_symlink())
    except OSError:
        return []


def models(root: Path) -> list[dict]:
    """The models of the runs folder the page can chat with: {id (path relative to the folder), kind, run}."""
    out: list[dict] = []
    real_root = root.resolve()
    try:
        folders = sorted(d for d in root.iterdir() if d.is_dir() and not d.is_symlink() and not d.name.startswith("."))
    except OSError:
        return out
    for d in folders:
        if not _real_inside(d, real_root):
            continue
        if (d / "run.json").is_file():
            final = d / "final"
            weights = (final / "config.json").is_file() or (final / "adapter_config.json").is_file()
            if weights and not final.is_symlink():
                out.append({"id": f"{d.name}/final", "kind": "final", "run": d.name})
            for c in reversed(list_checkpoints(d)):
                if not c.path.is_symlink():
                    out.append({"id": f"{d.name}/{c.path.name}", "kind": "checkpoint", "run": d.name, "step": c.step})
        subs = [d] + sorted(
            s
            for s in (d.iterdir() if os.access(d, os.R_OK) else ())
            if s.is_dir() and not s.is_symlink() and not s.name.startswith(".")
        )
        for folder in subs:
            for g in _ggufs(folder):
                out.append({"id": g.relative_to(root).as_posix(), "kind": "gguf", "run": d.name})
    return out


def model_path(root: Path, model_id) -> Path:
    """The path of a model the page names, refused unless ``models()`` lists it (no way out of the folder)."""
    if isinstance(model_id, str) and any(m["id"] == model_id for m in models(root)):
        path = root / model_id
        if _real_inside(path, root.resolve()):
            return path
    raise AuraError(M("unknown_model", model=model_id))


def check_messages(messages) -> list[dict]:
    ok = (
        isinstance(messages, list)
        and 0 < len(messages) <= MAX_TURNS
        and all(
            isinstance(m, dict) and m.get("role") in ("user", "assistant") and isinstance(m.get("content"), str)
            for m in messages
        )
        and messages[-1]["role"] == "user"
    )
    if not ok or sum(len(m["content"]) for m in messages) > MAX_CHARS:
        raise AuraError(M("bad_messages"))
    return [{"role": m["role"], "content": m["content"]} for m in messages]


def chat_config(path: Path, data: dict):
    """``aura chat``'s own config for the request's sampling values: the CLI's validation and messages."""
    values = {}
    for name, kind in SAMPLING_FIELDS.items():
        if data.get(name) is not None:
            try:
                values[name] = kind(data[name])
            except (TypeError, ValueError):
                raise AuraError(M("bad_value", field=name, value=data[name])) from None
    return ChatConfig(model=str(path), system=str(data.get("system") or ""), **values)


class Engines:
    """At most ``size`` loaded models (least recently used goes first); each with a lock, one answer at a time."""

    def __init__(self, size: int = MAX_MODELS):
        self.size = size
        self._items: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, cfg) -> tuple[object, threading.Lock]:
        key = (str(Path(cfg.model).resolve()), cfg.dtype, cfg.n_ctx)
        with self._lock:  # one load at a time: two requests for a model load it once
            if key not in self._items:
                engine = open_engine(cfg.model, cfg.adapter, dtype=cfg.dtype, n_ctx=cfg.n_ctx, seed=cfg.seed)
                self._items[key] = (engine, threading.Lock())
                while len(self._items) > self.size:  # an evicted engine still answering finishes first
                    self._items.popitem(last=False)
            self._items.move_to_end(key)
            return self._items[key]

    def loaded(self) -> list[str]:
        with self._lock:
            return [k[0] for k in self._items]


def answer(engines: Engines, cfg, messages: list[dict], emit, stop: threading.Event) -> None:
    """Generate one answer in this (worker) thread: ``emit(event, data)`` for loading, a context cut
    (``notice``: the message ``aura chat`` prints), each piece, done/error."""
    try:
        emit("loading", {"model": cfg.model})
        engine, lock = engines.get(cfg)
        sampling = sampling_of(cfg)
        sampling.seed = cfg.seed + sum(m["role"] == "user" for m in messages)  # as aura chat: per turn
        full = ([{"role": "system", "content": cfg.system}] if cfg.system else []) + messages
        with lock:
            emit(
                "start",
                {"backend": "llama.cpp" if engine.kind == "gguf" else "PyTorch", "template": engine.has_template},
            )
            out: list = []
            t0 = time.perf_counter()
            stream = engine.stream(
                messages=full,
                sampling=sampling,
                out=out,  # context cuts: on the page
                notify=lambda text: emit("notice", {"text": text}),
            )
            for piece in stream:
                if stop.is_set():  # the browser went away: stop generating too
                    stream.close()
                    return
                emit("piece", {"text": piece})
            seconds = max(time.perf_counter() - t0, 1e-9)
            res = out[0]
            emit(
                "done",
                {
                    "text": res.text,
                    "tokens": res.tokens,
                    "seconds": round(seconds, 3),
                    "tokens_per_s": round(res.tokens / seconds, 2),
                },
            )
    except AuraError as e:
        emit("error", {"error": str(e)})
    except Exception as e:  # noqa: BLE001 - shown on the page, the studio keeps serving
        emit("error", {"error": f"{type(e).__name__}: {e}"})


async def stream_answer(engines: Engines, cfg, messages: list[dict]):
    """Server-Sent Events of one answer, generated in a worker thread; stops it when the client leaves."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()
    stop = threading.Event()

    def emit(event: str, data: dict) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, (event, data))

    def work() -> None:
        try:
            answer(engines, cfg, messages, emit, stop)
        finally:
            loop.call_soon_threadsafe(queue.put_nowait, None)

    threading.Thread(target=work, daemon=True, name="aura-studio-chat").start()
    try:
        while (item := await queue.get()) is not None:
            event, data = item
            yield f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"
    finally:
        stop.set()
