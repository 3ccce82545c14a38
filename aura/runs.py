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

from aura import console
from aura.config import arg
from aura.errors import AuraError
from aura.i18n import Messages
from aura.rundir import has_lock_file, latest_checkpoint, lock_holder
from aura.utils.fsutil import TMP_PREFIX, atomic_write_bytes, dir_size, human_bytes, read_json

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
    "h_checkpoint": ("último checkpoint", "latest checkpoint"),
    "h_size": ("tamaño", "size"),
    "h_updated": ("actualizado", "updated"),
    "resume_title": ("Para reanudar:", "To resume:"),
    "st_running": ("en marcha", "running"),
    "st_finished": ("terminada", "finished"),
    "st_interrupted": ("interrumpida", "interrupted"),
    "st_failed": ("fallida", "failed"),
    "st_stale": ("cortada", "stale"),
    "st_unknown": ("desconocido", "unknown"),
    "stale_note": ("'cortada': run.json dice 'running' pero el proceso ya no existe (terminó "
                   "sin poder anotarlo: kill -9, un fallo, un reinicio); se reanuda como una "
                   "interrumpida.",
                   "'stale': run.json says 'running' but the process is gone (it ended without "
                   "recording it: kill -9, a crash, a reboot); resume it like an interrupted run."),
    "remote_note": ("{run}: se ejecuta en el host {host}; desde aquí no se puede comprobar si sigue vivo.",
                    "{run}: it runs on host {host}; whether it is still alive cannot be checked from here."),
    "bad_run_json": ("{path} no es JSON válido ({err}); su estado se muestra como 'desconocido'.",
                     "{path} is not valid JSON ({err}); the run is shown as 'unknown'."),
    "no_log": ("{run} no tiene training_log.csv: la ejecución aún no ha registrado ningún paso, o no "
               "es un directorio de ejecución de Aura.",
               "{run} has no training_log.csv: the run has not logged a step yet, or it is not an "
               "Aura run directory."),
    "empty_log": ("{path} no tiene filas con pérdida: la ejecución aún no ha registrado ningún paso.",
                  "{path} has no rows with a loss: the run has not logged a step yet."),
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
    "speed_title": ("Velocidad (tokens/s)", "Speed (tokens/s)"),
    "x_tokens": ("tokens vistos", "tokens seen"),
    "x_steps": ("paso", "step"),
    "train": ("entrenamiento", "train"),
    "val": ("validación", "validation"),
    "suite_title": ("Precisión en aura-es", "aura-es accuracy"),
    "wrote": ("Gráfica guardada en {path} ({runs:ejecución|ejecuciones}).", "Plot saved to {path} ({runs:run|runs})."),
})

NUMERIC_COLUMNS = ("epoch", "step", "tokens", "train_loss", "val_loss", "lr", "grad_norm",
                   "tokens_per_s", "mfu", "seconds")
REWARD_COLUMNS = ("rewards/margin", "rewards/accuracy")  # preference tuning (aura.train.preference)
SUITE_PREFIX = "aura-es/"  # task accuracy during training (--eval-suite aura-es, aura.evalsuite)


# ---------------------------------------------------------------- reading run dirs

def read_log(run_dir: Path) -> list[dict]:
    """Rows of ``training_log.csv`` with numbers as floats and empty cells as None."""
    path = run_dir / "training_log.csv"
    if not path.is_file():
        raise AuraError(M("no_log", run=run_dir))
    rows = []
    with open(path, newline="", encoding="utf-8") as f:
        for line, raw in enumerate(csv.DictReader(f), start=2):
            row: dict = {"kind": (raw.get("kind") or "step").strip(), "time": raw.get("time")}
            for col in NUMERIC_COLUMNS + tuple(c for c in raw if c in REWARD_COLUMNS or
                                               (c or "").startswith(SUITE_PREFIX)):
                cell = (raw.get(col) or "").strip()
                try:
                    row[col] = float(cell) if cell else None
                except ValueError:
                    raise AuraError(M("bad_cell", path=path, line=line, column=col, value=cell)) from None
            rows.append(row)
    return rows


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
                    nxt += sorted(p for p in d.iterdir() if p.is_dir() and not p.name.startswith(TMP_PREFIX))
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

    "running" comes from the run dir's lock (``aura.rundir.lock_holder``): held means a process writes
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
    """The run's own command line with ``--resume-from latest`` (replacing any earlier one)."""
    argv = [str(a) for a in info.get("argv") or []]
    if not argv:
        return None
    if "-m" in argv and argv.index("-m") + 1 < len(argv) and argv[argv.index("-m") + 1] == "aura":
        argv = argv[argv.index("-m") + 2:]  # python -m aura ... / torchrun ... -m aura ...
    elif os.path.basename(argv[0]) == "aura" or argv[0].endswith(os.path.join("aura", "__main__.py")):
        argv = argv[1:]
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--resume-from":
            skip = True
        elif a != "--overwrite" and not a.startswith("--resume-from="):  # resuming must not wipe it
            out.append(a)
    cmd = shlex.join(["aura", *out, "--resume-from", "latest"])
    return f"cd {shlex.quote(info['cwd'])} && {cmd}" if info.get("cwd") else cmd


