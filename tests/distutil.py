"""Helpers for tests that start torchrun: free ports and subprocess runs with the repo on the path."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "tests" / "dist_scripts"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env(**extra: str) -> dict:
    e = dict(os.environ)
    e.update(
        {
            "AURA_LANG": "en",
            "AURA_PLAIN": "1",
            "PYTHONUNBUFFERED": "1",
            "OMP_NUM_THREADS": "1",
            "PYTHONPATH": os.pathsep.join([str(ROOT), e.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        }
    )
    for k in (
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
        "NNODES",
        "NODE_RANK",
        "GPUS_PER_NODE",
        "TORCHELASTIC_RUN_ID",
    ):
        e.pop(k, None)
    e.update(extra)
    return e


def torchrun(
    *args: str, nproc: int = 2, extra_env: dict | None = None, timeout: float = 300, rdzv: list[str] | None = None
) -> subprocess.CompletedProcess:
    """``python -m torch.distributed.run --nproc_per_node=N --master_port=<free> ARGS``."""
    launcher = rdzv if rdzv is not None else [f"--master_port={free_port()}"]
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}", *launcher, *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, env=env(**(extra_env or {})), timeout=timeout, cwd=ROOT)


def output(proc: subprocess.CompletedProcess) -> str:
    return proc.stdout + proc.stderr
