"""``aura <command> [flags]``: one entry point, one plain function per command.

Each command is a (module, config dataclass, function) triple. Only the module of the command being
run is imported, so ``aura --help`` is instant and a command never pays for another's imports.
Nothing imports this module.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
import warnings

from aura import __version__
from aura.cli.commands import COMMANDS
from aura.cluster.diagnose import diagnose
from aura.core import console
from aura.core.config import parse_config
from aura.core.errors import AbortReported, AuraError
from aura.core.i18n import Messages, bi, set_lang
from aura.distributed.launcher import CHECK_ENV

M = Messages(
    "cli",
    {
        "usage": (
            "uso: aura [--lang es|en] [--debug] <comando> [opciones]   (aura <comando> --help)",
            "usage: aura [--lang es|en] [--debug] <command> [options]   (aura <command> --help)",
        ),
        "commands": ("Comandos:", "Commands:"),
        "globals": (
            "Opciones globales: --lang es|en (idioma), --debug (muestra trazas), --version.",
            "Global options: --lang es|en (language), --debug (show tracebacks), --version.",
        ),
        "unknown": (
            "Comando desconocido: '{cmd}'.{close} Ejecuta 'aura --help' para ver los comandos.",
            "Unknown command: '{cmd}'.{close} Run 'aura --help' to see the commands.",
        ),
        "close": (" ¿Quisiste decir '{cmd}'?", " Did you mean '{cmd}'?"),
        "bad_lang": ("--lang debe ser 'es' o 'en'.", "--lang must be 'es' or 'en'."),
        "debug_hint": (
            "(ejecuta con --debug para ver la traza completa)",
            "(run with --debug to see the full traceback)",
        ),
        "interrupted": ("Interrumpido.", "Interrupted."),
        "exit_codes": (
            "Códigos de salida: 0 terminado; 1 fallo de Aura; 2 error del usuario (el mensaje dice qué "
            "cambiar); 3 entrenamiento detenido por Ctrl+C o SIGTERM con el checkpoint guardado (se "
            "reanuda con --resume-from latest); 130 abortado con un segundo Ctrl+C sin guardar.",
            "Exit codes: 0 finished; 1 a bug in Aura; 2 a user error (the message says what to change); "
            "3 training stopped by Ctrl+C or SIGTERM with its checkpoint saved (resume with --resume-from "
            "latest); 130 aborted by a second Ctrl+C without saving.",
        ),
        "bug": (
            "Error inesperado en Aura (esto es un fallo nuestro; por favor, repórtalo):",
            "Unexpected error in Aura (this is our bug; please report it):",
        ),
        "comm_failed": (
            "La comunicación entre procesos falló en el rango {rank} de {world}: {error}",
            "Communication between processes failed on rank {rank} of {world}: {error}",
        ),
        "comm_resume": (
            "El último checkpoint guardado se reanuda con --resume-from latest en todos los nodos "
            "(o con 'aura launch ... --resume-from latest').",
            "The last saved checkpoint resumes with --resume-from latest on every node "
            "(or with 'aura launch ... --resume-from latest').",
        ),
        "missing_dep": (
            "Falta el paquete de Python '{name}'. Instálalo con: pip install {name}",
            "The Python package '{name}' is missing. Install it with: pip install {name}",
        ),
    },
)


def _print_overview() -> None:
    print(M("usage"))
    print()
    print(M("commands"))
    width = max(len(" ".join(k)) for k in COMMANDS)
    for key, cmd in COMMANDS.items():
        print(f"  {' '.join(key).ljust(width)}  {bi(cmd.es, cmd.en)}")
    print()
    print(M("globals"))
    print(M("exit_codes"))


def _split_globals(argv: list[str]) -> tuple[list[str], bool, str | None]:
    rest, debug, lang = [], False, None
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--debug":
            debug = True
        elif a == "--lang" and i + 1 < len(argv):
            lang = argv[i + 1]
            i += 1
        elif a.startswith("--lang="):
            lang = a.split("=", 1)[1]
        else:
            rest.append(a)
        i += 1
    return rest, debug, lang


def resolve(argv: list[str]) -> tuple[tuple[str, ...] | None, list[str]]:
    """Longest registered command path at the start of argv, and the remaining arguments."""
    for n in (2, 1):
        key = tuple(argv[:n])
        if key in COMMANDS:
            return key, argv[n:]
    return None, argv


def run_command(key: tuple[str, ...], args: list[str]):
    from aura.train.optim.deepspeed import set_accelerator_env

    cmd = COMMANDS[key]
    module = importlib.import_module(cmd.module)  # command modules import no third-party ML library
    cfg_cls = getattr(module, cmd.config)
    cfg = parse_config(cfg_cls, args, prog="aura " + " ".join(key), description=bi(cmd.es, cmd.en))
    if os.environ.get(CHECK_ENV) == "1":  # `aura launch` checks the inner command's flags before torchrun
        return 0
    set_accelerator_env(str(getattr(cfg, "device", "auto")))  # before transformers can import DeepSpeed
    return getattr(module, cmd.function)(cfg)


def _report_comm_failure(exc: BaseException, debug: bool) -> bool:
    """In a distributed run, a collective that fails because a peer died or the network broke is not a
    bug in Aura: say so with the diagnosis of its text (the cluster's own rules) and how to resume."""
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    if world <= 1:
        return False
    chain, seen = [], exc
    while seen is not None and len(chain) < 5:
        chain.append(f"{type(seen).__name__}: {seen}")
        seen = seen.__cause__ or seen.__context__
    text = "\n".join(chain)
    dist = sys.modules.get("torch.distributed")
    dist_error = dist is not None and isinstance(exc, getattr(dist, "DistError", ()))
    lines = diagnose(
        text, addr=os.environ.get("MASTER_ADDR", "MASTER_ADDR"), port=os.environ.get("MASTER_PORT", "MASTER_PORT")
    )
    if not lines and not dist_error:
        return False
    first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
    console.error(M("comm_failed", rank=os.environ.get("RANK", "?"), world=world, error=first))
    for line in lines:
        console.error(line)
    console.error(M("comm_resume"))
    if debug:
        traceback.print_exc()
    else:
        print(M("debug_hint"), file=sys.stderr)
    return True


def _unknown_command(argv: list[str]) -> tuple[str, str | None]:
    """(what the user typed as the command, the closest real command or None): 'pretrian --data x' ->
    ('pretrian', 'pretrain'); 'data prepar' -> ('data prepar', 'data prepare')."""
    import difflib

    groups = {k[0] for k in COMMANDS if len(k) > 1}
    typed = argv[:2] if argv[0] in groups and len(argv) > 1 and not argv[1].startswith("-") else argv[:1]
    names = [" ".join(k) for k in COMMANDS if len(k) == len(typed)] + (sorted(groups) if len(typed) == 1 else [])
    close = difflib.get_close_matches(" ".join(typed), names, n=1, cutoff=0.6)
    return " ".join(typed), (close[0] if close else None)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    argv, debug, lang = _split_globals(argv)
    debug = debug or bool(os.environ.get("AURA_DEBUG"))
    if lang is not None:
        if lang not in ("es", "en"):
            print(M("bad_lang"), file=sys.stderr)
            return 2
        set_lang(lang)
        os.environ["AURA_LANG"] = lang  # children (torchrun workers) speak the same language
    if not argv or argv[0] in ("-h", "--help", "help"):
        _print_overview()
        return 0
    if argv[0] in ("--version", "-V", "version"):
        print(f"aura {__version__}")
        return 0
    key, rest = resolve(argv)
    if key is None:
        group = [k for k in COMMANDS if k[0] == argv[0] and len(k) > 1]
        if group and (len(argv) == 1 or argv[1] in ("-h", "--help")):
            for k in group:
                print(f"  aura {' '.join(k)}  {bi(COMMANDS[k].es, COMMANDS[k].en)}")
            return 0
        typed, close = _unknown_command(argv)
        print(M("unknown", cmd=typed, close=M("close", cmd=close) if close else ""), file=sys.stderr)
        return 2
    console.quiet_third_party(debug=debug)
    try:
        with warnings.catch_warnings():
            if not debug:  # libraries' deprecation notices are for their caller (Aura), not for its users
                warnings.simplefilter("ignore", FutureWarning)
                warnings.simplefilter("ignore", DeprecationWarning)
            result = run_command(key, rest)
    except AuraError as e:
        console.error(str(e))
        if debug:
            traceback.print_exc()
        elif e.exit_code == 1:  # a failure of Aura's; a user's mistake (2) is said in full without a trace
            print(M("debug_hint"), file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt as e:
        if not isinstance(e, AbortReported):  # the command said what happened already
            console.error(M("interrupted"))
        if debug:
            traceback.print_exc()
        return 130
    except ModuleNotFoundError as e:
        name = (e.name or "").split(".")[0]
        if name and not name.startswith("aura"):
            console.error(M("missing_dep", name=name))
            if debug:
                traceback.print_exc()
            return 2
        raise
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except Exception as e:
        if _report_comm_failure(e, debug):
            return 1
        console.error(M("bug"))
        traceback.print_exc()
        return 1
    return int(result) if isinstance(result, int) else 0


def entry(argv: list[str] | None = None) -> int:
    """The ``aura`` program (console script, ``python -m aura``, torchrun workers): ``main``, then the heap
    frozen so that the interpreter's finalisation does not walk every object of torch and transformers
    (``aura.core.heap``: ~1.1 s at the end of every command that imported torch and transformers). ``main`` itself
    stays callable in-process."""
    from aura.core.heap import freeze_for_exit

    code = main(argv)
    freeze_for_exit()
    return code
