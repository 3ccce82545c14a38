"""The GPU suite's CPU mode (`bash bench/gpu_suite.sh --cpu`) runs end to end, so the script never rots."""

from __future__ import annotations

import subprocess

import pytest

from tests.distutil import ROOT, env


@pytest.mark.slow
def test_gpu_suite_cpu_mode(tmp_path):
    proc = subprocess.run(["bash", str(ROOT / "bench" / "gpu_suite.sh"), "--cpu", "--workdir", str(tmp_path)],
                          capture_output=True, text=True, env=env(PYTHON=__import__("sys").executable),
                          timeout=1800, cwd=ROOT)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-4000:]
    table = (tmp_path / "gpu_suite.md").read_text(encoding="utf-8")
    assert "| Check | Figure | Target | Result |" in table and "FAIL" not in table
    for check in ("aura doctor", "SIGTERM", "chunked / fused cross entropy", "GGUF export"):
        assert any(check in line and "| pass" in line for line in table.splitlines()), (check, table)
    gpu_only = (ROOT / "bench" / "gpu_suite.py").read_text(encoding="utf-8").count("gpu_only=True")
    assert table.count("skipped (GPU only)") == gpu_only  # the CUDA-only checks are listed, not silently dropped
