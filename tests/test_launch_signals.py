"""Stopping a run under `aura launch` (issue 25): Ctrl+C reaches the workers, which save, and the launcher
exits 3 with the resume command of the same launch; when the launcher and torchrun are killed without
passing anything on, the workers notice and stop with a checkpoint instead of training on as orphans."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import run_aura, run_aura_here
from tests.distutil import ROOT, env, free_port

pytestmark = pytest.mark.dist

TINY = [
    "--model-preset",
    "manual",
    "--arch",
    "llama",
    "--embed-size",
    "32",
    "--num-layers",
    "1",
    "--num-heads",
    "2",
    "--seq-length",
    "32",
    "--intermediate-size",
    "64",
    "--batch-size",
    "2",
    "--log-interval",
    "1",
    "--sample-tokens",
    "0",
    "--precision",
    "fp32",
    "--backend",
    "gloo",
    "--strategy",
    "ddp",
    "--max-steps",
    "100000",
    "--save-steps",
    "0",
]


class Launched:
    """`aura launch --gpus-per-node 2 pretrain ...` in a process group of its own, as a terminal starts it,
    its output read as it comes."""

    def __init__(self, data: Path, run: Path):
        self.port = free_port()
        self.args = [
            "launch",
            "--gpus-per-node",
            "2",
            "--master-port",
            str(self.port),
            "pretrain",
            "--data",
            str(data),
            "-o",
            str(run),
            *TINY,
        ]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "aura", *self.args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env(),
            cwd=ROOT,
            start_new_session=True,
        )
        self.lines: list[str] = []
        threading.Thread(target=lambda: self.lines.extend(self.proc.stdout), daemon=True).start()

    @property
    def text(self) -> str:
        return "".join(self.lines)

    def wait_for(self, needle: str, timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        while needle not in self.text:
            assert self.proc.poll() is None and time.monotonic() < deadline, self.text[-4000:]
            time.sleep(0.2)

    def finish(self, timeout: float = 240) -> int:
        code = self.proc.wait(timeout=timeout)
        time.sleep(0.5)  # the reader thread drains the pipe
        return code


def test_ctrl_c_on_aura_launch_saves_on_every_worker_and_exits_3(prepared_corpus, tmp_path):
    run = tmp_path / "run"
    job = Launched(prepared_corpus, run)
    job.wait_for("| Step 3/")
    os.killpg(job.proc.pid, signal.SIGINT)  # the terminal's Ctrl+C: the launcher's whole process group
    code = job.finish()
    text = job.text
    assert code == 3, text[-4000:]
    assert "Traceback" not in text and "SignalException" not in text, text[-4000:]
    assert "Signal SIGINT: passed on to the workers" in text
    assert "The workers stopped after saving their checkpoint (exit code 3)." in text
    saved = sorted(run.glob("interrupt-step-*"))
    assert len(saved) == 1 and (saved[0] / "trainer_state.json").is_file(), text[-4000:]
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "interrupted"
    launch = info["launch"]
    assert launch["launcher"] == "aura launch" and launch["world_size"] == 2 and launch["nproc_per_node"] == 2
    hint = f"aura launch --gpus-per-node 2 --master-port {job.port} pretrain --data {prepared_corpus}"
    assert hint in text and f"--resume-from {saved[0]}" in text, text[-3000:]
    listing = json.loads(run_aura("runs", "--json", run).stdout)[0]
    assert listing["resume_command"].startswith(hint) and listing["resume_command"].endswith("--resume-from latest")
    # following a one-process habit instead of the hint is refused, naming how the run was launched
    alone = run_aura_here("pretrain", "--data", prepared_corpus, "-o", run, *TINY, "--resume-from", "latest")
    assert alone.returncode == 2
    assert "was made with 2 processes (aura launch) and this resume has 1" in alone.stderr, alone.stderr
    assert hint in alone.stderr


def test_workers_stop_with_a_checkpoint_when_launcher_and_torchrun_are_killed(prepared_corpus, tmp_path):
    run = tmp_path / "run"
    job = Launched(prepared_corpus, run)
    job.wait_for("| Step 3/")
    launcher = psutil.Process(job.proc.pid)
    (agent,) = launcher.children()
    workers = agent.children()
    assert len(workers) == 2
    agent.kill()  # SIGKILL: nothing is passed on to the workers
    launcher.kill()
    job.finish()
    _, alive = psutil.wait_procs(workers, timeout=120)
    for p in alive:
        p.kill()
    assert not alive, job.text[-4000:]  # they did not train on as orphans
    saved = sorted(run.glob("interrupt-step-*"))
    assert len(saved) == 1 and (saved[0] / "trainer_state.json").is_file(), job.text[-4000:]
    assert json.loads((run / "run.json").read_text())["status"] == "interrupted"
