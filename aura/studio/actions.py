"""What the page may change: launch an Aura command, stop a run (SIGTERM), resume it, delete it.

Only Aura's own commands start, as ``sys.executable -m aura COMMAND ARGS`` with the arguments as a list
(no shell), built from the command's typed config (the same flags, defaults, choices and validation as
the CLI). The process is detached (its own session: it outlives the page and the studio) and appends its
output to ``RUNS_DIR/.aura-studio/NAME.log`` (not inside the run folder: ``aura pretrain`` refuses to
start in a folder it did not create); its run folder is always directly under the studio's runs folder.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import io
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Literal, get_args, get_origin

from aura.core.commands import COMMANDS, Command
from aura.core.config import default_of, fields_of, flag_name, parse_config, unwrap_optional
from aura.core.errors import AuraError
from aura.core.i18n import Messages
from aura.core.rundir import lock_holder
from aura.distributed.launcher import strip_resume
from aura.pipeline.pipeline_state import describe
from aura.watch.runs import live_status, resume_args

M = Messages(
    "studio_actions",
    {
        "unknown_command": (
            "La página solo puede lanzar {valid}; recibido {command!r}.",
            "The page can only launch {valid}; got {command!r}.",
        ),
        "unknown_field": (
            "'{field}' no es una opción de aura {command}.",
            "'{field}' is not an option of aura {command}.",
        ),
        "bad_name": (
            "Nombre de ejecución no válido {name!r}: usa letras, números, '-', '_' o '.', sin '/' ni '..'.",
            "Invalid run name {name!r}: use letters, digits, '-', '_' or '.', without '/' or '..'.",
        ),
        "exists": (
            "Ya existe {path}: elige otro nombre, o reanúdala desde su página.",
            "{path} already exists: pick another name, or resume it from its page.",
        ),
        "not_running": (
            "{run} no se está ejecutando en esta máquina (estado: {status}).",
            "{run} is not running on this machine (status: {status}).",
        ),
        "not_resumable": (
            "{run} no se puede reanudar desde aquí (estado {status}, sin checkpoint o sin su línea de "
            "comandos en run.json).",
            "{run} cannot be resumed from here (status {status}, no checkpoint or no command line in run.json).",
        ),
        "launcher": (
            "{run} se lanzó con {launcher}: reanúdala en una terminal con: {command}",
            "{run} was launched with {launcher}: resume it in a terminal with: {command}",
        ),
        "outside": (
            "{flag} {value!r} está fuera de la carpeta de ejecuciones {root}: la página solo usa modelos "
            "de dentro (p. ej. NOMBRE/final).",
            "{flag} {value!r} is outside the runs folder {root}: the page only uses models inside it (e.g. "
            "NAME/final).",
        ),
        "confirm": (
            "Para borrar {run}, confirma escribiendo su nombre exacto.",
            "To delete {run}, confirm by typing its exact name.",
        ),
        "busy": (
            "{run} se está ejecutando (estado: {status}): detenla antes de borrarla.",
            "{run} is running (status: {status}): stop it before deleting it.",
        ),
        "no_job": (
            "{name} no es un comando lanzado desde la página.",
            "{name} is not a command launched from the page.",
        ),
        "stage": (
            "{run} es la etapa '{stage}' del pipeline {pipeline}: el pipeline la reanuda (las etapas terminadas "
            "se saltan) con su mismo comando: {command}",
            "{run} is stage '{stage}' of pipeline {pipeline}: the pipeline resumes it (finished stages are "
            "skipped) with its same command: {command}",
        ),
    },
)


def launchable() -> dict[str, Command]:
    """The commands the page can launch (``Command.studio``), by their name after ``aura``, in the menu's order.
    Each writes a new folder directly under the runs folder (its ``output`` field)."""
    found = [(" ".join(key), cmd) for key, cmd in COMMANDS.items() if cmd.launchable]
    return dict(sorted(found, key=lambda item: item[1].studio.position))


def command_of(command: str) -> Command:
    """The launchable command named ``command``, else the refusal naming the ones there are."""
    commands = launchable()
    if command not in commands:
        raise AuraError(M("unknown_command", valid=", ".join(commands), command=command))
    return commands[command]


LOG_DIR = ".aura-studio"
JOBS: dict[str, subprocess.Popen] = {}  # name -> process, the commands this studio started


def log_path(run_dir: Path) -> Path:
    return run_dir.parent / LOG_DIR / f"{run_dir.name}.log"


def config_class(command: str):
    cmd = command_of(command)
    return getattr(importlib.import_module(cmd.module), cmd.config)


def form(command: str) -> list[dict]:
    """The fields of ``aura COMMAND`` as the page draws them: flag, type, default, choices, help es/en and
    whether the field is essential (``StudioForm.essential``, first, in that order) or advanced."""
    out, cls, cmd = [], config_class(command), command_of(command)
    own = set(getattr(cls, "__annotations__", {}))  # the command's own flags first, then the shared ones
    essential = cmd.studio.essential

    def rank(name):
        return essential.index(name) if name in essential else len(essential) + (name not in own)

    for f, tp in sorted(fields_of(cls), key=lambda ft: rank(ft[0].name)):
        meta = f.metadata or {}
        if not meta or meta.get("hidden") or f.name == cmd.output or f.name in cmd.studio.hidden:
            continue
        base, optional = unwrap_optional(tp)
        choices = list(get_args(base)) if get_origin(base) is Literal else meta.get("choices")
        kind = (
            "bool"
            if base is bool
            else "list"
            if get_origin(base) in (list, tuple)
            else "int"
            if base is int
            else "float"
            if base is float
            else "str"
        )
        default = default_of(f)
        out.append(
            {
                "name": f.name,
                "flag": flag_name(f.name),
                "type": kind,
                "optional": optional,
                "default": None
                if default is dataclasses.MISSING
                else str(default)
                if isinstance(default, Path)
                else default,
                "choices": list(choices) if choices else None,
                "help": {"es": meta["help"][0], "en": meta["help"][1]},
                "positional": bool(meta.get("positional")),
                "essential": f.name in essential,
            }
        )
    return out


def free_name(root: Path, command: str) -> str:
    """The command's usual folder name (``demo`` for pretrain) if nothing in the runs folder has it, else
    the first free ``NAME-2``, ``NAME-3``..."""
    cmd = launchable().get(command)
    base = cmd.studio.default_name if cmd is not None else "run"
    name, n = base, 1
    while (root / name).exists() or (root / name).is_symlink():
        n += 1
        name = f"{base}-{n}"
    return name


def clash(name: str, root: Path) -> str | None:
    """The refusal ``launch`` would give for this name (a bad name, a folder that exists), or None."""
    try:
        run_dir = root / check_name(name)
    except AuraError as e:
        return str(e)
    return M("exists", path=run_dir) if run_dir.exists() or run_dir.is_symlink() else None


def stage_refusal(run_dir: Path, root: Path) -> None:
    """A pipeline's stage (``PIPELINE/STAGE``) is resumed by its pipeline and not deleted alone."""
    if run_dir.parent.resolve() == root.resolve():
        return
    try:
        command = describe(run_dir.parent).get("command") or "aura pipeline run ..."
    except AuraError:
        command = "aura pipeline run ..."
    raise AuraError(
        M(
            "stage",
            run=f"{run_dir.parent.name}/{run_dir.name}",
            stage=run_dir.name,
            pipeline=run_dir.parent.name,
            command=command,
        )
    )


