"""`aura check-dist`: a real all_reduce between real processes, and diagnoses of real failures."""

from __future__ import annotations

import re
import socket

import pytest

from tests.conftest import run_aura
from tests.distutil import env, free_port, output

pytestmark = pytest.mark.dist


def _rank_lines(text: str) -> list[str]:
    return re.findall(
        r"\[Rank (\d)/2 \| Node \S+ \| Device cpu\] Backend=gloo \| World size=2 \| "
        r"Rank=\1 \| Host=\S+ \| Device=cpu \| all_reduce=3 \(expected 3\) OK",
        text,
    )


def test_check_dist_under_torchrun_through_aura_launch(tmp_path):
    """`aura launch` runs `python -m torch.distributed.run ... -m aura check-dist` (the README's torchrun
    command): one start-up checks both the launcher's command and check-dist under torchrun, and the advice
    for `--model-preset` follows `--step-seconds`: with 0.1 ms of compute per step no all-reduce fits, and
    the advice is the local-steps H that keeps the measured link's all-reduce every H steps under 25 % of
    the step (not the H or the mode of the default 1 s)."""
    import json

    from aura.cluster.check import comm_times

    port = free_port()
    advice = tmp_path / "advice.json"
    proc = run_aura(
        "launch",
        "--gpus-per-node",
        "2",
        "--master-port",
        port,
        "check-dist",
        "--size-mb",
        "1",
        "--iters",
        "3",
        "--model-preset",
        "tiny",
        "--step-seconds",
        "0.0001",
        "--advice-out",
        advice,
        env=env(),
        timeout=300,
    )
    text = output(proc)
    assert proc.returncode == 0, text[-3000:]
    cmd = re.search(r"Command: (.*)", text).group(1)
    assert "-m torch.distributed.run --nnodes=1 --nproc_per_node=2 --node_rank=0" in cmd
    assert f"--master_addr=127.0.0.1 --master_port={port}" in cmd
    assert cmd.endswith(
        f"-m aura check-dist --size-mb 1 --iters 3 --model-preset tiny --step-seconds 0.0001 --advice-out {advice}"
    )
    assert sorted(_rank_lines(text)) == ["0", "1"]  # every rank reports, with the rank prefix
    assert re.search(r"all_reduce of 1 MB: [\d.]+ ms/iter \| algbw [\d.]+ [MG]B/s \| busbw [\d.]+ [MG]B/s", text)
    assert "Communication OK between 2 ranks on 1 node (Sync=OK)" in text
    decided = json.loads(advice.read_text())
    assert decided["step_seconds"] == 0.0001 and decided["world"] == 2
    _, times = comm_times("tiny", world=2, latency_s=decided["latency_ms"] / 1e3, busbw=decided["gbit"] * 1e9 / 8)
    plain = times["none"]

    def steps_for(step_s: float) -> int:  # the rule, written out
        h = 4
        while plain / h > 0.25 * step_s and h < 1024:
            h *= 2
        return h

    assert decided["mode"] == "local-steps" and decided["flags"] == {"local_steps": steps_for(0.0001)}, decided
    assert steps_for(0.0001) != steps_for(1.0), plain  # the default step would not have given this advice


def test_check_dist_without_torchrun_checks_one_rank():
    proc = run_aura("check-dist", "--size-mb", "1", "--iters", "2", env=env())
    text = output(proc)
    assert proc.returncode == 0, text
    assert "Not running under torchrun" in text and "aura launch check-dist" in text
    assert "all_reduce=1 (expected 1) OK" in text


def test_nccl_without_a_gpu_is_a_clear_error():
    proc = run_aura("check-dist", "--backend", "nccl", "--device", "cpu", env=env())
    assert proc.returncode == 2, output(proc)
    assert "--backend nccl was requested but this PyTorch has no NCCL or there is no CUDA GPU" in output(proc)


def test_port_in_use_is_diagnosed():
    with socket.socket() as busy:
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = run_aura("launch", "--gpus-per-node", "2", "--master-port", port, "check-dist", env=env(), timeout=120)
    text = output(proc)
    assert proc.returncode != 0
    assert f"Port {port} is already in use" in text and "MASTER_PORT" in text


def test_missing_node_is_diagnosed_as_world_size_mismatch():
    proc = run_aura(
        "launch",
        "--nnodes",
        "2",
        "--gpus-per-node",
        "1",
        "--master-port",
        free_port(),
        "--rdzv-timeout",
        "3",
        "check-dist",
        env=env(),
        timeout=120,
    )
    text = output(proc)
    assert proc.returncode != 0
    assert "Only 1 of the 2 expected participants" in text
    assert "nc -l" in text  # the network checklist of the original guide


def test_missing_rank_without_torchrun_is_diagnosed():
    # the original Docker guide's way: RANK/WORLD_SIZE exported by hand on each node
    proc = run_aura(
        "check-dist",
        "--timeout",
        "3",
        env=env(RANK="0", WORLD_SIZE="2", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port())),
        timeout=120,
    )
    text = output(proc)
    assert proc.returncode == 1
    assert "The distributed check failed" in text and "Only 1 of the 2 expected participants" in text
    assert "Traceback" not in text


def test_diagnose_maps_known_errors():
    from aura.cluster.diagnose import diagnose

    assert "29500 is already in use" in diagnose("DistNetworkError: ... code: -98, name: EADDRINUSE", port=29500)[0]
    assert (
        "Cannot connect to the master 10.0.0.1:29500"
        in diagnose("connect() to [10.0.0.1]:29500 failed: Connection refused", addr="10.0.0.1", port=29500)[0]
    )
    assert "NCCL failed" in diagnose("torch.distributed.DistBackendError: NCCL error in: ...")[0]
    assert "GLOO_SOCKET_IFNAME" in diagnose("Gloo connectFullMesh failed with ...")[0]
    assert diagnose("ValueError: something else entirely") == []


def test_spanish_diagnosis():
    proc = run_aura(
        "check-dist",
        "--timeout",
        "3",
        env=env(
            AURA_LANG="es",
            RANK="0",
            WORLD_SIZE="2",
            LOCAL_RANK="0",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(free_port()),
        ),
        timeout=120,
    )
    assert proc.returncode == 1
    assert "Solo se unieron 1 de los 2 participantes esperados" in output(proc)