def describe_run(run_dir: Path) -> dict:
    """Everything ``aura runs`` shows about one run dir (also its --json record)."""
    warning = None
    try:
        info = read_json(run_dir / "run.json")
        if not isinstance(info, dict):
            raise ValueError("not an object")
    except (OSError, ValueError) as e:
        info, warning = {}, M("bad_run_json", path=run_dir / "run.json", err=e)
    status, local = live_status(info, run_dir) if info else ("unknown", True)
    try:
        rows = read_log(run_dir)
    except AuraError:
        rows = []
    vals = [r["val_loss"] for r in rows if r["val_loss"] is not None and math.isfinite(r["val_loss"])]
    steps = [r["step"] for r in rows if r["step"] is not None]
    tokens = [r["tokens"] for r in rows if r["tokens"] is not None]
    last_step = info.get("last_step")
    if last_step is None and steps:
        last_step = int(max(steps))
    ckpt = latest_checkpoint(run_dir)
    final = run_dir / "final"
    try:
        best = read_json(run_dir / "best" / "best.json")
        best = best if isinstance(best, dict) and isinstance(best.get("val_loss"), (int, float)) else None
    except (OSError, ValueError):
        best = None
    resumable = status in ("interrupted", "stale", "failed") and ckpt is not None
    return {
        "path": str(run_dir), "name": run_dir.name, "kind": info.get("kind"), "status": status,
        "recorded_status": info.get("status"), "host": info.get("host"), "local": local,
        "pid": info.get("pid"), "started": info.get("started"), "updated": info.get("updated"),
        "last_step": last_step, "tokens": int(max(tokens)) if tokens else None,
        "best_val_loss": best["val_loss"] if best else (min(vals) if vals else None),
        "best_step": best["step"] if best else None,  # what best/ holds (written by the loop)
        "latest_checkpoint": str(ckpt) if ckpt else None,
        "final_model": str(final) if final.is_dir() else None,
        "size_bytes": dir_size(run_dir),
        "resume_command": resume_command(info) if resumable else None,
        "warning": warning,
    }


# ---------------------------------------------------------------- aura runs

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


def status_label(status: str) -> str:
    """A run status (running, finished, interrupted, failed, stale) in the user's language."""
    key = "st_" + status
    return M(key) if key in M.table else status


