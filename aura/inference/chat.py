"""``aura chat``: an interactive terminal chat with a model, in its own chat template, streaming tokens.

Works on HF dirs, checkpoints, base + adapter (peft) and GGUF files (llama.cpp, with the template
embedded in the GGUF). Keeps the conversation (multi-turn); commands: ``/reset``, ``/system TEXT``,
``/help``, ``/exit``. Ctrl+C stops the current answer; Ctrl+D or ``/exit`` leaves.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from aura.core import console
from aura.core.config import arg
from aura.core.i18n import Messages
from aura.inference.generate import SamplingArgs, validate_sampling

M = Messages(
    "chat",
    {
        "banner": (
            "Chat con {model} ({backend}). Escribe /help para ver los comandos.",
            "Chat with {model} ({backend}). Type /help for the commands.",
        ),
        "help": (
            "Comandos:\n  /reset          borra la conversación (mantiene el mensaje de sistema)\n"
            "  /system TEXTO   fija el mensaje de sistema y empieza de nuevo\n"
            "  /help           esta ayuda\n  /exit           salir (también Ctrl+D)\n"
            "Ctrl+C detiene la respuesta en curso.",
            "Commands:\n  /reset          clear the conversation (keeps the system message)\n"
            "  /system TEXT    set the system message and start again\n"
            "  /help           this help\n  /exit           leave (also Ctrl+D)\n"
            "Ctrl+C stops the current answer.",
        ),
        "you": ("Tú> ", "You> "),
        "bot": ("Modelo> ", "Model> "),
        "reset": ("Conversación borrada.", "Conversation cleared."),
        "system_set": ("Mensaje de sistema fijado; conversación nueva.", "System message set; new conversation."),
        "system_cleared": (
            "Mensaje de sistema eliminado; conversación nueva.",
            "System message removed; new conversation.",
        ),
        "unknown": ("Comando desconocido: {cmd}. Escribe /help.", "Unknown command: {cmd}. Type /help."),
        "stopped": ("[respuesta detenida]", "[answer stopped]"),
        "bye": ("¡Hasta luego!", "Goodbye!"),
        "no_template": (
            "El modelo no tiene plantilla de chat: uso un formato de texto simple (Usuario:/Asistente:).",
            "The model has no chat template: using a plain text format (Usuario:/Asistente:).",
        ),
        "stats": ("[{tokens:token|tokens}, {tps:.1f} tokens/s]", "[{tokens:token|tokens}, {tps:.1f} tokens/s]"),
    },
)


@dataclass
class ChatConfig(SamplingArgs):
    stats: bool = arg(
        False, es="Mostrar tokens y velocidad tras cada respuesta.", en="Show tokens and speed after each answer."
    )

    def __post_init__(self):
        validate_sampling(self)


def _read_line(prompt: str) -> str | None:
    """The user's next line; None to leave (Ctrl+D, or Ctrl+C at the prompt: a quiet goodbye)."""
    try:
        return input(prompt)
    except (EOFError, KeyboardInterrupt):
        return None


def chat(cfg: ChatConfig) -> int:
    import time

    from aura.inference.backends import open_engine
    from aura.inference.generate import sampling_of

    engine = open_engine(
        cfg.model, cfg.adapter, dtype=cfg.dtype, n_ctx=cfg.n_ctx, seed=cfg.seed, allow_other_base=cfg.allow_other_base
    )
    console.info(M("banner", model=engine.name, backend="llama.cpp" if engine.kind == "gguf" else "PyTorch"))
    if not engine.has_template:
        console.warn(M("no_template"))
    sampling = sampling_of(cfg)
    system = cfg.system
    history: list[dict] = []
    turn = 0
    while True:
        line = _read_line(M("you"))
        if line is None:
            print()
            break
        text = line.strip()
        if not text:
            continue
        if text.startswith("/"):
            cmd, _, rest = text.partition(" ")
            cmd = cmd.lower()
            if cmd in ("/exit", "/quit", "/salir"):
                break
            if cmd in ("/help", "/ayuda", "/?"):
                print(M("help"), flush=True)
            elif cmd in ("/reset", "/borrar"):
                history = []
                print(M("reset"), flush=True)
            elif cmd in ("/system", "/sistema"):
                system, history = rest.strip(), []
                print(M("system_set") if system else M("system_cleared"), flush=True)
            else:
                print(M("unknown", cmd=cmd), flush=True)
            continue
        history.append({"role": "user", "content": text})
        messages = ([{"role": "system", "content": system}] if system else []) + history
        turn += 1
        sampling.seed = cfg.seed + turn  # reproducible run, yet not the same sample every turn
        out: list = []
        pieces: list[str] = []
        sys.stdout.write(M("bot"))
        sys.stdout.flush()
        t0 = time.perf_counter()
        stream = engine.stream(messages=messages, sampling=sampling, out=out)
        try:
            for piece in stream:
                pieces.append(piece)
                sys.stdout.write(piece)
                sys.stdout.flush()
        except KeyboardInterrupt:
            stream.close()
            print(f"\n{M('stopped')}", flush=True)
        print(flush=True)
        answer = out[0].text if out else "".join(pieces)
        history.append({"role": "assistant", "content": answer.strip()})
        if cfg.stats and out:
            seconds = max(time.perf_counter() - t0, 1e-9)
            console.info(M("stats", tokens=out[0].tokens, tps=out[0].tokens / seconds))
    print(M("bye"), flush=True)
    return 0
