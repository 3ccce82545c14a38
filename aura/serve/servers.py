"""The engines behind ``aura serve``: each one's own OpenAI-compatible server, built as its authors build it.

- ``transformers``: the app of ``transformers serve`` (``transformers.cli.serve.Serve``), pinned to one
  model folder; Serve builds it and Aura runs it (Serve's own server is kept from starting), behind the token
  guard.
- ``llama.cpp``: llama-cpp-python's server (``llama_cpp.server.app.create_app``) for a GGUF file; its
  chat template is the GGUF's own (``tokenizer.chat_template``), as in ``aura chat``.
- ``vllm``: vLLM's OpenAI server (``vllm.entrypoints.openai.api_server``) in its own process, when vLLM
  is installed and a GPU is present (or, asked for by name, vLLM's CPU build); an adapter is served as a LoRA
  module there.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ENGINES = ("auto", "transformers", "vllm", "llama.cpp")
OPENAI_PATHS = ("/v1/completions", "/v1/chat/completions")
VLLM_LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)  # vLLM's accepted --max-lora-rank values


def choose_engine(kind: str, requested: str, *, vllm_installed: bool, gpu: bool, vllm_cpu: bool = False) -> str:
    """The engine for a model of ``kind`` ("hf", "adapter" or "gguf"); raises ValueError with a message
    key when the requested one cannot serve it. ``vllm_cpu``: vLLM's CPU build is installed, so an explicit
    ``--engine vllm`` runs without a GPU (``auto`` never picks it there: transformers starts sooner)."""
    if kind == "gguf":
        if requested not in ("auto", "llama.cpp"):
            raise ValueError("engine_gguf")
        return "llama.cpp"
    if requested == "llama.cpp":
        raise ValueError("engine_needs_gguf")
    if requested == "vllm" and not (vllm_installed and (gpu or vllm_cpu)):
        raise ValueError("vllm_unavailable")
    if requested == "auto":
        return "vllm" if vllm_installed and gpu else "transformers"
    return requested


def transformers_app(model_dir: str, *, dtype: str):
    """The FastAPI app of ``transformers serve MODEL_DIR`` with the model loaded (raises ImportError when
    transformers' serving extra is missing)."""
    from transformers.utils.import_utils import is_serve_available

    if not is_serve_available():
        raise ImportError("transformers serve needs fastapi, uvicorn, pydantic and openai")
    import inspect

    from transformers.cli.serve import Serve

    if "non_blocking" in inspect.signature(Serve.__init__).parameters:  # transformers <= 5.24

        class _Built(Serve):
            def start_server(self):  # Aura runs the app itself, behind its token guard
                pass

        built = _Built(force_model=model_dir, dtype=dtype, non_blocking=True, log_level="warning")
        return built.server.config.app
    # transformers >= 5.25: Serve builds the app and runs uvicorn's server in one call; the server it makes is
    # kept from running, and its app is what Aura runs
    import uvicorn

    made = {}

    class _Kept:
        def __init__(self, config):
            made["app"] = config.app

        def run(self, sockets=None):
            pass

    server, uvicorn.Server = uvicorn.Server, _Kept
    try:
        Serve(force_model=model_dir, dtype=dtype, log_level="warning")
    finally:
        uvicorn.Server = server
    return made["app"]


def llama_cpp_app(path: Path, *, alias: str, n_ctx: int):
    """llama-cpp-python's server app for one GGUF file, served under ``alias``."""
    from llama_cpp.server.app import create_app
    from llama_cpp.server.settings import ModelSettings, ServerSettings

    from aura.inference.loading import llama_cpp_weights_plain

    # interrupt_requests=False: by default a streamed answer stops ("[DONE]") as soon as another request
    # waits, so two clients at once cut each other's answers short; here they queue and each completes
    with llama_cpp_weights_plain():  # the app loads its model here
        return create_app(
            server_settings=ServerSettings(interrupt_requests=False),
            model_settings=[ModelSettings(model=str(path), model_alias=alias, n_ctx=n_ctx, verbose=False)],
        )


# llama-cpp-python's server penalises repeats by default (repeat_penalty 1.1), which the OpenAI API has no
# field for: an OpenAI request asks for no penalty, as aura generate and transformers serve apply.
LLAMA_CPP_DEFAULTS = {"repeat_penalty": 1.0}


async def forward_body(app, scope, receive, send, body: bytes, path: str | None = None) -> None:
    """``app`` called with ``body`` as the request's whole body (its Content-Length set), at ``path`` if given."""
    headers = [(k, v) for k, v in scope["headers"] if k.lower() != b"content-length"]
    headers.append((b"content-length", str(len(body)).encode()))
    replayed = False

    async def replay():
        nonlocal replayed
        if replayed:
            return await receive()  # after the body: wait for the disconnect, as the engine expects
        replayed = True
        return {"type": "http.request", "body": body, "more_body": False}

    moved = {"path": path, "raw_path": path.encode()} if path is not None else {}
    await app({**scope, **moved, "headers": headers}, replay, send)


async def read_body(receive) -> bytes | None:
    """An ASGI request's whole body, or None when the client went away before sending it."""
    chunks, more = [], True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    return b"".join(chunks)


class RequestDefaults:
    """ASGI middleware: fields a JSON request to ``paths`` did not set are filled from ``defaults``."""

    def __init__(self, app, defaults: dict, paths=OPENAI_PATHS):
        self.app, self.defaults, self.paths = app, defaults, paths

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] not in self.paths:
            return await self.app(scope, receive, send)
        body = await read_body(receive)
        if body is None:  # the client went away
            return
        try:
            data = json.loads(body)
        except ValueError:
            data = None  # the engine answers a malformed body itself
        if isinstance(data, dict):
            body = json.dumps({**self.defaults, **data}).encode()
        await forward_body(self.app, scope, receive, send, body)


def vllm_lora_rank(adapter_dir: Path) -> int:
    """The smallest ``--max-lora-rank`` vLLM accepts that holds the adapter's rank."""
    config = json.loads((adapter_dir / "adapter_config.json").read_text(encoding="utf-8"))
    ranks = [int(config.get("r") or 8), *map(int, (config.get("rank_pattern") or {}).values())]
    return next((r for r in VLLM_LORA_RANKS if r >= max(ranks)), max(ranks))


def vllm_command(
    model_dir: Path, *, name: str, host: str, port: int, dtype: str, adapter: Path | None = None, adapter_name: str = ""
) -> list[str]:
    """vLLM's own OpenAI server for ``model_dir`` (the token goes in VLLM_API_KEY, not on the command
    line, where ``ps`` would show it); an adapter is served as the LoRA module ``adapter_name``."""
    argv = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--served-model-name",
        name,
        "--host",
        host,
        "--port",
        str(port),
        "--dtype",
        dtype,
    ]
    if adapter is not None:
        argv += [
            "--enable-lora",
            "--max-lora-rank",
            str(vllm_lora_rank(adapter)),
            "--lora-modules",
            f"{adapter_name}={adapter}",
        ]
    return argv