def list_runs(cfg: RunsConfig) -> int:
    root = Path(cfg.dir)
    runs = [describe_run(d) for d in find_run_dirs(root)]
    runs.sort(key=lambda r: (_timestamp(r["started"]) or 0.0, r["path"]))
    if cfg.json:
        print(json.dumps(runs, indent=2, ensure_ascii=False))
        return 0
    if not runs:
        console.info(M("no_runs", path=root.resolve()))
        return 0
    for r in runs:
        if r["warning"]:
            console.warn(r["warning"])
    rows = [[os.path.relpath(r["path"], root), r["kind"] or "?", status_label(r["status"]),
             "" if r["last_step"] is None else r["last_step"],
             "" if r["best_val_loss"] is None else f"{r['best_val_loss']:.4f}",
             Path(r["latest_checkpoint"]).name if r["latest_checkpoint"] else "",
             human_bytes(r["size_bytes"]), (r["updated"] or "")[:19].replace("T", " ")] for r in runs]
    headers = [M(k) for k in ("h_run", "h_kind", "h_status", "h_step", "h_best_val", "h_checkpoint",
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
    return 0


# ---------------------------------------------------------------- aura plot

@dataclass
class PlotConfig:
    run_dirs: list[str] = arg([], es="Directorios de ejecución (con training_log.csv).",
                              en="Run directories (with training_log.csv).", positional=True,
                              metavar="RUN_DIR")
    out: str = arg("loss.png", es="Archivo de salida (.png, .svg o .pdf), relativo a --output-dir.",
                   en="Output file (.png, .svg or .pdf), relative to --output-dir.")
    output_dir: str = arg(".", es="Directorio donde se guarda la gráfica.",
                          en="Directory where the plot is saved.")
    width: int = arg(1800, es="Ancho en píxeles.", en="Width in pixels.")
    height: int = arg(600, es="Alto en píxeles.", en="Height in pixels.")
    dpi: int = arg(100, es="Puntos por pulgada (tamaño del texto relativo a la imagen).",
                   en="Dots per inch (text size relative to the image).")

    def __post_init__(self):
        if not self.run_dirs:
            raise AuraError(M("no_run_dirs"))
        if not (100 <= self.width <= 20000 and 100 <= self.height <= 20000 and 20 <= self.dpi <= 1000):
            raise AuraError(M("bad_size"))
        if Path(self.out).suffix.lower() not in (".png", ".svg", ".pdf"):
            raise AuraError(M("bad_format", out=self.out))
        for d in self.run_dirs:
            if not Path(d).is_dir():
                raise AuraError(M("no_dir", path=d))


def _labels(dirs: list[Path]) -> list[str]:
    """Run names for the legend: the dir name, or more of its path where names repeat."""
    names = [d.name or str(d) for d in dirs]
    if len(set(names)) == len(names):
        return names
    return [str(d) for d in dirs]


def plot(cfg: PlotConfig) -> int:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import EngFormatter

    from aura.utils.fsutil import check_writable

    check_writable(Path(cfg.output_dir) / cfg.out, flag="--out")
    dirs = [Path(d) for d in cfg.run_dirs]
    logs = []
    for d in dirs:
        rows = read_log(d)
        if not any(r["train_loss"] is not None or r["val_loss"] is not None for r in rows):
            raise AuraError(M("empty_log", path=d / "training_log.csv"))
        logs.append(rows)
    # Tokens are the fair x axis across runs of different batch sizes; steps when a log lacks them.
    use_tokens = all(any(r["tokens"] is not None for r in rows) for rows in logs)
    xcol = "tokens" if use_tokens else "step"

    fig = Figure(figsize=(cfg.width / cfg.dpi, cfg.height / cfg.dpi), dpi=cfg.dpi, layout="constrained")
    FigureCanvasAgg(fig)
    rewards = any(r.get(c) is not None for rows in logs for r in rows for c in REWARD_COLUMNS)
    suite_cols = sorted({c for rows in logs for r in rows for c in r if c.startswith(SUITE_PREFIX)})
    axes = list(fig.subplots(1, 3 + rewards + bool(suite_cols)))
    ax_loss, ax_lr, ax_speed = axes[:3]
    ax_suite = axes[-1] if suite_cols else None
    colours = [f"C{i % 10}" for i in range(len(dirs))]
    for label, rows, colour in zip(_labels(dirs), logs, colours):
        def series(col, kinds):
            pts = [(r[xcol], r[col]) for r in rows
                   if r["kind"] in kinds and r[xcol] is not None and r[col] is not None]
            return [p[0] for p in pts], [p[1] for p in pts]

        xs, ys = series("train_loss", ("step",))
        if not xs:  # logs with only epoch rows (short fine-tunes)
            xs, ys = series("train_loss", ("epoch",))
        ax_loss.plot(xs, ys, color=colour, lw=1.2, label=f"{label} ({M('train')})")
        xs, ys = series("val_loss", ("eval", "epoch", "step"))
        if xs:
            ax_loss.plot(xs, ys, color=colour, lw=1.2, ls="--", marker="o", ms=3,
                         label=f"{label} ({M('val')})")
        ax_lr.plot(*series("lr", ("step",)), color=colour, lw=1.2, label=label)
        ax_speed.plot(*series("tokens_per_s", ("step",)), color=colour, lw=1.2, label=label)
        if rewards and any(r.get("rewards/margin") is not None for r in rows):
            for col, style in zip(REWARD_COLUMNS, ("-", ":")):
                axes[3].plot(*series(col, ("step",)), color=colour, lw=1.2, ls=style, label=f"{label} ({col})")
        for col, style in zip(suite_cols, ("-", "--", ":", "-.", (0, (1, 3)), (0, (5, 1)))):
            xs, ys = series(col, ("eval",))
            if xs:
                ax_suite.plot(xs, ys, color=colour, lw=1.2, ls=style, marker="o", ms=3,
                              label=f"{label} ({col.removeprefix(SUITE_PREFIX)})")
    titled = [(ax_loss, "loss_title"), (ax_lr, "lr_title"), (ax_speed, "speed_title")]
    titled += [(axes[3], "rewards_title")] if rewards else []
    for ax, title in titled + ([(ax_suite, "suite_title")] if suite_cols else []):
        ax.set_title(M(title))
        ax.set_xlabel(M("x_tokens") if use_tokens else M("x_steps"))
        ax.grid(alpha=0.3)
        if use_tokens:
            ax.xaxis.set_major_formatter(EngFormatter())
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="small")
    ax_lr.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    ax_speed.yaxis.set_major_formatter(EngFormatter())

    out = Path(cfg.output_dir) / cfg.out
    buf = io.BytesIO()
    fig.savefig(buf, format=out.suffix.lower().lstrip("."), dpi=cfg.dpi)
    atomic_write_bytes(out, buf.getvalue())
    console.success(M("wrote", path=out, runs=len(dirs)))
    return 0
