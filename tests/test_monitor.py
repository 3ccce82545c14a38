"""`aura monitor`: the guide's line format, --json fields, the training process's RAM, Ctrl+C."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest

from aura.watch.monitor import is_training_cmdline
from tests.conftest import run_aura, run_aura_here

FIELDS = {
    "time",
    "cpu_percent",
    "ram_percent",
    "ram_used_gib",
    "ram_total_gib",
    "process_pids",
    "process_ram_gib",
    "gpus",
    "gpu_error",
    "gpu_error_message",
}
GPU_FIELDS = {
    "index",
    "name",
    "utilization_percent",
    "memory_used_gib",
    "memory_total_gib",
    "temperature_c",
    "power_w",
    "power_limit_w",
    "process_memory_gib",
}


def _nvml_gpus() -> int:
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetCount()
    except Exception:
        return 0


@pytest.fixture
def hog():
    """A process holding 300 MB whose command line reads like `aura pretrain` (argv after -c)."""
    code = (
        "import sys, time; b = bytearray(300 * 2**20); b[::4096] = b'x' * len(b[::4096]); "
        "print('ready', flush=True); time.sleep(120)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "aura", "pretrain", "--preset", "tiny"], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "ready"
    yield proc
    proc.kill()
    proc.wait()


def test_once_json_fields():
    proc = run_aura("monitor", "--once", "--json")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1
    s = json.loads(lines[0])
    assert set(s) == FIELDS
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", s["time"])
    assert 0 <= s["cpu_percent"] <= 100 and 0 < s["ram_percent"] < 100
    assert s["ram_total_gib"] == pytest.approx(psutil.virtual_memory().total / 2**30, rel=1e-6)
    assert 0 < s["ram_used_gib"] < s["ram_total_gib"]
    if _nvml_gpus():
        assert s["gpu_error"] is None and s["gpus"] and set(s["gpus"][0]) == GPU_FIELDS
    else:
        assert s["gpus"] == [] and s["gpu_error"] in ("nvml_not_found", "no_gpu", "nvml_failed")
        assert s["gpu_error_message"]


def test_human_line_follows_the_guide_in_both_languages():
    es = run_aura("monitor", "--once", env={"AURA_LANG": "es"})
    assert es.returncode == 0, es.stderr
    first = es.stdout.splitlines()[0]
    assert re.fullmatch(
        r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] CPU: \d+,\d% \| RAM: \d+,\d% "  # decimal comma
        r"\(\d+,\d GB / \d+,\d GB\) \| RAM proceso: .+",
        first,
    ), first
    en = run_aura("monitor", "--once")
    assert " | Process RAM: " in en.stdout.splitlines()[0]
    if not _nvml_gpus():  # a clear line instead of GPU figures
        assert "  - GPU: no GPU metrics" in en.stdout and "  - GPU: sin métricas de GPU" in es.stdout
    else:
        assert re.search(r"  - GPU 0 \(.+\) \| Utilización: .+ \| Memoria: .+ GB / .+ GB", es.stdout)


def test_training_process_ram_by_pid_and_autodetected(hog):
    by_pid = json.loads(run_aura("monitor", "--once", "--json", "--pid", hog.pid).stdout)
    assert by_pid["process_pids"] == [hog.pid]
    assert 0.28 < by_pid["process_ram_gib"] < 1.0
    auto = json.loads(run_aura("monitor", "--once", "--json").stdout)
    assert hog.pid in auto["process_pids"]
    assert auto["process_ram_gib"] >= 0.28
    line = run_aura("monitor", "--once", "--pid", hog.pid).stdout.splitlines()[0]
    assert re.search(r"Process RAM: 0\.[3-9] GB$", line), line


def test_count_and_interval():
    start = time.monotonic()
    proc = run_aura("monitor", "--json", "--count", "3", "--interval", "0.3")
    assert proc.returncode == 0, proc.stderr
    samples = [json.loads(x) for x in proc.stdout.strip().splitlines()]
    assert len(samples) == 3
    assert time.monotonic() - start >= 0.6


def test_ctrl_c_exits_cleanly():
    env = dict(os.environ, AURA_LANG="en", AURA_PLAIN="1", PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "aura", "monitor", "--interval", "0.2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    first = proc.stdout.readline()
    assert first.startswith("[")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert "Traceback" not in err and "KeyboardInterrupt" not in err


def test_bad_arguments():
    proc = run_aura_here("monitor", "--pid", "999999999")
    assert proc.returncode == 2 and "999999999" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_aura_here("monitor", "--interval", "0")
    assert proc.returncode == 2 and "--interval" in proc.stderr


@pytest.mark.parametrize(
    "cmdline, expected",
    [
        (["/venv/bin/aura", "pretrain", "--preset", "tiny"], True),
        (["python", "-m", "aura", "--lang", "es", "finetune", "--data", "x.csv"], True),
        (["/usr/bin/python3", "/src/aura/__main__.py", "pretrain"], True),
        (["torchrun", "--nproc_per_node=2", "-m", "aura.train.pretrain"], True),
        (["/venv/bin/aura", "monitor"], False),
        (["python", "train.py", "pretrain"], False),
        (["vim", "aura/pretrain.py"], False),
    ],
)
def test_training_command_lines(cmdline, expected):
    assert is_training_cmdline(cmdline) is expected
