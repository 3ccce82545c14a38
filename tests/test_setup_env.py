"""scripts/setup_env.sh picks the PyTorch build for the machine (issue 25.17): the CUDA wheel from PyPI (~3 GB)
only where an NVIDIA GPU is found, the CPU build elsewhere, and says which and how to override it.

The probes (nvidia-smi, the driver's /proc folder, lspci) are replaced by fakes on PATH, so every case runs
on any machine; ``AURA_TORCH_DRY_RUN=1`` stops the script after the decision, before anything is created
(a fake ``python3`` that fails proves nothing else ran)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "setup_env.sh"
CPU_INDEX = "--index-url https://download.pytorch.org/whl/cpu"
H100 = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5d1c7e2a-0000-0000-0000-000000000000)"
LSPCI_CPU = "00:02.0 VGA compatible controller: Intel Corporation UHD Graphics 630 (rev 02)"
LSPCI_NVIDIA = "01:00.0 3D controller: NVIDIA Corporation GH100 [H100 SXM5 80GB] (rev a1)"


def _fake(folder: Path, name: str, out: str, code: int = 0) -> None:
    path = folder / name
    path.write_text(f"#!/bin/sh\ncat <<'EOF'\n{out}\nEOF\nexit {code}\n", encoding="utf-8")
    path.chmod(0o755)


def setup(
    tmp_path: Path, *, smi: tuple[str, int] | None = None, lspci: str | None = None, proc_gpu: bool = False, **env: str
) -> subprocess.CompletedProcess:
    fakes = tmp_path / "bin"
    fakes.mkdir(exist_ok=True)
    for name in ("nvidia-smi", "lspci"):
        (fakes / name).unlink(missing_ok=True)
    if smi is not None:
        _fake(fakes, "nvidia-smi", *smi)
    _fake(fakes, "lspci", lspci if lspci is not None else LSPCI_CPU)
    _fake(fakes, "python3", "python3 must not run in a dry run", 1)
    proc = tmp_path / "proc-nvidia"
    if proc_gpu:
        (proc / "gpus" / "0000:01:00.0").mkdir(parents=True, exist_ok=True)
    full = {
        "PATH": f"{fakes}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "AURA_VENV": str(tmp_path / "venv"),
        "AURA_NVIDIA_PROC": str(proc),
        "AURA_TORCH_DRY_RUN": "1",
        "AURA_LANG": "en",
        **env,
    }
    r = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=full, timeout=60)
    assert not (tmp_path / "venv").exists(), r.stdout + r.stderr  # nothing is created in a dry run
    return r


def test_machine_without_nvidia_gpu_gets_the_cpu_build_and_is_told_how_to_override(tmp_path):
    for smi in (None, ("No devices were found", 6)):  # no driver tools, or the tools without a GPU
        r = setup(tmp_path, smi=smi)
        assert r.returncode == 0, r.stderr
        assert f"[aura] pip install torch {CPU_INDEX}" in r.stdout
        assert "no NVIDIA GPU" in r.stdout and "AURA_TORCH_BUILD=cuda" in r.stdout and "AURA_TORCH=" in r.stdout
    es = setup(tmp_path, AURA_LANG="es")
    assert "sin GPU de NVIDIA" in es.stdout and "se instala PyTorch para CPU" in es.stdout, es.stdout


@pytest.mark.parametrize("probe", ["nvidia-smi", "proc", "lspci"])
def test_an_nvidia_gpu_found_by_any_probe_gets_the_cuda_build(tmp_path, probe):
    r = setup(
        tmp_path,
        smi=(H100, 0) if probe == "nvidia-smi" else None,
        proc_gpu=probe == "proc",
        lspci=LSPCI_NVIDIA if probe == "lspci" else None,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith("[aura] pip install torch") and "--index-url" not in r.stdout, r.stdout
    assert "NVIDIA GPU (" in r.stdout and "AURA_TORCH_BUILD=cpu" in r.stdout


def test_aura_torch_and_aura_torch_build_override_the_choice(tmp_path):
    r = setup(tmp_path, AURA_TORCH="torch==2.13.0")
    assert f"[aura] pip install torch==2.13.0 {CPU_INDEX}" in r.stdout, r.stdout
    r = setup(tmp_path, AURA_TORCH_BUILD="cuda")  # no GPU here, CUDA asked for
    assert r.stdout.strip().endswith("[aura] pip install torch") and "AURA_TORCH_BUILD=cuda:" in r.stdout
    r = setup(tmp_path, smi=(H100, 0), AURA_TORCH_BUILD="cpu", AURA_TORCH_CPU_INDEX="https://mirror.example/cpu")
    assert "[aura] pip install torch --index-url https://mirror.example/cpu" in r.stdout, r.stdout
    r = setup(tmp_path, AURA_TORCH_BUILD="rocm")
    assert r.returncode == 2 and "AURA_TORCH_BUILD=rocm is not valid: use auto, cpu or cuda" in r.stderr


def test_the_demo_ends_saying_how_to_use_aura_in_the_users_terminal(tmp_path):
    """Issue 36.2: the demo runs in its own shell, so the next `aura ...` typed after it was "command not found":
    its last line says to `source` the environment (as seen from where it was started), also when it fails.
    The environment is this test run's interpreter, set up already (its stamp), so nothing is installed."""
    import hashlib
    import sys

    root = SCRIPT.parents[1]
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    for name, body in (("python", f'exec "{sys.executable}" "$@"'), ("aura", f'exec "{sys.executable}" -m aura "$@"')):
        (venv / "bin" / name).write_text(f"#!/bin/sh\n{body}\n", encoding="utf-8")
        (venv / "bin" / name).chmod(0o755)
    (venv / "bin" / "activate").write_text(f'export PATH="{venv}/bin:$PATH"\n', encoding="utf-8")
    stamp = hashlib.sha256((root / "pyproject.toml").read_bytes()).hexdigest()[:16]
    (venv / ".aura-setup-stamp").write_text(f"{stamp}\n\n", encoding="utf-8")
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "AURA_VENV": str(venv),
        "AURA_PLAIN": "1",
        "AURA_DEMO_DIR": str(tmp_path / "demo"),
    }
    for lang, extra, code, line in (  # the pipeline's help (instant), then a mistake (exit 2): the line either way
        ("en", "--help", 0, "To use aura in this terminal, activate its environment first: source venv/bin/activate"),
        (
            "es",
            "--no-such-flag",
            2,
            "Para usar aura en esta terminal, activa antes su entorno: source venv/bin/activate",
        ),
    ):
        r = subprocess.run(
            ["bash", str(root / "scripts" / "demo.sh"), extra],
            capture_output=True,
            text=True,
            env={**env, "AURA_LANG": lang},
            cwd=tmp_path,
            timeout=120,
        )
        assert r.returncode == code, r.stdout + r.stderr
        assert r.stdout.strip().splitlines()[-1] == f"[aura] {line}", r.stdout + r.stderr
        assert "installing" not in r.stdout and "instalando" not in r.stdout, r.stdout