def check_name(name: str) -> str:
    if (
        not name
        or name in (".", "..")
        or "/" in name
        or "\\" in name
        or name.startswith(".")
        or not all(c.isalnum() or c in "-_." for c in name)
    ):
        raise AuraError(M("bad_name", name=name))
    return name


def check_inside(flag: str, value: str, root: Path) -> None:
    """A path the command reads must stay inside the runs folder (the command runs from it)."""
    real_root = root.resolve()
    try:
        real = (root / value).resolve()
    except (OSError, RuntimeError):
        real = None
    if real is None or not (real == real_root or real.is_relative_to(real_root)):
        raise AuraError(M("outside", flag=flag, value=value, root=real_root))


def build_argv(command: str, values: dict, run_dir: Path) -> list[str]:
    """The arguments after ``aura`` for a form's values: only the command's own fields, each a list item."""
    fields, cmd = {f["name"]: f for f in form(command)}, command_of(command)
    argv = command.split()
    for name, value in values.items():
        if name not in fields:
            raise AuraError(M("unknown_field", field=name, command=command))
        f = fields[name]
        if value is None or value == "" or value == f["default"]:
            continue
        if f["type"] == "bool":
            argv.append(f["flag"] if value else f"--no-{f['flag'][2:]}")
            continue
        items = value if isinstance(value, list) else shlex.split(str(value)) if f["type"] == "list" else [value]
        items = [str(v) for v in items]
        for item in items if name in cmd.studio.inside else ():
            check_inside(f["flag"], item, run_dir.parent)
        argv += items if f["positional"] else [f["flag"], *items]
    argv += ["--" + cmd.output.replace("_", "-"), str(run_dir)]
    err = io.StringIO()
    try:  # the CLI's own parsing and validation, its messages kept for the page
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            parse_config(config_class(command), argv[len(command.split()) :], prog=f"aura {command}", description="")
    except SystemExit:
        lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
        raise AuraError("\n".join(lines[-2:]) or M("unknown_field", field="?", command=command)) from None
    return argv


