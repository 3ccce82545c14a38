"""Checkpoints: kill -9 during a save leaves a usable latest, keep-last, weights_only, RNG, disk full."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.conftest import run_aura
from tests.evidence import require_or_skip
from tests.test_pretrain import TINY_FLAGS


@pytest.fixture(scope="module")
def prepared(prepared_corpus) -> Path:
    return prepared_corpus


@pytest.mark.slow
def test_kill_9_during_save_leaves_a_usable_latest(prepared, tmp_path):
    from aura.train.run.checkpoint import latest_checkpoint, list_checkpoints

    run = tmp_path / "run"
    args = [
        "pretrain",
        "--data",
        str(prepared),
        "--output-dir",
        str(run),
        *TINY_FLAGS,
        "--max-steps",
        "400",
        "--save-steps",
        "1",
        "--keep-last",
        "2",
        "--embed-size",
        "128",
    ]
    env = dict(os.environ, AURA_LANG="en", AURA_PLAIN="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "aura", *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
    )
    deadline = time.time() + 240
    killed = False
    while time.time() < deadline and proc.poll() is None:
        if list_checkpoints(run) and any(p.name.startswith(".tmp-checkpoint-step") for p in run.iterdir()):
            proc.send_signal(signal.SIGKILL)
            killed = True
            break
        time.sleep(0.002)
    proc.wait(timeout=60)
    assert killed, "never caught a save in progress"
    latest = latest_checkpoint(run)
    assert latest is not None and not latest.name.startswith(".tmp-")
    for name in ("trainer_state.json", "model.safetensors", "optimizer.pt", "rng/rank-0.pt", "tokenizer.json"):
        assert (latest / name).is_file(), name
    r = run_aura(*args, "--max-steps", str(list_checkpoints(run)[-1].step + 2), "--resume-from", "latest")
    assert r.returncode == 0, r.stderr
    assert not any(p.name.startswith(".tmp-") for p in run.iterdir())  # leftovers cleaned


def test_checkpoint_contents_load_with_weights_only_and_keep_last(prepared, tmp_path):
    from aura.train.run.checkpoint import list_checkpoints, read_state

    run = tmp_path / "run"
    r = run_aura(
        "pretrain",
        "--data",
        prepared,
        "--output-dir",
        run,
        *TINY_FLAGS,
        "--max-steps",
        "6",
        "--save-steps",
        "2",
        "--keep-last",
        "2",
    )
    assert r.returncode == 0, r.stderr
    assert [c.step for c in list_checkpoints(run)] == [4, 6]
    ck = run / "checkpoint-step-6"
    for pt in ck.rglob("*.pt"):
        torch.load(pt, weights_only=True)
    state = read_state(ck)
    assert state["step"] == 6 and state["data"]["position"] == 6
    assert state["tokenizer_hash"] and state["model"]["n_layers"] == 2 and state["versions"]["torch"]
    assert state["config"]["max_steps"] == 6


def test_rng_round_trip():
    import random

    import numpy as np

    from aura.train.run.checkpoint import capture_rng, restore_rng

    state = capture_rng()
    a = (random.random(), np.random.rand(), torch.rand(1).item())
    restore_rng(state)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == a


def test_disk_full_keeps_previous_checkpoint(prepared, tmp_path):
    """A real full filesystem (a 12 MB tmpfs); skipped where mounting is not allowed."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if (
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=12m", "tmpfs", str(mnt)], capture_output=True).returncode
        != 0
    ):
        require_or_skip("tmpfs", "cannot mount a small tmpfs here (needs root)")
    try:
        run = mnt / "run"
        r = run_aura(
            "pretrain",
            "--data",
            prepared,
            "--output-dir",
            run,
            *TINY_FLAGS,
            "--embed-size",
            "128",
            "--max-steps",
            "30",
            "--save-steps",
            "1",
            "--keep-last",
            "0",
        )
        assert r.returncode == 2, r.stdout + r.stderr
        assert "No disk space left" in r.stderr and "Traceback" not in r.stderr
        from aura.train.run.checkpoint import latest_checkpoint

        latest = latest_checkpoint(run)
        assert latest is not None and (latest / "model.safetensors").is_file()
        assert not any(p.name.startswith(".tmp-") for p in run.iterdir())
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)
