"""``aura runs`` (what is in a runs directory) and ``aura plot`` (loss, LR and tokens/s as a PNG).

Both read run dirs as ``aura pretrain``/``aura finetune`` write them (docs/architecture.md):
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

import csv
import io
import json
import math
import os
import shlex
import socket
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from aura.core import console
from aura.core.config import arg
from aura.core.errors import AuraError
from aura.core.files import loads_json
from aura.core.i18n import Messages, num
from aura.evaluation.results import suite_figure
from aura.core.rundir import has_lock_file, latest_checkpoint, lock_holder, status_label
from aura.core.atomic import TMP_PREFIX, dir_size, human_bytes
from aura.distributed.launcher import strip_resume


M = Messages("runs", {
    "no_dir": ("No existe el directorio {path}.", "The directory {path} does not exist."),
    "no_runs": ("No hay ejecuciones de Aura (directorios con run.json) en {path} ni uno o dos niveles "
                "por debajo.",
                "There are no Aura runs (directories with run.json) in {path} or one or two levels "
                "below it."),
    "title": ("Ejecuciones en {path}", "Runs in {path}"),
    "h_run": ("ejecución", "run"),
    "h_kind": ("tipo", "kind"),
    "h_status": ("estado", "status"),
    "h_step": ("paso", "step"),
    "h_best_val": ("mejor val", "best val"),
    "h_suite": ("aura-es (acierto)", "aura-es (acc)"),
    "h_checkpoint": ("último checkpoint", "latest checkpoint"),
    "h_size": ("tamaño", "size"),
    "h_updated": ("actualizado", "updated"),
    "resume_title": ("Para reanudar:", "To resume:"),
    "stale_note": ("'cortada': run.json dice 'running' pero el proceso ya no existe (terminó "
                   "sin poder anotarlo: kill -9, un fallo, un reinicio); se reanuda como una "
                   "interrumpida.",
                   "'stale': run.json says 'running' but the process is gone (it ended without "
                   "recording it: kill -9, a crash, a reboot); resume it like an interrupted run."),
    "remote_note": ("{run}: se ejecuta en la máquina {host}; desde aquí no se puede comprobar si sigue vivo.",
                    "{run}: it runs on host {host}; whether it is still alive cannot be checked from here."),
    "bad_run_json": ("{path} no es JSON válido ({err}); su estado se muestra como 'desconocido'.",
                     "{path} is not valid JSON ({err}); the run is shown as 'unknown'."),
    "no_log": ("{run} no tiene training_log.csv: la ejecución aún no ha registrado ningún paso, o no "
               "es un directorio de ejecución de Aura.",
               "{run} has no training_log.csv: the run has not logged a step yet, or it is not an "
               "Aura run directory."),
    "empty_log": ("{path} no tiene filas con pérdida: la ejecución aún no ha registrado ningún paso.",
                  "{path} has no rows with a loss: the run has not logged a step yet."),
    "bad_log_text": ("{path}: no es texto UTF-8 (byte {offset}, línea {line}). Aura escribe training_log.csv en "
                     "UTF-8: el archivo se dañó o se editó; restáuralo o borra las líneas dañadas.",
                     "{path}: not UTF-8 text (byte {offset}, line {line}). Aura writes training_log.csv in UTF-8: "
                     "the file was damaged or edited; restore it or delete the damaged lines."),
    "bad_log_csv": ("{path}, línea {line}: no es CSV válido ({err}). Restaura el archivo o borra las líneas dañadas.",
                    "{path}, line {line}: not valid CSV ({err}). Restore the file or delete the damaged lines."),
    "not_finite": ("{path}, línea {line}: la columna '{column}' debería ser un número finito y es {value!r}. "
                   "Corrige o borra esa línea.",
                   "{path}, line {line}: column '{column}' should be a finite number and is {value!r}. Fix or "
                   "delete that line."),
    "bad_run_field": ("{path}: el campo '{field}' no tiene el tipo esperado ({found}); se ignora.",
                      "{path}: the field '{field}' does not have the expected type ({found}); it is ignored."),
    "damaged": ("{n:ejecución tiene|ejecuciones tienen} archivos dañados (avisos arriba): la tabla muestra lo que "
                "se pudo leer.",
                "{n:run has|runs have} damaged files (warnings above): the table shows what could be read."),
    "bad_cell": ("{path}, línea {line}: la columna '{column}' debería ser un número y es {value!r}.",
                 "{path}, line {line}: column '{column}' should be a number and is {value!r}."),
    "no_run_dirs": ("Indica al menos un directorio de ejecución: aura plot RUN_DIR [RUN_DIR ...] --out "
                    "loss.png",
                    "Give at least one run directory: aura plot RUN_DIR [RUN_DIR ...] --out loss.png"),
    "bad_size": ("--width y --height (píxeles) deben estar entre 100 y 20000, y --dpi entre 20 y 1000.",
                 "--width and --height (pixels) must be between 100 and 20000, and --dpi between 20 and 1000."),
    "bad_format": ("--out debe terminar en .png, .svg o .pdf; recibido {out}.",
                   "--out must end in .png, .svg or .pdf; got {out}."),
    "loss_title": ("Pérdida", "Loss"),
    "lr_title": ("Tasa de aprendizaje", "Learning rate"),
    "rewards_title": ("Recompensas (DPO/ORPO)", "Rewards (DPO/ORPO)"),
    "rl_rewards_title": ("Recompensa (GRPO)", "Reward (GRPO)"),
    "speed_title": ("Velocidad (tokens/s)", "Speed (tokens/s)"),
    "x_tokens": ("tokens vistos", "tokens seen"),
    "x_steps": ("paso", "step"),
    "train": ("entrenamiento", "train"),
    "val": ("validación", "validation"),
    "suite_title": ("Precisión en aura-es", "aura-es accuracy"),
    "wrote": ("Gráfica guardada en {path} ({runs:ejecución|ejecuciones}).", "Plot saved to {path} ({runs:run|runs})."),
    "partial_columns": ("No todas las ejecuciones registran {cols}: se dibuja solo para {runs}.",
                        "Not every run logs {cols}: drawn only for {runs}."),
})


NUMERIC_COLUMNS = ("epoch", "step", "tokens", "train_loss", "val_loss", "lr", "grad_norm",
                   "tokens_per_s", "mfu", "seconds")


REWARD_COLUMNS = ("rewards/margin", "rewards/accuracy")  # preference tuning (aura.train.objectives.preference)
RL_REWARD_COLUMNS = ("reward", "val_reward")  # GRPO: mean reward per step, of greedy validation completions


SUITE_PREFIX = "aura-es/"  # task accuracy during training (--eval-suite aura-es, aura.evaluation)
SOURCE_VAL_PREFIX = "val_loss_"  # validation loss per source of a mixture (aura.train.continued)


def read_log(run_dir: Path) -> list[dict]:
    """Rows of ``training_log.csv`` with numbers as floats and empty cells as None."""
    path = run_dir / "training_log.csv"
    if not path.is_file():
        raise AuraError(M("no_log", run=run_dir))
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise AuraError(M("bad_log_text", path=path, offset=e.start, line=data.count(b"\n", 0, e.start) + 1)) from None
    return _parse_rows(text, path)[0]


def _parse_rows(text: str, path: Path, fieldnames: list[str] | None = None,
                first_line: int = 0) -> tuple[list[dict], list[str]]:
    """The rows of CSV ``text`` (a whole log, or its continuation after ``fieldnames``' header)."""
    rows: list[dict] = []
    reader = csv.reader(io.StringIO(text, newline=""))  # by index: a DictReader per row costs twice the time
    try:
        names = list(fieldnames) if fieldnames is not None else next((r for r in reader if r), [])
        idx = {c: i for i, c in enumerate(names)}  # a repeated name: the last one, as csv.DictReader
        cols = [(c, idx.get(c), c in FINITE_COLUMNS) for c in NUMERIC_COLUMNS + tuple(
            c for c in idx
            if c in REWARD_COLUMNS + RL_REWARD_COLUMNS or c.startswith((SUITE_PREFIX, SOURCE_VAL_PREFIX)))]
        kind_i, time_i = idx.get("kind"), idx.get("time")
        for raw in reader:
            if not raw:
                continue
            n = len(raw)
            row: dict = {"kind": (raw[kind_i] if kind_i is not None and kind_i < n else "").strip() or "step",
                         "time": raw[time_i] if time_i is not None and time_i < n else None}
            for col, i, finite in cols:
                cell = raw[i].strip() if i is not None and i < n else ""
                try:
                    row[col] = v = float(cell) if cell else None
                except ValueError:
                    raise AuraError(M("bad_cell", path=path, line=first_line + reader.line_num, column=col,
                                      value=cell)) from None
                # a diverged run logs inf/nan losses; counters and rates are always finite
                if finite and v is not None and not math.isfinite(v):
                    raise AuraError(M("not_finite", path=path, line=first_line + reader.line_num, column=col,
                                      value=cell))
            rows.append(row)
    except csv.Error as e:
        raise AuraError(M("bad_log_csv", path=path, line=first_line + reader.line_num, err=e)) from None
    return rows, names


def read_log_since(run_dir: Path, offset: int = 0, fieldnames: list[str] | None = None,
                   lines: int = 0) -> tuple[list[dict], int, list[str], int]:
    """The complete rows appended to ``training_log.csv`` after byte ``offset`` (0: the whole log), for
    readers that follow a live log (``aura studio``): (rows, next offset, header, lines read so far). A
    line still being written (no newline yet) is left for the next call; a log that shrank (a run
    started over) is read again from the start."""
    path = run_dir / "training_log.csv"
    if not path.is_file():
        raise AuraError(M("no_log", run=run_dir))
    with open(path, "rb") as f:
        if f.seek(0, os.SEEK_END) < offset:
            offset, fieldnames, lines = 0, None, 0
        f.seek(offset)
        data = f.read()
    data = data[:data.rfind(b"\n") + 1]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise AuraError(M("bad_log_text", path=path, offset=offset + e.start,
                          line=lines + data.count(b"\n", 0, e.start) + 1)) from None
    rows, header = _parse_rows(text, path, fieldnames or None, lines)
    return rows, offset + len(data), header, lines + data.count(b"\n")


FINITE_COLUMNS = ("epoch", "step", "tokens", "lr", "tokens_per_s", "mfu", "seconds")
RUN_FIELDS = {"status": (str,), "host": (str,), "kind": (str,), "pid": (int,), "last_step": (int,),
              "started": (str, int, float), "updated": (str, int, float), "argv": (list,), "cwd": (str,),
              "launch": (dict,), "total_steps": (int,)}


class LogSummary:
    """What ``aura runs`` shows from a run's log, built row by row: ``describe_run`` adds the whole log, a
    poller (``aura studio``) keeps one per run and adds only the rows appended since its last read."""

    def __init__(self):
        self.best_val = self.last_step = self.tokens = self.tokens_per_s = self.step_seconds = None
        self._mark: tuple[float, float] | None = None  # (step, seconds) of the last step row

    def add(self, rows: list[dict]) -> "LogSummary":
        for r in rows:
            v, s, t, sec = r.get("val_loss"), r.get("step"), r.get("tokens"), r.get("seconds")
            if v is not None and math.isfinite(v) and (self.best_val is None or v < self.best_val):
                self.best_val = v
            if s is not None and (self.last_step is None or s > self.last_step):
                self.last_step = s
            if t is not None and (self.tokens is None or t > self.tokens):
                self.tokens = t
            if r.get("kind") != "step" or s is None:
                continue
            if r.get("tokens_per_s") is not None:
                self.tokens_per_s = r["tokens_per_s"]
            if sec is not None:  # seconds per step between the last two step rows (a resume restarts the clock)
                if self._mark is not None and s > self._mark[0] and sec > self._mark[1]:
                    self.step_seconds = (sec - self._mark[1]) / (s - self._mark[0])
                self._mark = (s, sec)
        return self


def _typed(info: dict, path: Path) -> tuple[dict, str | None]:
    """run.json without the fields whose type is not the one Aura writes (and a warning naming them)."""
    bad = [k for k, types in RUN_FIELDS.items() if info.get(k) is not None
           and (not isinstance(info[k], types) or isinstance(info[k], bool))]
    if not bad:
        return info, None
    return ({k: v for k, v in info.items() if k not in bad},
            M("bad_run_field", path=path, field=bad[0], found=repr(info[bad[0]])[:40]))


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
        argv = argv[argv.index("-m") + 2:]  # python -m aura ... / torchrun ... -m aura ...
    elif os.path.basename(argv[0]) == "aura" or argv[0].endswith(os.path.join("aura", "__main__.py")):
        argv = argv[1:]
    return [*strip_resume(argv), "--resume-from", "latest"]


def layout_of(info: dict) -> dict | None:
    """How a distributed run is laid out (run.json's launch record): nodes, processes per node, launcher."""
    launch = info.get("launch") if isinstance(info.get("launch"), dict) else {}
    world = launch.get("world_size")
    if type(world) is not int or world <= 1:
        return None
    return {"world_size": world, "nnodes": launch.get("nnodes"), "nproc_per_node": launch.get("nproc_per_node"),
            "launcher": launch.get("launcher")}


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
    last_step = info.get("last_step")
    if last_step is None and log.last_step is not None:
        last_step = int(log.last_step)
    total = info.get("total_steps")
    logged = int(log.last_step) if log.last_step is not None else last_step
    eta = (log.step_seconds * max(total - logged, 0) if status == "running" and total and logged is not None
           and log.step_seconds is not None else None)
    ckpt = latest_checkpoint(run_dir)
    final = run_dir / "final"
    best = None
    if (run_dir / "best" / "best.json").is_file():
        try:
            best = loads_json((run_dir / "best" / "best.json").read_bytes())
            if not (isinstance(best, dict) and type(best.get("val_loss")) in (int, float)
                    and math.isfinite(best["val_loss"]) and type(best.get("step")) is int):
                raise ValueError("not an object with 'val_loss' and 'step'")
        except (OSError, ValueError) as e:
            best = None
            warnings.append(M("bad_run_json", path=run_dir / "best" / "best.json", err=e))
    resumable = status in ("interrupted", "stale", "failed") and ckpt is not None
    return {
        "path": str(run_dir), "name": run_dir.name, "kind": info.get("kind"), "status": status,
        "recorded_status": info.get("status"), "host": info.get("host"), "local": local,
        "pid": info.get("pid"), "started": info.get("started"), "updated": info.get("updated"),
        "last_step": last_step, "total_steps": total, "tokens": int(log.tokens) if log.tokens is not None else None,
        "tokens_per_s": log.tokens_per_s, "eta_s": round(eta, 1) if eta is not None else None,
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
    dir: str = arg("", es="Directorio donde buscar ejecuciones (por defecto ./runs si existe, si no el "
                          "directorio actual).",
                   en="Directory to search for runs (default: ./runs if it exists, else the current "
                      "directory).", positional=True, metavar="DIR")
    json: bool = arg(False, es="Salida JSON (una lista con un objeto por ejecución).",
                     en="JSON output (a list with one object per run).")

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
    rows = [[os.path.relpath(r["path"], root), r["kind"] or "?", status_label(r["status"]),
             "" if r["last_step"] is None else r["last_step"],
             "" if r["best_val_loss"] is None else num(r['best_val_loss'], ".4f"),
             "" if r["aura_es_acc"] is None else num(r["aura_es_acc"], ".4f"),
             Path(r["latest_checkpoint"]).name if r["latest_checkpoint"] else "",
             human_bytes(r["size_bytes"]), (r["updated"] or "")[:19].replace("T", " ")] for r in runs]
    headers = [M(k) for k in ("h_run", "h_kind", "h_status", "h_step", "h_best_val", "h_suite", "h_checkpoint",
                              "h_size", "h_updated")]
    console.table(M("title", path=root.resolve()), headers, rows)
    if any(r["status"] == "stale" for r in runs):
        console.info(M("stale_note"))
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
