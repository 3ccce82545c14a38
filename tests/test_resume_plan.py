"""A resume continues the run that was started (issue 17.1) and its epoch means stay right (issue 14):
the plan comes from the checkpoint, a new length is announced and re-plans the cosine without a jump,
flags that would break exact resume are refused, and a resumed epoch's mean equals the uninterrupted one."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import run_aura, run_aura_here
from tests.test_loop import read_log
from tests.test_pretrain import TINY_FLAGS

# seq 256 x batch 16 x accumulation 2 on the test corpus: 8 optimizer steps per epoch
EPOCH_FLAGS = [
    *TINY_FLAGS,
    "--seq-length",
    "256",
    "--batch-size",
    "16",
    "--gradient-accumulation-steps",
    "2",
    "--keep-last",
    "0",
    "--precision",
    "fp32",
]
PER_EPOCH = 8


@pytest.fixture(scope="module")
def prepared(prepared_corpus) -> Path:
    return prepared_corpus


@pytest.fixture(scope="module")
def reference(prepared, tmp_path_factory) -> Path:
    """An uninterrupted --epochs 3 run with a checkpoint in the middle of epoch 2 (step 12)."""
    run = tmp_path_factory.mktemp("ref") / "run"
    r = run_aura(
        "pretrain", "--data", prepared, "--output-dir", run, *EPOCH_FLAGS, "--epochs", "3", "--save-steps", "12"
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"Plan: {3 * PER_EPOCH} optimizer steps (3 epochs" in r.stdout
    return run


def rows(run: Path, kind: str) -> dict[int, dict]:
    with open(run / "training_log.csv", newline="") as f:
        return {int(r["step"]): r for r in csv.DictReader(f) if r["kind"] == kind}


def resumed_copy(reference: Path, tmp_path: Path, step: int = 12) -> Path:
    run = tmp_path / "resumed"
    run.mkdir()
    shutil.copytree(reference / f"checkpoint-step-{step}", run / f"checkpoint-step-{step}")
    return run


def test_resume_without_repeating_epochs_continues_the_run_and_its_epoch_means(prepared, reference, tmp_path):
    run = resumed_copy(reference, tmp_path)
    # the README's resume line: no --epochs; the plan (3 epochs, 24 steps) comes from the checkpoint
    r = run_aura("pretrain", "--data", prepared, "--output-dir", run, *EPOCH_FLAGS, "--resume-from", "latest")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"Plan: {3 * PER_EPOCH} optimizer steps (3 epochs" in r.stdout, r.stdout
    a, b = read_log(reference), read_log(run)
    assert sorted(b) == list(range(13, 3 * PER_EPOCH + 1))
    assert [a[s] for s in b] == [b[s] for s in b]
    assert json.loads((run / "final" / "config.json").read_text())  # final/ only at the real end
    assert json.loads((run / "run.json").read_text())["last_step"] == 3 * PER_EPOCH
    # issue 14: epoch 2 straddles the resume (steps 9-16); its mean covers all its steps
    ea, eb = rows(reference, "epoch"), rows(run, "epoch")
    assert sorted(eb) == [2 * PER_EPOCH, 3 * PER_EPOCH]
    for step in eb:
        assert float(eb[step]["train_loss"]) == pytest.approx(float(ea[step]["train_loss"]), abs=1e-6)
    # the LR of every resumed step is the uninterrupted run's
    la, lb = rows(reference, "step"), rows(run, "step")
    assert [la[s]["lr"] for s in b] == [lb[s]["lr"] for s in b]


def test_a_longer_run_is_announced_and_the_cosine_is_replanned_without_a_jump(prepared, reference, tmp_path):
    run = resumed_copy(reference, tmp_path)
    r = run_aura(
        "pretrain", "--data", prepared, "--output-dir", run, *EPOCH_FLAGS, "--epochs", "4", "--resume-from", "latest"
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert (
        "--epochs changed 3 → 4: the plan goes from 24 to 32 steps and the learning rate is re-planned from step 12."
    ) in r.stdout, r.stdout
    lr_ref, lr = rows(reference, "step"), rows(run, "step")
    assert sorted(lr) == list(range(13, 33))
    assert lr[13]["lr"] == lr_ref[13]["lr"]  # the step after the checkpoint keeps the old plan's rate
    values = [float(lr[s]["lr"]) for s in range(13, 33)]
    assert all(x > y for x, y in zip(values, values[1:]))  # then decays monotonically to the end
    assert values[-1] > 3e-4  # min lr (10 % of 3e-3) is reached only at the new end


def test_resume_refuses_a_different_batch_and_a_plan_that_ends_before_the_checkpoint(prepared, reference, tmp_path):
    run = resumed_copy(reference, tmp_path)
    common = ["pretrain", "--data", prepared, "--output-dir", run, *EPOCH_FLAGS]
    r = run_aura_here(*common, "--batch-size", "8", "--resume-from", "latest", "--overwrite")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "--overwrite does not apply with --resume-from" in r.stderr, r.stderr  # a notice, not silence
    assert "--batch-size 8 × --gradient-accumulation-steps 2 × 1 process = 16 sequences per step" in r.stderr
    assert "was made with 16 × 2 × 1 = 32" in r.stderr, r.stderr
    es = run_aura_here(*common, "--learning-rate", "1e-3", "--resume-from", "latest", env={"AURA_LANG": "es"})
    assert es.returncode == 2 and "--learning-rate 0.001 no coincide con el checkpoint" in es.stderr, es.stderr
    short = run_aura_here(*common, "--max-steps", "10", "--resume-from", "latest")
    assert short.returncode == 2 and "already at step 12" in short.stderr, short.stderr
    assert not (run / "final").exists()
