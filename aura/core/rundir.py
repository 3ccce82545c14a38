"""The run directory's layout: names, patterns and "which checkpoint is the latest", in one place.

Torch-free, so the readers (``aura runs``, ``aura plot``, ``aura doctor``) and the writer
(``aura.train.run.checkpoint``) share one definition and can never disagree about what a complete
checkpoint is or which one ``--resume-from latest`` takes.

A checkpoint directory counts only when it is complete: its ``trainer_state.json`` is written last,
and ``.tmp-*`` entries (unfinished writes) are never listed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from aura.core.files import loads_json
from aura.core.i18n import Messages
from aura.core.locks import FileLock, lock_holder as _lock_holder, read_lock_record

_STATUS = Messages(
    "run_status",
    {
        "st_running": ("en marcha", "running"),
        "st_finished": ("terminada", "finished"),
        "st_interrupted": ("interrumpida", "interrupted"),
        "st_failed": ("fallida", "failed"),
        "st_stale": ("cortada", "stale"),
        "st_unsaved": ("detenida sin checkpoint", "stopped, no checkpoint"),
        "st_unknown": ("desconocido", "unknown"),
    },
)

RUN_JSON = "run.json"
STATE_FILE = "trainer_state.json"
MANIFEST_FILE = "files.json"  # a checkpoint's list of its files and sizes (aura.distributed.ckpt_sync)
TRAINING_LOG = "training_log.csv"
MODEL_CONFIG = "model_config.json"
EPOCH_INFO = "epoch_info.json"
REWARD_SIGNAL = "reward_signal.json"  # GRPO: the run's groups and those with a reward signal (the report reads it)
FINAL = "final"
BEST = "best"
TB = "tb"
LOCK_FILE = ".aura-run.lock"
CHECKPOINT_KINDS = ("checkpoint-step", "interrupt-step", "checkpoint-epoch")
CHECKPOINT_RE = re.compile(r"^(checkpoint-step|interrupt-step|checkpoint-epoch)-(\d+)$")
# What a run writes besides checkpoints (``--overwrite`` removes exactly these, and only in a run dir
# that carries Aura's marker).
RUN_ENTRIES = (FINAL, BEST, TB, RUN_JSON, TRAINING_LOG, MODEL_CONFIG, EPOCH_INFO, REWARD_SIGNAL)


@dataclass(frozen=True)
class CheckpointRef:
    path: Path
    step: int
    kind: str  # checkpoint-step | interrupt-step | checkpoint-epoch
    saved: float  # when it was saved (trainer_state.json's "saved_at", else the file's mtime)


def read_state(directory: str | Path) -> dict | None:
    """A checkpoint's ``trainer_state.json`` as a dict, or None when it is missing or unreadable."""
    try:
        state = loads_json((Path(directory) / STATE_FILE).read_bytes())
    except (OSError, ValueError):  # ValueError: not JSON, not UTF-8, nested too deep
        return None
    return state if isinstance(state, dict) else None


