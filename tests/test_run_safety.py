"""Run directories are safe: only Aura's own run dir is cleared, one writer at a time, elastic restarts
resume only their own job, an older checkpoint needs --fork, start-up cleans only stale staging of the
run, and DCP (which unpickles) is used only where it is needed. All through the real CLI."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import run_aura, run_aura_here
from tests.test_loop import build_prepared
from tests.test_pretrain import TINY_FLAGS


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    return build_prepared(tmp_path_factory.mktemp("prepared"))


def snapshot(root: Path) -> dict[str, str]:
    """Every file under ``root`` (hidden ones too) -> sha256 of its bytes."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def pretrain(prepared: Path, out: Path, *extra, env=None, cwd=None, here: bool = False, fresh: bool = False):
    """``aura pretrain``; ``here=True`` for a refusal before training (runs in this process, no interpreter);
    ``fresh=True``: a new interpreter, a child of this process (``run_aura``)."""
    if here:
        return run_aura_here("pretrain", "--data", prepared, "--output-dir", out, *TINY_FLAGS, *extra, env=env, cwd=cwd)
    args = ("pretrain", "--data", prepared, "--output-dir", out, *TINY_FLAGS, *extra)
    return run_aura(*args, env=env, cwd=cwd, fresh=fresh)


def user_project(root: Path) -> Path:
    """A user's own folder: a final/ of their own, code, notes, a .git."""
    (root / "final").mkdir(parents=True)
    (root / "final" / "model-notes.txt").write_text("mis notas del modelo\n", encoding="utf-8")
    (root / "main.py").write_text("print('hola')\n", encoding="utf-8")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n", encoding="utf-8")
    return root


def test_overwrite_never_clears_a_directory_aura_did_not_create(prepared, tmp_path):
    project = user_project(tmp_path / "project")
    before = snapshot(project)
    # the user's own folder as --output-dir, with --overwrite: refused, every byte survives
    r = pretrain(prepared, project, "--overwrite", "--max-steps", "2", here=True)
    assert r.returncode == 2 and "was not created by Aura" in r.stderr and "--overwrite" in r.stderr, r.stderr
    # `--output-dir .` from inside it: refused as the current directory
    r = pretrain(prepared, ".", "--overwrite", "--max-steps", "2", cwd=project, here=True)
    assert r.returncode == 2 and "the current directory" in r.stderr, r.stderr
    assert snapshot(project) == before and not (project / ".aura-run.lock").exists()
    # an input as the output (or a folder inside it): refused
    data_before = snapshot(prepared)
    for out in (prepared, prepared / "run"):
        r = pretrain(prepared, out, "--overwrite", "--max-steps", "2", here=True)
        assert r.returncode == 2 and "the input" in r.stderr, r.stderr
    assert snapshot(prepared) == data_before and not (prepared / "run").exists()
    # Spanish
    r = pretrain(prepared, project, "--overwrite", "--max-steps", "2", env={"AURA_LANG": "es"}, here=True)
    assert r.returncode == 2 and "no lo creó Aura" in r.stderr and snapshot(project) == before


def test_overwrite_clears_only_the_run_entries_of_an_aura_run_dir(prepared, tmp_path):
    run = tmp_path / "run"
    assert pretrain(prepared, run, "--max-steps", "2").returncode == 0
    assert json.loads((run / ".aura-dir.json").read_text())["kind"] == "run"
    assert json.loads((run / "final" / ".aura-dir.json").read_text())["kind"] == "model"
    assert json.loads((run / "checkpoint-step-2" / ".aura-dir.json").read_text())["kind"] == "checkpoint"
    (run / "notes.txt").write_text("keep me\n", encoding="utf-8")
    r = pretrain(prepared, run, "--overwrite", "--max-steps", "3")
    assert r.returncode == 0, r.stderr
    assert [p.name for p in sorted(run.glob("checkpoint-step-*"))] == ["checkpoint-step-3"]
    assert (run / "notes.txt").read_text() == "keep me\n"


