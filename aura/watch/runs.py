"""``aura runs``: what is in a runs directory (also the records ``aura studio`` shows).

It reads run dirs as ``aura pretrain``/``aura finetune`` write them (docs/architecture.md):
``run.json`` for status, ``training_log.csv`` for the curves, ``checkpoint-step-N``,
``interrupt-step-N`` and ``checkpoint-epoch-N`` for resumable state (``.tmp-*`` dirs are unfinished
writes and never count).

``aura runs [DIR]`` looks for run dirs in DIR itself and one or two levels below it. Without DIR it
uses ``./runs`` when that directory exists, otherwise the current directory. A run whose run.json
is shown as running while a process holds its lock (``RUN_DIR/.aura-run.lock``, an OS lock that dies
with its holder); a run.json that still says ``running`` without it is ``stale``: the process died
without updating run.json (killed, crashed, machine rebooted), and it resumes like an interrupted run.
Runs of older Aura versions (no lock file) are running when their PID is alive on this host and
started no later than the run (so a reused PID does not count).
"""

from __future__ import annotations

import json
import math
import os
import shlex
import socket
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from aura.core import console
from aura.core.atomic import TMP_PREFIX, dir_size, human_bytes
from aura.core.config import arg
from aura.core.errors import AuraError
from aura.core.files import loads_json
from aura.core.i18n import Messages, num
from aura.core.rundir import has_lock_file, latest_checkpoint, lock_holder, status_label
from aura.distributed.launcher import strip_resume
from aura.evaluation.results import suite_figure
from aura.watch.runlog import LogSummary, read_log

M = Messages(
    "runs",
    {
        "no_dir": ("No existe el directorio {path}.", "The directory {path} does not exist."),
        "no_runs": (
            "No hay ejecuciones de Aura (directorios con run.json) en {path} ni uno o dos niveles por debajo.",
            "There are no Aura runs (directories with run.json) in {path} or one or two levels below it.",
        ),
        "title": ("Ejecuciones en {path}", "Runs in {path}"),
        "h_run": ("ejecución", "run"),
        "h_kind": ("tipo", "kind"),
        "h_status": ("estado", "status"),
        "h_step": ("paso", "step"),
        "h_speed": ("tokens/s", "tokens/s"),
        "h_eta": ("tiempo restante", "time left"),
        "h_layout": ("nodos × procesos", "nodes × processes"),
        "h_best_val": ("mejor val", "best val"),
        "h_suite": ("aura-es (acierto)", "aura-es (acc)"),
        "h_checkpoint": ("último checkpoint", "latest checkpoint"),
        "h_size": ("tamaño", "size"),
        "h_updated": ("actualizado", "updated"),
        "resume_title": ("Para reanudar:", "To resume:"),
        "stale_note": (
            "'cortada': run.json dice 'running' pero el proceso ya no existe (terminó "
            "sin poder anotarlo: kill -9, un fallo, un reinicio); se reanuda como una "
            "interrumpida.",
            "'stale': run.json says 'running' but the process is gone (it ended without "
            "recording it: kill -9, a crash, a reboot); resume it like an interrupted run.",
        ),
        "unsaved_note": (
            "'detenida sin checkpoint': se detuvo antes de guardar su primer checkpoint, así que no hay "
            "nada que reanudar; el mismo comando la empieza de cero en su directorio.",
            "'stopped, no checkpoint': it stopped before saving its first checkpoint, so there is "
            "nothing to resume; the same command starts it over in its directory.",
        ),
        "remote_note": (
            "{run}: se ejecuta en la máquina {host}; desde aquí no se puede comprobar si sigue vivo.",
            "{run}: it runs on host {host}; whether it is still alive cannot be checked from here.",
        ),
        "bad_run_json": (
            "{path} no es JSON válido ({err}); su estado se muestra como 'desconocido'.",
            "{path} is not valid JSON ({err}); the run is shown as 'unknown'.",
        ),
        "bad_run_field": (
            "{path}: el campo '{field}' no tiene el tipo esperado ({found}); se ignora.",
            "{path}: the field '{field}' does not have the expected type ({found}); it is ignored.",
        ),
        "damaged": (
            "{n:ejecución tiene|ejecuciones tienen} archivos dañados (avisos arriba): la tabla muestra lo que "
            "se pudo leer.",
            "{n:run has|runs have} damaged files (warnings above): the table shows what could be read.",
        ),
    },
)


RUN_FIELDS = {
    "status": (str,),
    "host": (str,),
    "kind": (str,),
    "pid": (int,),
    "last_step": (int,),
    "started": (str, int, float),
    "updated": (str, int, float),
    "argv": (list,),
    "cwd": (str,),
    "launch": (dict,),
    "total_steps": (int,),
    "trackers": (dict,),
    "headline": (list,),
}