def list_checkpoints(run_dir: str | Path) -> list[CheckpointRef]:
    """Complete checkpoints in ``run_dir``, oldest step first (ties: older save first)."""
    run_dir = Path(run_dir)
    refs: list[CheckpointRef] = []
    if not run_dir.is_dir():
        return refs
    for p in run_dir.iterdir():
        m = CHECKPOINT_RE.match(p.name)
        if not m or not p.is_dir():
            continue
        state = read_state(p)
        if state is None:
            continue
        try:
            step = int(state["step"])
            saved = float(state.get("saved_at") or (p / STATE_FILE).stat().st_mtime)
        except (OSError, ValueError, KeyError, TypeError):
            continue
        refs.append(CheckpointRef(p, step, m.group(1), saved))
    return sorted(refs, key=lambda r: (r.step, r.saved))


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The complete checkpoint with the highest training step (what ``--resume-from latest`` takes)."""
    refs = list_checkpoints(run_dir)
    return refs[-1].path if refs else None


def step_of(path: str | Path) -> int | None:
    """The training step of a checkpoint directory (from its state, else its name), or None."""
    state = read_state(path)
    if state is not None and isinstance(state.get("step"), int):
        return state["step"]
    m = CHECKPOINT_RE.match(Path(path).name)
    return int(m.group(2)) if m else None


# ---- who writes a run directory ------------------------------------------------------------------
#
# A run directory has one writer at a time: the process (rank 0 under torchrun) that holds an OS lock
# (``fcntl.flock``) on ``RUN_DIR/.aura-run.lock``. The kernel drops the lock when that process exits,
# however it exits (kill -9 included), so a dead run never leaves a stale lock behind. The file holds
# the holder's record: {pid, host, since} and ``job``, the identity of the training job that last
# wrote the directory (an elastic restart resumes only its own job: ``aura.train.run.guard``).

FORK_PREFIX = "forked-from-step-"  # FORK_PREFIX + "N-TIME/": a branch moved aside by --fork (never a checkpoint)


def read_record(path: str | Path) -> dict:
    """A small JSON object file as a dict ({} when missing, unreadable or not an object)."""
    try:
        data = loads_json(Path(path).read_bytes())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


class RunLock(FileLock):
    """The writer's lock on a run directory (see above; ``aura.core.locks.FileLock``). ``acquire``
    returns None when taken, else the holder's record; ``previous`` is the record found in the file
    (the last writer's job), which the new record keeps until ``set_job``."""

    def __init__(self, run_dir: str | Path):
        super().__init__(Path(run_dir) / LOCK_FILE)

    def acquire(self, *, wait_s: float = 1.0) -> dict | None:
        holder = super().acquire(wait_s=wait_s)
        if holder is None and self.fd is not None:
            self.record["job"] = self.previous.get("job")
            self.write()
        return holder

    def set_job(self, job: dict) -> None:
        self.record["job"] = job
        self.write()


def lock_holder(run_dir: str | Path) -> dict | None:
    """The record of the process holding ``run_dir``'s lock now ({} if unreadable), or None when no
    process holds it (or the directory has no lock file: a run of an older Aura, or none)."""
    return _lock_holder(Path(run_dir) / LOCK_FILE)


def last_job(run_dir: str | Path) -> dict | None:
    """The job recorded in ``run_dir``'s lock file (read without following a link), or None."""
    return read_lock_record(Path(run_dir) / LOCK_FILE).get("job")


def has_lock_file(run_dir: str | Path) -> bool:
    return (Path(run_dir) / LOCK_FILE).is_file()


def is_legacy_run(run_dir: str | Path) -> bool:
    """A run dir written by an Aura older than the ownership markers: its run.json names an Aura kind
    and version. Such a directory counts as Aura's (it gets its markers on first use)."""
    info = read_record(Path(run_dir) / RUN_JSON)
    return info.get("kind") in ("pretrain", "finetune") and "aura_version" in info


def staging_prefixes() -> tuple[str, ...]:
    """The ``.tmp-`` name prefixes a run writes in its directory (checkpoints, final/, best/, logs,
    pruned checkpoints): training start cleans only these, and only stale ones."""
    dirs = [f"{k}-" for k in CHECKPOINT_KINDS] + [f"{FINAL}-", f"{BEST}-", f"{TB}-", "del-"]
    files = [f"{name}." for name in (RUN_JSON, TRAINING_LOG, MODEL_CONFIG, EPOCH_INFO, ".aura-dir.json")]
    old = [f"old~{name}" for name in (FINAL, BEST)] + [f"old~{k}-" for k in CHECKPOINT_KINDS]
    return tuple(dirs + files + old)


def status_label(status: str) -> str:
    """A run status (running, finished, interrupted, failed, stale, unsaved) in the user's language."""
    key = "st_" + status
    return _STATUS(key) if key in _STATUS.table else status
