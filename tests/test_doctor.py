"""`aura doctor` on this machine: what it finds, its JSON, and non-zero exits with advice."""

from __future__ import annotations

import json
import re
import sys

import pytest
import torch

from aura.watch.doctor_checks import EXTRAS, REQUIRED
from tests.conftest import ROOT, run_aura, run_aura_here

NO_GPU = not torch.cuda.is_available()


@pytest.mark.skipif(not NO_GPU, reason="checks the CPU-only report")
def test_doctor_cpu_machine_reports_no_gpu_and_passes():
    proc = run_aura("doctor", "--output-dir", ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU only"  # a CUDA wheel on a GPU-less box
    assert f"{torch.__version__} ({build})" in out
    if torch.version.cuda:  # ...is told the CPU wheel is 3 GB smaller
        assert "pip install torch --index-url https://download.pytorch.org/whl/cpu" in out
    assert "none (training runs on CPU" in out
    assert "Everything required works." in out
    assert re.search(r"auto\s+preset qwen3-tiny, batch \d+ × accumulation \d+, precision (fp32|bf16)", out)
    assert "NCCL_SOCKET_IFNAME=" in out or "No active interface" in out


def test_doctor_json():
    proc = run_aura("doctor", "--json", "--output-dir", ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    d = json.loads(proc.stdout)
    assert d["ok"] is True and not [i for i in d["issues"] if i["level"] == "error"]
    assert d["python"]["version"] == ".".join(map(str, sys.version_info[:3]))
    assert d["torch"]["version"] == torch.__version__
    assert d["torch"]["cuda_available"] == torch.cuda.is_available()
    assert len(d["gpus"]) == torch.cuda.device_count()
    assert d["distributed"]["gloo"] == torch.distributed.is_gloo_available()
    assert d["attention"]["sdpa"]["math"] is True  # the math kernel runs everywhere
    assert d["disk"]["writable"] is True and d["disk"]["free_bytes"] > 0
    from importlib.metadata import version

    assert d["dependencies"]["transformers"]["version"] == version("transformers")
    assert d["extras"]["bitsandbytes"]["version"] == version("bitsandbytes")
    assert {i["name"] for i in d["network"]["interfaces"]} >= {"lo"}
    from aura.models.hardware import choose_auto

    expected = choose_auto()
    assert (d["auto"]["preset"], d["auto"]["batch_size"], d["auto"]["precision"]) == (
        expected.preset,
        expected.batch_size,
        expected.precision,
    )
    assert d["auto"]["strategy"] == ("ddp" if torch.cuda.device_count() > 1 else "none")


def test_doctor_fails_with_advice_when_outputs_cannot_be_written(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    proc = run_aura_here("doctor", "--output-dir", blocker / "out", "--min-free-gb", "100000", env={"AURA_LANG": "es"})
    assert proc.returncode == 1
    assert "No se puede escribir en" in proc.stderr and "Elige otro --output-dir" in proc.stderr
    assert "Solo quedan" in proc.stderr and "Libera espacio" in proc.stderr
    assert "2 problemas impiden entrenar" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_required_packages_match_pyproject():
    import tomllib

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pinned = {}
    for spec in deps:
        m = re.fullmatch(r"([A-Za-z0-9_.\-]+)\s*>=\s*([0-9.]+)", spec.strip())
        assert m, f"unexpected dependency spec {spec!r}: teach aura.watch.doctor_checks.REQUIRED about it"
        pinned[m.group(1).lower()] = m.group(2)
    assert {d: v for d, _, v in REQUIRED} == pinned
    optional = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    named = {re.split(r"[<>=\[]", s)[0].lower() for group in optional.values() for s in group}
    assert {d for d, _, _ in EXTRAS} - {"flash-attn"} <= named


def test_doctor_fails_when_required_packages_cannot_be_imported():
    """torch and zstandard made unimportable (None in sys.modules is how Python blocks an import)."""
    import subprocess

    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['zstandard'] = None\n"
        "from aura.cli import main; raise SystemExit(main(['doctor', '--json']))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**__import__("os").environ, "AURA_LANG": "en"},
        timeout=300,
    )
    assert proc.returncode == 1, proc.stderr
    d = json.loads(proc.stdout)
    assert d["ok"] is False and d["torch"]["importable"] is False
    errors = " ".join(i["message"] + " " + i["advice"] for i in d["issues"] if i["level"] == "error")
    assert "torch cannot be imported" in errors and "pytorch.org" in errors
    assert "zstandard is missing" in errors and "pip install 'zstandard>=0.22'" in errors
    assert d["dependencies"]["transformers"]["ok"] is True


@pytest.mark.skipif(not NO_GPU, reason="a machine without GPU")
def test_doctor_cuda_build_without_gpu_is_fine_for_cpu_training(tmp_path):
    # The default torch wheel is built with CUDA; on a machine without a GPU that is not a problem.
    # (This venv may hold the CPU build: sitecustomize makes torch report a CUDA build, as that wheel does.)
    (tmp_path / "sitecustomize.py").write_text("import torch\ntorch.version.cuda = '12.4'\n", encoding="utf-8")
    proc = run_aura("doctor", "--output-dir", ROOT, env={"PYTHONPATH": f"{tmp_path}:{ROOT}"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "(CUDA 12.4)" in proc.stdout
    assert "CPU training is fine" in proc.stdout
    assert "pip install torch --index-url https://download.pytorch.org/whl/cpu" in proc.stdout
    assert "sees no GPU" not in proc.stdout + proc.stderr and "Warnings:" not in proc.stdout