LAUNCH_FIELDS = {
    "prefix": (list,),
    "argv": (list,),
    "env": (dict,),
    "cwd": (str,),
    "world_size": (int,),
    "nnodes": (int,),
    "nproc_per_node": (int,),
    "launcher": (str,),
}


def _typed(info: dict, path: Path) -> tuple[dict, str | None]:
    """run.json without the fields whose type is not the one Aura writes (and a warning naming them). A time
    ("started", "updated") is an ISO text or a Unix time that a date can be made of (a hand edit may write
    either); anything else, like any other mistyped field, is dropped and shown as unknown."""
    bad = [
        k
        for k, types in RUN_FIELDS.items()
        if info.get(k) is not None
        and (
            not isinstance(info[k], types)
            or isinstance(info[k], bool)
            or (k in ("started", "updated") and _when(info[k]) is None)
        )
    ]
    found = {k: info[k] for k in bad}
    info = {k: v for k, v in info.items() if k not in bad}
    if isinstance(info.get("launch"), dict):  # the launcher's record: each of its fields too
        launch = info["launch"]
        wrong = [
            k
            for k, types in LAUNCH_FIELDS.items()
            if launch.get(k) is not None and (not isinstance(launch[k], types) or isinstance(launch[k], bool))
        ]
        found.update({f"launch.{k}": launch[k] for k in wrong})
        info["launch"] = {k: v for k, v in launch.items() if k not in wrong}
        bad += [f"launch.{k}" for k in wrong]
    if not bad:
        return info, None
    return info, M("bad_run_field", path=path, field=bad[0], found=repr(found[bad[0]])[:40])


def find_run_dirs(root: Path) -> list[Path]:
    """``root`` and its sub-directories up to two levels down that hold a run.json."""
    found, level = [], [root]
    for depth in range(3):
        nxt = []
        for d in level:
            if (d / "run.json").is_file():
                found.append(d)
            elif depth < 2:  # a run dir's own sub-dirs (checkpoints, final/) are not runs
                try:
                    # hidden folders (the studio's trash and logs, .git...) and half-written ones are not runs
                    nxt += sorted(p for p in d.iterdir() if p.is_dir() and not p.name.startswith((".", TMP_PREFIX)))
                except OSError:
                    continue
        level = nxt
    return found


def _timestamp(value) -> float | None:
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None


def _when(value) -> str | None:
    """A recorded time as ``YYYY-MM-DD HH:MM:SS`` (local time for a Unix time), None when it is not one."""
    if isinstance(value, str):
        text = value[:19].replace("T", " ")
        return text if _timestamp(value) is not None else None
    stamp = _timestamp(value)
    try:
        return datetime.fromtimestamp(stamp).strftime("%Y-%m-%d %H:%M:%S") if stamp is not None else None
    except (OverflowError, OSError, ValueError):  # nan, inf, a year past 9999
        return None


def live_status(info: dict, run_dir: Path | None = None) -> tuple[str, bool]:
    """(status to show, whether the run's host is this machine).

    "running" comes from the run dir's lock (``aura.core.rundir.lock_holder``): held means a process writes
    the run now, whatever run.json says; free means nobody does, so a run.json still saying "running"
    is stale. Run dirs of older Aura versions (no lock file) fall back to the PID check.
    """
    status = str(info.get("status", "unknown"))
    host = info.get("host")
    local = not host or host == socket.gethostname()
    if run_dir is not None and has_lock_file(run_dir):
        holder = lock_holder(run_dir)
        if holder is not None:
            return "running", not holder.get("host") or holder.get("host") == socket.gethostname()
        return ("stale" if status == "running" else status), local
    if status != "running":
        return status, True
    if not local:
        return "stale", False
    import psutil

    try:
        proc = psutil.Process(int(info.get("pid")))
        alive = proc.status() != psutil.STATUS_ZOMBIE
        # The run's process wrote run.json ("updated") after it started; a process created after
        # that write holds a recycled PID and is not our run (2 s of slack for clock granularity).
        updated = _timestamp(info.get("updated") or info.get("started"))
        if updated is not None and proc.create_time() > updated + 2:
            alive = False
    except (psutil.NoSuchProcess, psutil.AccessDenied, TypeError, ValueError):
        alive = False
    return ("running" if alive else "stale"), True


