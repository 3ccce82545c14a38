"""`aura launch`: the environment contract of the original ddp_launch.sh, and real multi-node rendezvous."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import uuid

import pytest

from tests.conftest import run_aura
from tests.distutil import ROOT, env, free_port, output
from tests.evidence import require_or_skip

pytestmark = pytest.mark.dist


def _command(text: str) -> str:
    return re.search(r"Command: (.*)", text).group(1)


def test_environment_sets_the_job_and_flags_override_it():
    e = env(NNODES="3", NODE_RANK="2", MASTER_ADDR="192.168.50.20", MASTER_PORT="12355", GPUS_PER_NODE="4")
    proc = run_aura("launch", "--dry-run", "pretrain", "--data", "D", "--output-dir", "R", env=e)
    assert proc.returncode == 0, output(proc)
    cmd = _command(proc.stdout)
    assert (
        f"{sys.executable} -m torch.distributed.run --nnodes=3 --nproc_per_node=4 --node_rank=2 "
        "--master_addr=192.168.50.20 --master_port=12355 --max_restarts=0 "
        "-m aura pretrain --data D --output-dir R"
    ) == cmd
    proc = run_aura(
        "launch",
        "--dry-run",
        "--node-rank",
        "0",
        "--master-port",
        "29555",
        "--max-restarts",
        "3",
        "check-dist",
        "--backend",
        "gloo",
        env=e,
    )
    cmd = _command(proc.stdout)
    assert "--node_rank=0" in cmd and "--master_port=29555" in cmd and "--max_restarts=3" in cmd
    assert cmd.endswith("-m aura check-dist --backend gloo")


def test_ranks_share_a_gpu_only_when_asked():
    """NCCL refuses two ranks on one GPU: `--share-gpu` (never automatic) runs them over gloo, for tests; without
    it, more ranks than GPUs is refused before any process group starts, naming both fixes."""
    from aura.core.errors import AuraError
    from aura.distributed.process import gpu_sharing_backend

    assert gpu_sharing_backend("auto", share=True, local_world=2, devices=1) == "gloo"
    assert gpu_sharing_backend("gloo", share=True, local_world=2, devices=1) == "gloo"
    with pytest.raises(AuraError, match="--share-gpu.*--backend gloo"):
        gpu_sharing_backend("nccl", share=True, local_world=2, devices=1)
    with pytest.raises(AuraError, match=r"2 ranks per node but only 1 visible GPU.*--gpus-per-node 1.*--share-gpu"):
        gpu_sharing_backend("auto", share=False, local_world=2, devices=1)
    assert gpu_sharing_backend("auto", share=False, local_world=2, devices=2) == "auto"
    assert gpu_sharing_backend("nccl", share=False, local_world=4, devices=1, explicit_device=True) == "nccl"
    proc = run_aura("launch", "--dry-run", "--share-gpu", "--gpus-per-node", "2", "check-dist", env=env())
    assert proc.returncode == 0, output(proc)
    assert "--nproc_per_node=2" in _command(proc.stdout) and "AURA_SHARE_GPU=1" in proc.stdout


def test_defaults_and_elastic_rendezvous():
    proc = run_aura("launch", "--dry-run", "--gpus-per-node", "1", "check-dist", env=env())
    cmd = _command(proc.stdout)
    assert "--nnodes=1 --nproc_per_node=1 --node_rank=0 --master_addr=127.0.0.1 --master_port=29500" in cmd
    proc = run_aura(
        "launch",
        "--dry-run",
        "--nnodes",
        "2",
        "--gpus-per-node",
        "2",
        "--rdzv-backend",
        "c10d",
        "--rdzv-timeout",
        "30",
        "--rdzv-conf",
        "is_host=true",
        "--local-addr",
        "10.0.0.5",
        "check-dist",
        env=env(MASTER_ADDR="10.0.0.1", MASTER_PORT="29400"),
    )
    cmd = _command(proc.stdout)
    assert (
        "--rdzv_backend=c10d --rdzv_endpoint=10.0.0.1:29400 --rdzv_id=aura "
        "--rdzv_conf=is_host=true,join_timeout=30 --local_addr=10.0.0.5"
    ) in cmd
    assert "--node_rank" not in cmd


@pytest.mark.parametrize(
    "args, extra, message",
    [
        ([], {"NNODES": "two"}, "NNODES='two' is not an integer"),
        (["--nnodes", "2"], {"NODE_RANK": "2"}, "NODE_RANK=2 is out of range"),
        (["--master-port", "70000"], {}, "not a valid port"),
        (["--gpus-per-node", "0"], {}, "GPUS_PER_NODE must be at least 1"),
        # a variable that is set but 0 is refused, never silently replaced by the default
        ([], {"NNODES": "0"}, "The environment variable NNODES=0 is not valid: it must be at least 1"),
        ([], {"GPUS_PER_NODE": "0"}, "The environment variable GPUS_PER_NODE=0 is not valid: it must be at least 1"),
        ([], {"MASTER_PORT": "0"}, "The environment variable MASTER_PORT=0 is not a valid port (1-65535)"),
        ([], {"NODE_RANK": "-1"}, "The environment variable NODE_RANK=-1 cannot be negative"),
    ],
)
def test_bad_job_description_is_refused(args, extra, message):
    proc = run_aura("launch", "--dry-run", *args, "check-dist", env=env(**extra))
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_an_invalid_flag_of_the_inner_command_is_refused_before_any_worker_starts(tmp_path):
    proc = run_aura(
        "launch",
        "--gpus-per-node",
        "2",
        "--master-port",
        str(free_port()),
        "pretrain",
        "--bogus",
        "--output-dir",
        tmp_path / "run",
        env=env(),
        timeout=120,
    )
    assert proc.returncode == 2, output(proc)
    assert "aura pretrain: error: unrecognized arguments: --bogus" in proc.stderr
    assert "Run 'aura pretrain --help'" in proc.stderr
    text = output(proc)
    assert "Traceback" not in text and "NCCL" not in text and "torch.distributed.run" not in text, text
    assert not (tmp_path / "run").exists()
    bad = run_aura("launch", "--gpus-per-node", "2", "pretrain", "--max-steps", "0", env=env(AURA_LANG="es"))
    assert bad.returncode == 2 and "--max-steps debe ser mayor que 0" in bad.stderr, output(bad)


def test_missing_command_is_refused():
    proc = run_aura("launch", "--gpus-per-node", "1", env=env())
    assert proc.returncode == 2 and "Missing the command to launch" in proc.stderr


def _agent(
    node_rank: int, port: int, *, netns: str | None = None, extra: list[str] = (), extra_env: dict | None = None
) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-m",
        "aura",
        "launch",
        "--nnodes",
        "2",
        "--gpus-per-node",
        "1",
        "--node-rank",
        str(node_rank),
        "--rdzv-backend",
        "c10d",
        "--rdzv-timeout",
        "60",
        "--master-port",
        str(port),
        *extra,
        "check-dist",
        "--size-mb",
        "1",
        "--iters",
        "2",
    ]
    if netns:
        cmd = ["ip", "netns", "exec", netns, *cmd]
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env(**(extra_env or {})), cwd=ROOT
    )


def _both(agents: list[subprocess.Popen]) -> list[str]:
    texts = []
    for a in agents:
        try:
            texts.append(a.communicate(timeout=240)[0])
        except subprocess.TimeoutExpired:
            a.kill()
            texts.append(a.communicate()[0])
    for a, t in zip(agents, texts):
        assert a.returncode == 0, t[-3000:]
    return texts


@pytest.mark.slow
def test_two_nodes_on_loopback_with_c10d_rendezvous():
    port = free_port()
    texts = _both([_agent(0, port), _agent(1, port)])
    joined = "\n".join(texts)
    assert re.search(r"\[Rank 0/2 .*all_reduce=3 \(expected 3\) OK", joined)
    assert re.search(r"\[Rank 1/2 .*all_reduce=3 \(expected 3\) OK", joined)
    assert "Communication OK between 2 ranks" in joined


def _netns_available() -> str | None:
    if not sys.platform.startswith("linux") or shutil.which("ip") is None:
        return "needs Linux with iproute2"
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    probe = f"aura-probe-{uuid.uuid4().hex[:6]}"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return f"ip netns add is not allowed here: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


@pytest.fixture
def veth_pair():
    """Two network namespaces joined by a veth pair: 10.200.0.1/24 <-> 10.200.0.2/24."""
    reason = _netns_available()
    if reason:
        require_or_skip("netns", reason)
    tag = uuid.uuid4().hex[:6]
    ns = [f"aura-n0-{tag}", f"aura-n1-{tag}"]
    dev = [f"av0{tag}", f"av1{tag}"]

    def ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True, text=True)

    try:
        for n in ns:
            ip("netns", "add", n)
        ip("link", "add", dev[0], "type", "veth", "peer", "name", dev[1])
        for i in (0, 1):
            ip("link", "set", dev[i], "netns", ns[i])
            ip("netns", "exec", ns[i], "ip", "addr", "add", f"10.200.0.{i + 1}/24", "dev", dev[i])
            ip("netns", "exec", ns[i], "ip", "link", "set", dev[i], "up")
            ip("netns", "exec", ns[i], "ip", "link", "set", "lo", "up")
        yield ns, dev
    finally:
        for n in ns:  # deleting a namespace deletes its end of the veth pair, and so the pair
            subprocess.run(["ip", "netns", "del", n], capture_output=True)


@pytest.mark.slow
def test_two_nodes_across_network_namespaces(veth_pair):
    ns, dev = veth_pair
    port = free_port()
    common = ["--master-addr", "10.200.0.1"]
    agents = [
        _agent(
            0,
            port,
            netns=ns[0],
            extra=[*common, "--local-addr", "10.200.0.1", "--rdzv-conf", "is_host=true"],
            extra_env={"GLOO_SOCKET_IFNAME": dev[0]},
        ),
        _agent(
            1,
            port,
            netns=ns[1],
            extra=[*common, "--local-addr", "10.200.0.2", "--rdzv-conf", "is_host=false"],
            extra_env={"GLOO_SOCKET_IFNAME": dev[1]},
        ),
    ]
    joined = "\n".join(_both(agents))
    assert "--rdzv_endpoint=10.200.0.1:" in joined
    assert re.search(r"\[Rank 0/2 .*all_reduce=3 \(expected 3\) OK", joined)
    assert re.search(r"\[Rank 1/2 .*all_reduce=3 \(expected 3\) OK", joined)