def spawn(argv: list[str], run_dir: Path, *, cwd: Path, env: dict | None = None) -> int:
    """Start ``python -m aura ARGV`` detached, its output appended to ``log_path(run_dir)``; returns its pid
    (the process is kept in ``JOBS``, so its end is known and it is reaped)."""
    log_file = log_path(run_dir)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", "AURA_PLAIN": "1", **(env or {})}
    with open(log_file, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "aura", *argv],
            cwd=cwd,
            env=full_env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    JOBS[run_dir.name] = proc
    return proc.pid


def launch(command: str, name: str, values: dict, root: Path) -> dict:
    run_dir = root / check_name(name)
    if run_dir.exists() or run_dir.is_symlink():
        raise AuraError(M("exists", path=run_dir))
    argv = build_argv(command, values, run_dir.resolve())
    pid = spawn(argv, run_dir, cwd=root.resolve())
    return {
        "name": name,
        "pid": pid,
        "argv": argv,
        "command": shlex.join(["aura", *argv]),
        "run": command_of(command).run,
    }


def job(name: str, root: Path) -> dict:
    """A command the page started: its output so far (the log's last 16 KB) and whether it still runs."""
    proc = JOBS.get(check_name(name))
    log = log_path(root / name)
    if proc is None and not log.is_file():
        raise AuraError(M("no_job", name=name))
    tail = ""
    with contextlib.suppress(OSError):
        with open(log, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 16_000))
            tail = f.read().decode("utf-8", "replace")
    code = proc.poll() if proc is not None else None
    return {
        "name": name,
        "running": proc is not None and code is None,
        "returncode": code,
        "log": tail,
        "run": (root / name / "run.json").is_file(),
    }


def stop(run_dir: Path, info: dict) -> dict:
    """SIGTERM to the process writing the run (the lock's holder; run.json's pid for older runs): the loop
    saves a checkpoint and records the run as interrupted."""
    status, local = live_status(info, run_dir)
    holder = lock_holder(run_dir) or {}
    pid = holder.get("pid") or info.get("pid")
    if status != "running" or not local or not isinstance(pid, int):
        raise AuraError(M("not_running", run=run_dir.name, status=status))
    os.kill(pid, signal.SIGTERM)
    return {"name": run_dir.name, "pid": pid, "signal": "SIGTERM"}


def resume(run_dir: Path, info: dict, resume_command: str | None) -> dict:
    """Start the run again as it was launched, with ``--resume-from latest``."""
    status, _ = live_status(info, run_dir)
    if status not in ("interrupted", "stale", "failed") or not resume_command:
        raise AuraError(M("not_resumable", run=run_dir.name, status=status))
    launch_rec, env, cwd = info.get("launch"), {}, info.get("cwd")
    if isinstance(launch_rec, dict) and isinstance(launch_rec.get("argv"), list):
        prefix = [str(a) for a in launch_rec.get("prefix") or ["aura"]]
        if prefix[:1] != ["aura"]:
            raise AuraError(
                M("launcher", run=run_dir.name, launcher=launch_rec.get("launcher"), command=resume_command)
            )
        argv = [*prefix[1:], *strip_resume([str(a) for a in launch_rec["argv"]]), "--resume-from", "latest"]
        env = {str(k): str(v) for k, v in (launch_rec.get("env") or {}).items()}
        cwd = launch_rec.get("cwd") or cwd
    else:
        argv = resume_args(info)
    if not argv or not cwd or not Path(cwd).is_dir():
        raise AuraError(M("not_resumable", run=run_dir.name, status=status))
    pid = spawn(argv, run_dir, cwd=Path(cwd), env=env)
    return {"name": run_dir.name, "pid": pid, "argv": argv, "command": shlex.join(["aura", *argv])}


def delete(run_dir: Path, info: dict, root: Path, confirm: object) -> dict:
    """Move a run that is not running to ``RUNS_DIR/.aura-studio/trash/NAME-TIME`` (one rename: the run
    disappears from the page and from ``aura runs`` at once, and a misclick costs nothing; ``rm -r`` that
    folder frees the disk). ``confirm`` must be the run's exact name."""
    if confirm != run_dir.name:
        raise AuraError(M("confirm", run=run_dir.name))
    status, _ = live_status(info, run_dir)
    if status == "running" or lock_holder(run_dir):
        raise AuraError(M("busy", run=run_dir.name, status=status))
    trash = root / ".aura-studio" / "trash"
    trash.mkdir(parents=True, exist_ok=True)
    dest = trash / f"{run_dir.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    n = 1
    while dest.exists():
        n += 1
        dest = trash / f"{run_dir.name}-{time.strftime('%Y%m%d-%H%M%S')}-{n}"
    os.rename(run_dir, dest)
    return {"name": run_dir.name, "trash": str(dest.relative_to(root))}
