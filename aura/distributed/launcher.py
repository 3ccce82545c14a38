"""How this process was launched, how to launch it again, and noticing that its launcher is gone.

``describe_launch`` is the launch record a run keeps in ``run.json`` (``launch``): the launcher (``aura``
alone, ``torchrun``, or ``aura launch``), the command that precedes Aura's own arguments, the
environment variables that described the job, the world size, nodes and processes per node. Under
torchrun the agent's own command line is read from the parent process (the elastic agent starts the
workers); ``aura launch`` hands its workers its command line in ``AURA_LAUNCH`` (JSON). ``resume_command``
rebuilds the command that resumes the run from that record: the same launcher, process count, nodes and
every flag, so following the printed hint never resumes a 2-process run in one process.

``ParentWatch``: torchrun starts every worker in a session of its own, so a launcher that dies without
forwarding anything (kill -9 of ``aura launch`` and torchrun, a closed SSH session) leaves the workers
training as orphans. The watch polls the parent pid (a worker's parent is the elastic agent); once it
changes, the agent is gone: the worker's output is pointed at ``/dev/null`` (the terminal or pipe it wrote
to may be gone too, and a failed write must not stop the checkpoint) and the callback asks the training
loop to stop with a checkpoint, as SIGTERM does. Polling is used rather than ``PR_SET_PDEATHSIG``: the
death signal is tied to the thread that forked the worker, not to the agent process, and exists only on
Linux.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import threading
from collections.abc import Callable
from pathlib import Path

LAUNCH_ENV = "AURA_LAUNCH"  # set by `aura launch` for its workers: {"argv": [...], "env": {...}, "results": DIR}
CHECK_ENV = "AURA_CHECK_FLAGS"  # "1": `aura CMD ...` parses and checks its flags, then exits (aura launch)
SHARE_GPU_ENV = "AURA_SHARE_GPU"  # "1": `aura launch --share-gpu`: several ranks on one GPU over gloo (tests only)
JOB_ENV_VARS = ("NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "GPUS_PER_NODE")  # aura launch's contract
_TORCHRUN_MODULES = ("torch.distributed.run", "torch.distributed.launch")


def _launched() -> bool:
    """Started by a launcher (torchrun sets these; so would any launcher speaking its contract)."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def _int_env(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name) or default)
    except ValueError:
        return default


def aura_argv(argv: list[str] | None = None) -> list[str]:
    """Aura's own arguments (``pretrain --data ...``) of this process's command line."""
    return [str(a) for a in (sys.argv[1:] if argv is None else argv)]


def _torchrun_prefix(cmdline: list[str]) -> list[str] | None:
    """``["torchrun", <its flags>, "-m", "aura"]`` from the elastic agent's command line, or None."""
    start = None
    for i, a in enumerate(cmdline):
        if os.path.basename(a) == "torchrun":
            start = i + 1
            break
        if a in _TORCHRUN_MODULES and i > 0 and cmdline[i - 1] == "-m":
            start = i + 1
            break
    if start is None:
        return None
    for j in range(start, len(cmdline) - 1):
        if cmdline[j] in ("-m", "--module") and cmdline[j + 1] == "aura":
            return ["torchrun", *cmdline[start:j], "-m", "aura"]
    return None


def _parent_cmdline() -> list[str]:
    try:
        import psutil

        return psutil.Process(os.getppid()).cmdline()
    except Exception:  # noqa: BLE001 - no psutil, no permission, the parent already gone
        return []


def describe_launch(argv: list[str] | None = None) -> dict:
    """The launch record of this process (see the module docstring); JSON-able."""
    world = _int_env("WORLD_SIZE", 1)
    local = _int_env("LOCAL_WORLD_SIZE", world)
    nnodes = _int_env("GROUP_WORLD_SIZE", max(1, world // max(local, 1)))
    record = {
        "launcher": "aura",
        "prefix": ["aura"],
        "env": {},
        "argv": aura_argv(argv),
        "world_size": world,
        "nnodes": nnodes,
        "nproc_per_node": local,
        "cwd": os.getcwd(),
    }
    if not _launched():
        return record
    launch = _launch_env()
    if launch is not None and isinstance(launch.get("argv"), list):
        record.update(
            launcher="aura launch",
            prefix=["aura", "launch", *map(str, launch["argv"])],
            env={str(k): str(v) for k, v in (launch.get("env") or {}).items()},
        )
        return record
    prefix = _torchrun_prefix(_parent_cmdline())
    record.update(
        launcher="torchrun",
        prefix=prefix or ["torchrun", f"--nnodes={nnodes}", f"--nproc_per_node={local}", "-m", "aura"],
    )
    return record


def _launch_env() -> dict | None:
    try:
        launch = json.loads(os.environ.get(LAUNCH_ENV) or "null")
    except ValueError:
        return None
    return launch if isinstance(launch, dict) else None


def record_exit(code: int) -> None:
    """Under ``aura launch``: tell the launcher how this worker ended (3 = stopped with a checkpoint), so
    that it exits like a single-process run would."""
    launch = _launch_env()
    results = (launch or {}).get("results")
    if not results or not os.path.isdir(str(results)):
        return
    try:
        with open(os.path.join(str(results), f"rank-{os.environ.get('RANK', '0')}"), "w", encoding="utf-8") as f:
            f.write(str(int(code)))
    except OSError:
        pass


def strip_resume(argv: list[str]) -> list[str]:
    """``argv`` without ``--resume-from X`` and ``--overwrite`` (resuming must not wipe the run)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--resume-from":
            skip = True
        elif a != "--overwrite" and not a.startswith("--resume-from="):
            out.append(a)
    return out


def resume_command(record: dict, checkpoint: str | Path) -> str:
    """The command that resumes the run of ``record`` from ``checkpoint`` (a path or ``latest``)."""
    prefix = [str(a) for a in record.get("prefix") or ["aura"]]
    cmd = shlex.join(
        [*prefix, *strip_resume([str(a) for a in record.get("argv") or []]), "--resume-from", str(checkpoint)]
    )
    env = " ".join(f"{k}={shlex.quote(str(v))}" for k, v in (record.get("env") or {}).items())
    return f"{env} {cmd}" if env else cmd


class ParentWatch:
    """Calls ``on_orphan()`` once (from a daemon thread) when this process's parent exits."""

    def __init__(self, on_orphan: Callable[[], None], *, interval_s: float = 1.0):
        self.on_orphan, self.interval_s = on_orphan, interval_s
        self.parent = os.getppid()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> ParentWatch:
        if self.parent > 1:
            self._thread = threading.Thread(target=self._run, name="aura-parent-watch", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            if os.getppid() != self.parent:
                silence_output()
                self.on_orphan()
                return

    def stop(self) -> None:
        self._stop.set()


def silence_output() -> None:
    """Point stdout and stderr at /dev/null: the terminal or pipe they wrote to may be gone, and a write
    that fails (EPIPE, EIO) must not interrupt a checkpoint."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        for fd in (1, 2):
            os.dup2(null, fd)
        os.close(null)
    except OSError:
        pass