def resume_command(info: dict) -> str | None:
    """The run's own command line with ``--resume-from latest`` (replacing any earlier one), launched as it
    was (run.json's ``launch``: torchrun or aura launch with their process counts); ``cd`` first when the
    run was started from another directory."""
    launch = info.get("launch")
    if isinstance(launch, dict) and isinstance(launch.get("argv"), list):
        from aura.distributed.launcher import resume_command as relaunch

        cmd, cwd = relaunch(launch, "latest"), launch.get("cwd")
        here = os.path.realpath(os.getcwd())
        return f"cd {shlex.quote(cwd)} && {cmd}" if cwd and os.path.realpath(cwd) != here else cmd
    out = resume_args(info)
    if out is None:
        return None
    cmd = shlex.join(["aura", *out])
    return f"cd {shlex.quote(info['cwd'])} && {cmd}" if info.get("cwd") else cmd


def resume_args(info: dict) -> list[str] | None:
    """The arguments after ``aura`` that resume a run started without a launcher (run.json's ``argv`` with
    ``--resume-from latest``), run from run.json's ``cwd``; None when run.json does not record them."""
    argv = [str(a) for a in info.get("argv") or []]
    if not argv:
        return None
    if "-m" in argv and argv.index("-m") + 1 < len(argv) and argv[argv.index("-m") + 1] == "aura":
        argv = argv[argv.index("-m") + 2 :]  # python -m aura ... / torchrun ... -m aura ...
    elif os.path.basename(argv[0]) == "aura" or argv[0].endswith(os.path.join("aura", "__main__.py")):
        argv = argv[1:]
    return [*strip_resume(argv), "--resume-from", "latest"]


def layout_of(info: dict) -> dict | None:
    """How a distributed run is laid out (run.json's launch record): nodes, processes per node, launcher."""
    launch = info.get("launch") if isinstance(info.get("launch"), dict) else {}
    world = launch.get("world_size")
    if type(world) is not int or world <= 1:
        return None
    return {
        "world_size": world,
        "nnodes": launch.get("nnodes"),
        "nproc_per_node": launch.get("nproc_per_node"),
        "launcher": launch.get("launcher"),
    }


def describe_run(run_dir: Path, log: LogSummary | None = None) -> dict:
    """Everything ``aura runs`` shows about one run dir (also its --json record). ``log``: the summary of
    its training_log.csv when the caller follows the log itself (``aura studio``), else it is read here."""
    warnings = []
    try:
        info = loads_json((run_dir / "run.json").read_bytes())
        if not isinstance(info, dict):
            raise ValueError("not an object")
    except (OSError, ValueError) as e:
        info = {}
        warnings.append(M("bad_run_json", path=run_dir / "run.json", err=e))
    info, warning = _typed(info, run_dir / "run.json")
    warnings += [warning] if warning else []
    status, local = live_status(info, run_dir) if info else ("unknown", True)
    if log is None:
        log = LogSummary()
        try:
            log.add(read_log(run_dir))
        except AuraError as e:
            if (run_dir / "training_log.csv").is_file():  # a run that has not logged yet is no damage
                warnings.append(str(e))
    last_step = info.get("last_step")  # run.json's: the last checkpoint's step while the run trains
    if log.last_step is not None and (last_step is None or log.last_step > last_step):
        last_step = int(log.last_step)  # the log's last step is where the run is now
    total = info.get("total_steps")
    logged = int(log.last_step) if log.last_step is not None else last_step
    eta = (
        log.step_seconds * max(total - logged, 0)
        if status == "running" and total and logged is not None and log.step_seconds is not None
        else None
    )
    ckpt = latest_checkpoint(run_dir)
    final = run_dir / "final"
    best = None
    if (run_dir / "best" / "best.json").is_file():
        try:
            best = loads_json((run_dir / "best" / "best.json").read_bytes())
            if not (
                isinstance(best, dict)
                and type(best.get("val_loss")) in (int, float)
                and math.isfinite(best["val_loss"])
                and type(best.get("step")) is int
            ):
                raise ValueError("not an object with 'val_loss' and 'step'")
        except (OSError, ValueError) as e:
            best = None
            warnings.append(M("bad_run_json", path=run_dir / "best" / "best.json", err=e))
    resumable = status in ("interrupted", "stale", "failed") and ckpt is not None
    if status in ("interrupted", "stale") and ckpt is None and not final.is_dir():
        status = "unsaved"  # stopped before its first checkpoint: nothing can resume it (guard.holds_nothing_to_keep)
    return {
        "path": str(run_dir),
        "name": run_dir.name,
        "kind": info.get("kind"),
        "status": status,
        "recorded_status": info.get("status"),
        "host": info.get("host"),
        "local": local,
        "pid": info.get("pid"),
        "started": info.get("started"),
        "updated": info.get("updated"),
        "last_step": last_step,
        "total_steps": total,
        "tokens": int(log.tokens) if log.tokens is not None else None,
        "tokens_per_s": log.tokens_per_s,
        "eta_s": round(eta, 1) if eta is not None else None,
        "layout": layout_of(info),
        "best_val_loss": best["val_loss"] if best else log.best_val,
        "best_step": best["step"] if best else None,  # what best/ holds (written by the loop)
        "latest_checkpoint": str(ckpt) if ckpt else None,
        "final_model": str(final) if final.is_dir() else None,
        "aura_es_acc": suite_figure(final),  # `aura eval --model RUN/final --suite aura-es`, the full suite
        "size_bytes": dir_size(run_dir),
        "resume_command": resume_command(info) if resumable else None,
        "warning": " ".join(warnings) or None,
    }


