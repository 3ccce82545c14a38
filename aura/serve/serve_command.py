"""``aura serve MODEL``: an OpenAI-compatible server (``/v1/models``, ``/v1/chat/completions`` with streaming,
``/v1/completions``) on the engine that fits the model (``aura.serve.servers``).

Aura's part is the glue: the engine chosen from the model (a GGUF file -> llama.cpp; a Hugging Face folder
-> vLLM when it is installed and a GPU is present, else transformers), an adapter merged into a temporary
copy with ``aura merge``'s own code (or served as a LoRA module by vLLM), the token rule of ``aura studio``
(``aura.core.access``: none on loopback, required on any other address) and the refusals of bad input
before anything loads: a missing model, a GGUF with ``--adapter``, a port in use.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from aura.core import console
from aura.core.access import token_for
from aura.core.config import arg
from aura.core.errors import AuraError
from aura.core.i18n import Messages
from aura.serve.servers import ENGINES

M = Messages(
    "serve",
    {
        "need_model": (
            "Falta el MODELO: un directorio Hugging Face, un checkpoint, un adaptador o un archivo "
            ".gguf (p. ej. aura serve runs/mi-modelo/final).",
            "MODEL is missing: a Hugging Face dir, a checkpoint, an adapter or a .gguf file "
            "(e.g. aura serve runs/my-model/final).",
        ),
        "bad_port": (
            "--port debe estar entre 1 y 65535; recibido {port}.",
            "--port must be between 1 and 65535; got {port}.",
        ),
        "port_busy": (
            "El puerto {port} de {host} ya está en uso (otro servidor escucha en él): elige otro con "
            "--port, o detén ese servidor.",
            "Port {port} on {host} is already in use (another server listens on it): pick another "
            "with --port, or stop that server.",
        ),
        "bad_host": (
            "No se puede escuchar en {host}:{port} ({err}): --host debe ser una dirección de esta "
            "máquina (127.0.0.1, 0.0.0.0 o la IP de una de sus interfaces).",
            "Cannot listen on {host}:{port} ({err}): --host must be an address of this machine "
            "(127.0.0.1, 0.0.0.0 or the IP of one of its interfaces).",
        ),
        "engine_gguf": (
            "--engine {engine} no lee archivos GGUF: un .gguf se sirve con llama.cpp (--engine auto "
            "o llama.cpp); para {engine}, sirve el directorio Hugging Face del que se exportó.",
            "--engine {engine} does not read GGUF files: a .gguf is served by llama.cpp (--engine "
            "auto or llama.cpp); for {engine}, serve the Hugging Face dir it was exported from.",
        ),
        "engine_needs_gguf": (
            "--engine llama.cpp necesita un archivo .gguf y {path} no lo es: expórtalo con "
            "aura export gguf --model {path}, o usa --engine auto.",
            "--engine llama.cpp needs a .gguf file and {path} is not one: export it with "
            "aura export gguf --model {path}, or use --engine auto.",
        ),
        "vllm_unavailable": (
            "--engine vllm necesita vLLM instalado (pip install vllm) y una GPU; aquí "
            "vLLM {vllm} y GPU {gpu}. Usa --engine auto (transformers en CPU).",
            "--engine vllm needs vLLM installed (pip install vllm) and a GPU; here vLLM "
            "{vllm} and GPU {gpu}. Use --engine auto (transformers on the CPU).",
        ),
        "missing": (
            "aura serve con {engine} necesita paquetes que faltan ({err}): pip install -e '.[serve]'.",
            "aura serve with {engine} needs missing packages ({err}): pip install -e '.[serve]'.",
        ),
        "merging": (
            "Fusionando el adaptador {adapter} en una copia temporal de {base} (se borra al terminar)…",
            "Merging the adapter {adapter} into a temporary copy of {base} (deleted on exit)…",
        ),
        "loading": ("Cargando {model} en {engine}…", "Loading {model} in {engine}…"),
        "serving": (
            "API compatible con OpenAI en {url} (motor {engine}); modelo: {name}",
            "OpenAI-compatible API at {url} (engine {engine}); model: {name}",
        ),
        "token_note": (
            "La dirección no es local: cada petición necesita el token {token} (el api_key del "
            "cliente de OpenAI, o la cabecera Authorization: Bearer).",
            "The address is not local: every request needs the token {token} (the OpenAI client's "
            "api_key, or the Authorization: Bearer header).",
        ),
        "stop_note": ("Ctrl+C detiene el servidor.", "Ctrl+C stops the server."),
        "yes": ("sí", "yes"),
        "no": ("no", "no"),
    },
)


@dataclass
class ServeConfig:
    model: str = arg(
        "",
        es="Modelo: directorio Hugging Face, checkpoint, adaptador o archivo .gguf.",
        en="Model: Hugging Face dir, checkpoint, adapter or .gguf file.",
        positional=True,
        metavar="MODEL",
    )
    adapter: str = arg(
        "",
        es="Adaptador LoRA/QLoRA sobre MODEL (se fusiona en una copia temporal; con vLLM se sirve como LoRA).",
        en="LoRA/QLoRA adapter on top of MODEL (merged into a temporary copy; served as a LoRA by vLLM).",
    )
    host: str = arg(
        "127.0.0.1",
        es="Dirección donde escuchar (fuera de loopback se exige un token).",
        en="Address to listen on (off loopback a token is required).",
    )
    port: int = arg(8000, es="Puerto.", en="Port.")
    token: str | None = arg(
        None,
        es="Token de acceso, el api_key de los clientes (fuera de loopback: se genera uno si no se da).",
        en="Access token, the clients' api_key (off loopback: one is generated when not given).",
    )
    engine: str = arg(
        "auto",
        es="Motor: auto (GGUF -> llama.cpp; Hugging Face -> vLLM con GPU, si no transformers).",
        en="Engine: auto (GGUF -> llama.cpp; Hugging Face -> vLLM with a GPU, else transformers).",
        choices=ENGINES,
    )
    dtype: str = arg(
        "auto",
        es="Tipo de los pesos (transformers, vLLM; auto = el del modelo).",
        en="Weight dtype (transformers, vLLM; auto = the model's).",
        choices=("auto", "float32", "bfloat16", "float16"),
    )
    n_ctx: int = arg(0, es="Contexto para GGUF (0 = el del modelo).", en="Context for GGUF (0 = the model's).")
    allow_other_base: bool = arg(
        False,
        es="Usar el adaptador aunque se entrenara sobre otro modelo base (distinto config.json o embeddings).",
        en="Use the adapter even if it was trained on another base model (different config.json or embeddings).",
    )

    def __post_init__(self):
        if not self.model:
            raise AuraError(M("need_model"))
        if not 0 < self.port < 65536:
            raise AuraError(M("bad_port", port=self.port))
        self.token = token_for(self.host, self.token)  # the one rule, shared with aura studio


def check_port(host: str, port: int) -> None:
    """Refuse a port another server holds, or an address not of this machine, before anything loads."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: TIME_WAIT is no conflict
        try:
            s.bind((host, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise AuraError(M("port_busy", host=host, port=port)) from None
            raise AuraError(M("bad_host", host=host, port=port, err=e.strerror or e)) from None


def _vllm_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


VLLM_CPU_MEMORY = 0.3  # at most this share of RAM for the KV cache of vLLM's CPU build (`aura serve --engine vllm`)


def vllm_cpu_memory_share() -> float:
    """The RAM share vLLM's CPU build is given: 30 %, or half of what is free when less is (vLLM refuses to start
    when the share is more than the memory available)."""
    import psutil

    mem = psutil.virtual_memory()
    return max(0.01, min(VLLM_CPU_MEMORY, 0.5 * mem.available / mem.total))


def vllm_cpu_build() -> bool:
    """vLLM's CPU build (the ``vllm-cpu`` package) is installed."""
    import importlib.metadata

    try:
        importlib.metadata.distribution("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def _gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def _lora_servable(adapter_dir: Path) -> bool:
    """vLLM serves an adapter as LoRA when it adds only LoRA matrices (no fully trained modules such as
    resized embeddings, which it cannot load per request)."""
    from aura.inference.loading import read_json_file

    return not read_json_file(adapter_dir / "adapter_config.json").get("modules_to_save")


def serve(cfg: ServeConfig) -> int:
    from aura.inference.loading import resolve_model
    from aura.serve.servers import choose_engine

    source = resolve_model(cfg.model, cfg.adapter or None, allow_other_base=cfg.allow_other_base)
    vllm, gpu = (_vllm_installed(), _gpu()) if source.kind != "gguf" else (False, False)
    try:
        engine = choose_engine(
            source.kind, cfg.engine, vllm_installed=vllm, gpu=gpu, vllm_cpu=vllm and vllm_cpu_build()
        )
    except ValueError as e:
        yes_no = {True: M("yes"), False: M("no")}
        raise AuraError(M(str(e), engine=cfg.engine, path=cfg.model, vllm=yes_no[vllm], gpu=yes_no[gpu])) from None
    check_port(cfg.host, cfg.port)
    # SIGTERM (also the one uvicorn raises again after its graceful shutdown) exits through the ExitStack,
    # so a merged copy is deleted, rather than by the default handler's instant death
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        with contextlib.ExitStack() as stack:
            if engine == "vllm":
                return _serve_vllm(cfg, source, stack)
            return _serve_here(cfg, source, engine, stack)
    finally:  # a caller that runs serve() in its own process gets its handler back
        signal.signal(signal.SIGTERM, previous)


def _merged_copy(cfg: ServeConfig, source, stack: contextlib.ExitStack) -> Path:
    """The base with the adapter merged by ``aura merge``'s own code, in a folder deleted on exit."""
    from aura.export.merge import MergeConfig, merge

    tmp = Path(tempfile.mkdtemp(prefix="aura-serve-"))
    stack.callback(shutil.rmtree, tmp, ignore_errors=True)
    console.info(M("merging", adapter=source.path, base=source.base))
    merge(
        MergeConfig(
            base_model=str(source.base),
            adapter=str(source.path),
            output_dir=str(tmp / "merged"),
            allow_other_base=cfg.allow_other_base,
        )
    )
    return tmp / "merged"


def _announce(cfg: ServeConfig, engine: str, name: str) -> None:
    shown = f"[{cfg.host}]" if ":" in cfg.host else cfg.host
    console.info(M("serving", url=f"http://{shown}:{cfg.port}/v1", engine=engine, name=name))
    if cfg.token:
        console.info(M("token_note", token=cfg.token))
    console.info(M("stop_note"))


def _serve_here(cfg: ServeConfig, source, engine: str, stack: contextlib.ExitStack) -> int:
    from aura.core.access import TokenGuard
    from aura.serve import servers

    try:
        import uvicorn

        if engine == "llama.cpp":
            import llama_cpp.server.app  # noqa: F401 - its extra's packages, checked before loading
        else:
            from transformers.utils.import_utils import is_serve_available

            if not is_serve_available():
                raise ImportError("fastapi, uvicorn, pydantic, openai")
    except ImportError as e:
        raise AuraError(M("missing", engine=engine, err=getattr(e, "name", None) or e)) from None
    if engine == "llama.cpp":
        name = str(source.path)
        console.info(M("loading", model=name, engine=engine))
        app = servers.RequestDefaults(
            servers.llama_cpp_app(source.path, alias=name, n_ctx=cfg.n_ctx), servers.LLAMA_CPP_DEFAULTS
        )
    else:
        model_dir = _merged_copy(cfg, source, stack) if source.kind == "adapter" else source.path
        name = str(model_dir)  # transformers serve, pinned to one model, answers to its path
        console.info(M("loading", model=name, engine=engine))
        app = servers.transformers_app(name, dtype=cfg.dtype)
    if not _has_chat_template(source.path if engine == "llama.cpp" else Path(name), gguf=engine == "llama.cpp"):
        from aura.inference.chat import M as M_CHAT
        from aura.serve.plain_chat import PlainChat

        warning = M_CHAT("no_template")
        console.warn(warning)  # the server log; each chat answer carries it too (header, and field unstreamed)
        app = PlainChat(app, warning=warning)
    _announce(cfg, engine, name)
    uvicorn.run(TokenGuard(app, cfg.token), host=cfg.host, port=cfg.port, log_level="warning")
    return 0


def _has_chat_template(path: Path, *, gguf: bool) -> bool:
    """Whether the model (a GGUF's ``tokenizer.chat_template``, or a Hugging Face folder's tokenizer) has one."""
    if gguf:
        import gguf as gguf_py

        return gguf_py.GGUFReader(str(path)).get_field("tokenizer.chat_template") is not None
    from aura.inference.loading import load_model_tokenizer

    return bool(getattr(load_model_tokenizer(path), "chat_template", None))


def _exit_on_sigterm(signum, frame):
    raise SystemExit(128 + signum)


def stop_child(proc: subprocess.Popen, timeout: float = 30.0) -> None:
    """Ends a child server: SIGTERM (its graceful shutdown), then SIGKILL after ``timeout`` seconds. Left
    running, vLLM's server keeps its engine and workers, and the memory they hold, after ``aura serve`` ended."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _serve_vllm(cfg: ServeConfig, source, stack: contextlib.ExitStack) -> int:
    """vLLM's own server in its own process (on a GPU, or vLLM's CPU build: bench/vllm_cpu.py runs it);
    Ctrl+C reaches both, and a SIGTERM to Aura ends vLLM's server too."""
    from aura.serve.servers import vllm_command

    adapter, base = (source.path, source.base) if source.kind == "adapter" else (None, source.path)
    if adapter is not None and not _lora_servable(adapter):
        adapter, base = None, _merged_copy(cfg, source, stack)
    name = str(adapter if adapter is not None else base)  # with a LoRA, the base answers to its own path
    argv = vllm_command(
        base, name=str(base), host=cfg.host, port=cfg.port, dtype=cfg.dtype, adapter=adapter, adapter_name=name
    )
    if not _gpu():  # vLLM's CPU build reserves this share of RAM for its KV cache (its 0.92 default would fail)
        argv += ["--gpu-memory-utilization", f"{vllm_cpu_memory_share():.2f}"]
    env = dict(os.environ)
    if cfg.token:
        env["VLLM_API_KEY"] = cfg.token  # vLLM checks it on every /v1 request: the same rule, its own check
    _announce(cfg, "vllm", name)
    proc = subprocess.Popen(argv, env=env)
    try:
        with contextlib.suppress(KeyboardInterrupt):
            return proc.wait()
        return 0
    finally:  # a SIGTERM (or Ctrl+C) ends Aura's process: vLLM's server, its engine and workers end with it
        stop_child(proc)