def test_legacy_run_dir_counts_as_aura_and_gets_its_markers(prepared, tmp_path):
    run = tmp_path / "run"
    assert pretrain(prepared, run, "--max-steps", "2", "--save-steps", "1").returncode == 0
    for marker in run.rglob(".aura-dir.json"):  # as an Aura without markers wrote it
        marker.unlink()
    (run / ".aura-run.lock").unlink()
    r = pretrain(prepared, run, "--max-steps", "3", "--save-steps", "1", "--resume-from", "latest")
    assert r.returncode == 0, r.stderr
    assert "did not create" not in r.stderr
    assert json.loads((run / ".aura-dir.json").read_text())["kind"] == "run"
    assert json.loads((run / "final" / ".aura-dir.json").read_text())["kind"] == "model"


def _via_other_parent(*args: str) -> subprocess.CompletedProcess:
    """`aura ARGS` started by another process (another "job" than this test's own children)."""
    wrapper = "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))"
    env = dict(os.environ, AURA_LANG="en", AURA_PLAIN="1")
    env.pop("TORCHELASTIC_RESTART_COUNT", None)
    return subprocess.run(
        [sys.executable, "-c", wrapper, sys.executable, "-m", "aura", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


def test_elastic_restart_never_resumes_or_clears_another_jobs_run(prepared, tmp_path):
    run = tmp_path / "run"
    other = _via_other_parent(
        "pretrain", "--data", prepared, "--output-dir", run, *TINY_FLAGS, "--max-steps", "2", "--save-steps", "1"
    )
    assert other.returncode == 0, other.stderr
    (run / "tb" / "mine.txt").write_text("user file\n", encoding="utf-8")
    before = snapshot(run)
    # torchrun's restarted attempt of an unrelated job with the same command line
    r = pretrain(prepared, run, "--max-steps", "4", env={"TORCHELASTIC_RESTART_COUNT": "1"}, here=True)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "was not written by this job" in r.stderr and "already holds another run" in r.stderr
    assert "Resumed from" not in r.stdout
    after = snapshot(run)
    assert {k: v for k, v in after.items() if k != ".aura-run.lock"} == {
        k: v for k, v in before.items() if k != ".aura-run.lock"
    }


def test_elastic_restart_of_the_same_job_resumes_its_latest_checkpoint(prepared, tmp_path):
    run = tmp_path / "run"
    # both runs children of this test, as torchrun's workers are of its agent (not forked from tests/forkserver.py)
    assert pretrain(prepared, run, "--max-steps", "3", "--save-steps", "1", fresh=True).returncode == 0
    # the same launcher (this test) restarts the group: the job's newest checkpoint is resumed
    restart = {"TORCHELASTIC_RESTART_COUNT": "1"}
    r = pretrain(prepared, run, "--max-steps", "5", "--save-steps", "1", env=restart, fresh=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "restarted the worker group (restart 1): resuming from the latest checkpoint" in r.stdout
    assert "Resumed from" in r.stdout and (run / "checkpoint-step-5").is_dir()


def test_resuming_an_older_checkpoint_needs_fork_which_moves_the_later_ones_aside(prepared, tmp_path):
    from aura.core.rundir import latest_checkpoint, list_checkpoints

    run = tmp_path / "run"
    assert pretrain(prepared, run, "--max-steps", "6", "--save-steps", "2", "--keep-last", "0").returncode == 0
    before = snapshot(run)
    older = run / "checkpoint-step-2"
    r = pretrain(prepared, run, "--max-steps", "3", "--keep-last", "1", "--resume-from", older, here=True)
    assert r.returncode == 2 and "--fork" in r.stderr and "steps 4, 6" in r.stderr, r.stderr

    def unlocked(snap):
        return {k: v for k, v in snap.items() if k != ".aura-run.lock"}

    assert unlocked(snapshot(run)) == unlocked(before)
    r = pretrain(prepared, run, "--max-steps", "3", "--keep-last", "1", "--resume-from", older, "--fork")
    assert r.returncode == 0, r.stdout + r.stderr
    forks = list(run.glob("forked-from-step-2-*"))
    assert len(forks) == 1 and "moved to" in r.stderr
    assert {"checkpoint-step-4", "checkpoint-step-6", "final", "training_log.csv"} <= {
        p.name for p in forks[0].iterdir()
    }
    # the new branch: step 3 is kept (pruned by save order, not by step), latest names it
    assert [c.step for c in list_checkpoints(run)] == [3]
    assert latest_checkpoint(run) == run / "checkpoint-step-3"
    listed = json.loads(run_aura("runs", "--json", tmp_path).stdout)
    assert [Path(x["latest_checkpoint"]).name for x in listed] == ["checkpoint-step-3"]


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_training_start_removes_only_stale_staging_of_the_run(prepared, tmp_path):
    import re
    import socket

    run = tmp_path / "run"
    assert pretrain(prepared, run, "--max-steps", "2").returncode == 0
    host = re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname())  # staging names end with ~PID@HOST
    dead = run / f".tmp-checkpoint-step-9-abc~{_dead_pid()}@{host}"
    live = run / f".tmp-final-xyz~{os.getpid()}@{host}"  # a live writer: this test
    user = run / ".tmp-my-scratch"  # the user's own, no writer named
    for d in (dead, live, user):
        d.mkdir()
        (d / "f.bin").write_bytes(b"x" * 10)
    r = pretrain(prepared, run, "--max-steps", "3", "--resume-from", "latest")
    assert r.returncode == 0, r.stderr
    assert not dead.exists() and (live / "f.bin").is_file() and (user / "f.bin").is_file()


def test_second_writer_is_refused_and_runs_reads_running_from_the_lock(prepared, tmp_path):
    run = tmp_path / "run"
    env = dict(os.environ, AURA_LANG="en", AURA_PLAIN="1")
    first = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aura",
            "pretrain",
            "--data",
            str(prepared),
            "--output-dir",
            str(run),
            *TINY_FLAGS,
            "--max-steps",
            "100000",
            "--save-steps",
            "2",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        # any checkpoint: a fast run's keep-last rotation can delete checkpoint-step-2 between two polls (the
        # wait then ran to its deadline, 4 minutes of the suite)
        deadline = time.time() + 240
        while not any(run.glob("checkpoint-step-*")) and first.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        assert any(run.glob("checkpoint-step-*")), "no checkpoint within 240 s"
        assert first.poll() is None, "the first run ended early"
        second = pretrain(
            prepared, run, "--max-steps", "100000", "--save-steps", "2", "--resume-from", "latest", here=True
        )
        assert second.returncode == 2, second.stdout + second.stderr
        assert f"pid {first.pid} on " in second.stderr and "being written by another Aura process" in second.stderr
        listed = json.loads(run_aura("runs", "--json", tmp_path).stdout)
        assert [x["status"] for x in listed] == ["running"]
        first.send_signal(signal.SIGKILL)  # no handler runs: only the kernel releases the lock
        first.wait(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
    listed = json.loads(run_aura("runs", "--json", tmp_path).stdout)
    assert [x["status"] for x in listed] == ["stale"]
    step = json.loads((Path(listed[0]["latest_checkpoint"]) / "trainer_state.json").read_text())["step"]
    again = pretrain(prepared, run, "--max-steps", str(step + 1), "--save-steps", "2", "--resume-from", "latest")
    assert again.returncode == 0, again.stderr


class _Payload:
    """Unpickling this creates a file: proof that something ran pickle.load on it."""

    def __init__(self, flag: Path):
        self.flag = str(flag)

    def __reduce__(self):
        return (open, (self.flag, "w"))


def test_full_state_resume_never_reads_dcp(prepared, tmp_path):
    run = tmp_path / "run"
    assert pretrain(prepared, run, "--max-steps", "2").returncode == 0
    ck = run / "checkpoint-step-2"
    flag = tmp_path / "pwned"
    (ck / "dcp").mkdir()
    (ck / "dcp" / ".metadata").write_bytes(pickle.dumps(_Payload(flag)))
    # model.safetensors is there: a single-process resume reads it, never dcp/
    r = pretrain(prepared, run, "--max-steps", "3", "--resume-from", "latest")
    assert r.returncode == 0, r.stderr
    assert not flag.exists()
    # a dcp-only checkpoint on one process: refused (DCP would unpickle it) unless --load-sharded
    ck = run / "checkpoint-step-3"
    (ck / "dcp").mkdir()
    (ck / "dcp" / ".metadata").write_bytes(pickle.dumps(_Payload(flag)))
    (ck / "model.safetensors").unlink()
    r = pretrain(prepared, run, "--max-steps", "4", "--resume-from", "latest", here=True)
    assert r.returncode == 2 and "--load-sharded" in r.stderr and "unpickles" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not flag.exists()


def test_dcp_only_checkpoint_resumes_on_one_process_with_load_sharded(prepared, tmp_path):
    """A real DCP checkpoint (written by aura.distributed.sharded) of the run's own model and optimizer."""
    import torch
    from transformers import AutoModelForCausalLM

    from aura.distributed import DistInfo
    from aura.distributed.sharded import save_sharded
    from aura.train.optim.step_engine import build_optimizer
    from aura.train.pretrain import PretrainConfig

    run = tmp_path / "run"
    assert pretrain(prepared, run, "--max-steps", "2", "--save-steps", "2").returncode == 0
    ck = run / "checkpoint-step-2"
    model = AutoModelForCausalLM.from_pretrained(ck)
    opt = build_optimizer(model, PretrainConfig(learning_rate=3e-3), torch.device("cpu"))
    opt.load_state_dict(torch.load(ck / "optimizer.pt", weights_only=True))
    save_sharded(ck / "dcp", model=model, optimizer=opt, dist=DistInfo())
    (ck / "model.safetensors").unlink()
    (ck / "optimizer.pt").unlink()
    r = pretrain(prepared, run, "--max-steps", "3", "--resume-from", "latest", here=True)
    assert r.returncode == 2 and "--load-sharded" in r.stderr
    r = pretrain(prepared, run, "--max-steps", "3", "--resume-from", "latest", "--load-sharded")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Resumed from" in r.stdout and (run / "checkpoint-step-3" / "model.safetensors").is_file()


def test_a_run_stopped_before_its_first_checkpoint_is_started_over_never_offered_for_resume(prepared_corpus, tmp_path):
    """Issue 36.3: a double Ctrl+C before the first checkpoint (exit 130) left a run that the same command
    called resumable (--resume-from latest) and --resume-from latest called empty: a loop."""
    run = tmp_path / "run"
    common = ["--data", prepared_corpus, *TINY_FLAGS, "--save-steps", "1000", "--gradient-accumulation-steps", "32"]
    env = dict(os.environ, AURA_LANG="en", AURA_PLAIN="1", PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "aura", "pretrain", "--output-dir", str(run), *map(str, common), "--max-steps", "400"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("Epoch ") and "Step 1/" in line:
            proc.send_signal(signal.SIGINT)
        if "Signal SIGINT received" in line:  # the second Ctrl+C, inside the same step
            proc.send_signal(signal.SIGINT)
            break
    out = "".join(lines) + proc.stdout.read()
    assert proc.wait(timeout=300) == 130, out
    assert "there was no checkpoint yet" in out and "the same command starts over" in out, out
    from aura.core.rundir import latest_checkpoint

    assert latest_checkpoint(run) is None and json.loads((run / "run.json").read_text())["status"] == "interrupted"
    # aura runs: not "interrupted" (which reads as resumable), and no resume command
    listing = run_aura_here("runs", tmp_path, "--json")
    record = json.loads(listing.stdout)[0]
    assert record["status"] == "unsaved" and record["resume_command"] is None, record
    listing = run_aura_here("runs", tmp_path)
    assert "stopped, no checkpoint" in listing.stdout and "To resume" not in listing.stdout, listing.stdout
    assert "interrupted" not in listing.stdout, listing.stdout
    es = run_aura_here("runs", tmp_path, env={"AURA_LANG": "es"})
    assert "detenida sin checkpoint" in es.stdout and "interrumpida" not in es.stdout, es.stdout
    # --resume-from latest: refused, and the message leads out (drop the flag), not back
    r = pretrain(prepared_corpus, run, "--max-steps", "2", "--resume-from", "latest", here=True)
    assert r.returncode == 2 and "Drop --resume-from: the same command starts over" in r.stderr, r.stderr
    # the same command without it starts over cleanly (no --overwrite needed: nothing of value was there)
    r = pretrain(prepared_corpus, run, "--max-steps", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "before saving its first checkpoint: there is nothing to resume, so it starts over" in r.stdout, r.stdout
    assert json.loads((run / "run.json").read_text())["status"] == "finished" and (run / "final").is_dir()
    # a run with something to keep (final/, no checkpoint) is still protected, and not offered for resume
    for ck in run.glob("checkpoint-*"):
        import shutil

        shutil.rmtree(ck)
    r = pretrain(prepared_corpus, run, "--max-steps", "2", here=True)
    assert r.returncode == 2 and "with no checkpoint to resume. Use --overwrite" in r.stderr, r.stderr
    assert "--resume-from" not in r.stderr