@dataclass
class RunsConfig:
    dir: str = arg(
        "",
        es="Directorio donde buscar ejecuciones (por defecto ./runs si existe, si no el directorio actual).",
        en="Directory to search for runs (default: ./runs if it exists, else the current directory).",
        positional=True,
        metavar="DIR",
    )
    json: bool = arg(
        False,
        es="Salida JSON (una lista con un objeto por ejecución).",
        en="JSON output (a list with one object per run).",
    )

    def __post_init__(self):
        if not self.dir:
            self.dir = "runs" if Path("runs").is_dir() else "."
        if not Path(self.dir).is_dir():
            raise AuraError(M("no_dir", path=self.dir))


def list_runs(cfg: RunsConfig) -> int:
    root = Path(cfg.dir)
    runs = [describe_run(d) for d in find_run_dirs(root)]
    runs.sort(key=lambda r: (_timestamp(r["started"]) or 0.0, r["path"]))
    damaged = sum(1 for r in runs if r["warning"])
    if cfg.json:
        print(json.dumps(runs, indent=2, ensure_ascii=False))
        return 2 if damaged else 0
    if not runs:
        console.info(M("no_runs", path=root.resolve()))
        return 0
    for r in runs:
        if r["warning"]:
            console.warn(r["warning"])
    rows = [
        [
            os.path.relpath(r["path"], root),
            r["kind"] or "?",
            status_label(r["status"]),
            _step_cell(r),
            "" if r["tokens_per_s"] is None else num(round(r["tokens_per_s"]), ","),
            "" if r["eta_s"] is None else console.format_duration(r["eta_s"]),
            _layout_cell(r["layout"]),
            "" if r["best_val_loss"] is None else num(r["best_val_loss"], ".4f"),
            "" if r["aura_es_acc"] is None else num(r["aura_es_acc"], ".4f"),
            Path(r["latest_checkpoint"]).name if r["latest_checkpoint"] else "",
            human_bytes(r["size_bytes"]),
            _when(r["updated"]) or "",
        ]
        for r in runs
    ]
    headers = [
        M(k)
        for k in (
            "h_run",
            "h_kind",
            "h_status",
            "h_step",
            "h_speed",
            "h_eta",
            "h_layout",
            "h_best_val",
            "h_suite",
            "h_checkpoint",
            "h_size",
            "h_updated",
        )
    ]
    console.table(M("title", path=root.resolve()), headers, rows)
    if any(r["status"] == "stale" for r in runs):
        console.info(M("stale_note"))
    if any(r["status"] == "unsaved" for r in runs):
        console.info(M("unsaved_note"))
    for r in runs:
        if not r["local"]:
            console.info(M("remote_note", run=r["name"], host=r["host"]))
    resumable = [r for r in runs if r["resume_command"]]
    if resumable:
        console.info(M("resume_title"))
        for r in resumable:
            console.info(f"  {os.path.relpath(r['path'], root)}: {r['resume_command']}")
    if damaged:  # the table is shown, and scripts still learn that something needs fixing
        console.error(M("damaged", n=damaged))
        return 2
    return 0


def _step_cell(run: dict) -> str:
    """``120/500`` (step of the plan), or the step alone when the plan is not recorded."""
    if run["last_step"] is None:
        return ""
    return f"{run['last_step']}/{run['total_steps']}" if run["total_steps"] else str(run["last_step"])


def _layout_cell(layout: dict | None) -> str:
    """``2 × 4`` (nodes × processes per node) for a distributed run, else empty."""
    if layout is None:
        return ""
    nodes, per_node = layout.get("nnodes"), layout.get("nproc_per_node")
    if type(nodes) is int and type(per_node) is int:
        return f"{nodes} × {per_node}"
    return f"{layout['world_size']}"
