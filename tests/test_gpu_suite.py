"""The GPU suite (`bash bench/gpu_suite.sh`): its CPU mode runs every check end to end so the script never rots,
and its driver keeps a lease's promises: a check that outlives its timeout is stopped and recorded, the
checks after it still run in a new worker, a check longer than the budget left is skipped, every check
leaves one JSON line, and nothing of a check's folder stays behind."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.distutil import ROOT, env


def _suite(*args: str, timeout: float = 1500) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(ROOT / "bench" / "gpu_suite.sh"), *args],
        capture_output=True,
        text=True,
        env=env(PYTHON=sys.executable),
        timeout=timeout,
        cwd=ROOT,
    )


def _lines(out) -> dict[str, dict]:
    rows = [json.loads(line) for line in (out / "gpu_suite.jsonl").read_text(encoding="utf-8").splitlines()]
    return {r["check"]: r for r in rows}


@pytest.mark.slow
def test_gpu_suite_cpu_mode_runs_every_check(tmp_path):
    out = tmp_path / "out"
    proc = _suite("--cpu", "--workdir", str(tmp_path / "work"), "--out", str(out))
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    rows = _lines(out)
    sys.path.insert(0, str(ROOT / "bench"))
    from gpu_checks import CHECKS, PIPELINES, SELFTEST

    # one line per check, in ORDER (the pipelines are the --pipelines mode's)
    assert list(rows) == [c.name for c in CHECKS if c.name not in SELFTEST and c.name not in PIPELINES]
    for c in CHECKS:
        if c.name in SELFTEST or c.name in PIPELINES:
            continue
        expected = "skipped" if c.gpu_only else "pass"
        if c.name == "gguf" and "not installed" in rows[c.name]["figure"]:
            expected = "skipped"  # without llama-cpp-python: said so, not passed
        assert rows[c.name]["status"] == expected, rows[c.name]
    # the checks measured what they say: Aura's step ran, resume was exact, the CLI logged its memory column
    assert rows["mfu_eager"]["metrics"]["tokens_per_s"] > 0
    assert any("scaled_dot_product" in op for op in rows["mfu_eager"]["metrics"]["profile"]["sdpa_ops"])
    assert "differ by at most 0.00e+00" in rows["fp16_lora_resume"]["figure"]
    assert float(rows["pretrain_cli"]["metrics"]["rows"][-1]["mem_peak_gb"]) > 0
    table = (out / "gpu_suite.md").read_text(encoding="utf-8")
    assert "| Check | Figure | Target | Result |" in table and table in proc.stdout
    assert not list((tmp_path / "work" / "checks").glob("mfu_*"))  # each check's folder removed when it ends


@pytest.mark.slow
def test_pipelines_mode_runs_every_shipped_gpu_pipeline_scaled_end_to_end(tmp_path):
    """--pipelines --cpu: a100-72h, lora-12gb, frida-8xh100, adapt-open-model and lan-5-nodes, each the shipped
    YAML under --scale with tiny stand-ins for its hub models, every stage finished and a report card that says
    it was scaled."""
    out = tmp_path / "out"
    proc = _suite("--cpu", "--pipelines", "--workdir", str(tmp_path / "work"), "--out", str(out), timeout=3000)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    rows = _lines(out)
    sys.path.insert(0, str(ROOT / "bench"))
    from gpu_pipelines import PIPELINES

    assert list(rows) == ["environment", "setup", *PIPELINES]
    for name in PIPELINES:
        row = rows[name]
        assert row["status"] == "pass", row
        stages = row["metrics"]["stages"]
        assert stages and all(s["status"] == "finished" for s in stages), stages
        scale = row["metrics"]["scale"]
        report = (out / f"{name}-report.md").read_text(encoding="utf-8")
        if name in ("pipeline_lora12", "pipeline_frida"):  # whole epochs of a small CSV: no budget to scale
            assert scale == 1 and "--scale" not in report
        else:
            assert 0 < scale < 1 and f"Run with --scale {scale:g}" in report


@pytest.mark.slow
def test_gpu_suite_driver_stops_a_check_at_its_timeout_and_skips_what_the_budget_cannot_hold(tmp_path):
    """--selftest puts two checks after setup: one that sleeps past its 2 s timeout, one that expects more
    than the budget; `doctor` after them must still run, in a worker started again."""
    out, work = tmp_path / "out", tmp_path / "work"
    proc = _suite(
        "--cpu",
        "--selftest",
        "--only",
        "doctor",
        "--budget",
        "300",
        "--workdir",
        str(work),
        "--out",
        str(out),
        timeout=600,
    )
    assert proc.returncode == 1, (proc.stdout + proc.stderr)[-4000:]  # a timeout is a failed suite
    rows = _lines(out)
    assert list(rows) == ["environment", "setup", "selftest_timeout", "selftest_budget", "doctor"]
    assert rows["selftest_timeout"]["status"] == "timeout" and rows["selftest_timeout"]["seconds"] < 30
    assert rows["selftest_budget"]["status"] == "skipped (budget)"
    assert rows["doctor"]["status"] == "pass"
    assert not (work / "checks" / "selftest_timeout").exists()  # the killed check's partial files removed
    log = (work / "results.jsonl").read_text(encoding="utf-8")
    assert log.count('"event": "start"') == 4  # environment, setup, selftest_timeout; doctor in the new worker
    assert "timeout" in (out / "gpu_suite.md").read_text(encoding="utf-8")


def test_a_worker_that_dies_before_its_first_check_is_not_started_again_forever(tmp_path):
    """A worker that cannot run anything (here: asked for a check it does not know, as an import error or
    a broken device would do) ends the run with every pending check recorded as crashed."""
    sys.path.insert(0, str(ROOT / "bench"))
    import gpu_suite
    from gpu_checks import Check

    ghost = Check("ghost", "not registered", lambda ctx: None, timeout=5, expect=1)
    with open(tmp_path / "log", "w") as log:
        rows = gpu_suite.drive(tmp_path, [ghost], cpu=True, budget=60, log=log, out=tmp_path)
    assert [(r["check"], r["status"]) for r in rows] == [("ghost", "crashed")]
    assert "before its first check" in rows[0]["figure"]
