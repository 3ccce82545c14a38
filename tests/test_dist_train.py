"""`aura pretrain` under torchrun (CPU, gloo), through the real CLI: DDP and FSDP2 equal one process,
exact resume (also on another world size), fault tolerance with --max-restarts, two "nodes"."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.conftest import run_aura
from tests.distutil import ROOT, env, free_port, output, torchrun
from tests.test_launch import veth_pair  # noqa: F401  (fixture: two network namespaces)
from tests.test_loop import read_log

pytestmark = pytest.mark.dist

STEPS, SAVE = 40, 5
TINY = [
    "--model-preset",
    "manual",
    "--arch",
    "llama",
    "--embed-size",
    "64",
    "--num-layers",
    "2",
    "--num-heads",
    "4",
    "--num-kv-heads",
    "2",
    "--seq-length",
    "32",
    "--intermediate-size",
    "128",
    "--log-interval",
    "1",
    "--sample-tokens",
    "0",
    "--learning-rate",
    "3e-3",
    "--precision",
    "fp32",
    "--backend",
    "gloo",
    "--save-steps",
    str(SAVE),
    "--keep-last",
    "0",
    "--warmup-steps",
    "0",
    "--min-lr",
    "3e-3",
]  # constant LR: runs of different lengths compare step by step


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    """A vocab-400 byte-level BPE and a slice of the embedded corpus, prepared with aura's own tools."""
    from aura.data.prepare import PrepareConfig, prepare
    from aura.tokenizer.train import train_bpe
    from tests.tiny_models import CORPUS_DIR

    root = tmp_path_factory.mktemp("dist_prepared")
    src = root / "src"
    src.mkdir()
    for p in sorted(CORPUS_DIR.glob("*.txt")):
        text = p.read_text(encoding="utf-8")
        (src / p.name).write_text(text[: len(text) * 2 // 3], encoding="utf-8")
    files = [str(p) for p in sorted(src.glob("*.txt"))]
    train_bpe(inputs=files, vocab_size=400, output_dir=root / "tok", force=True)
    return Path(
        prepare(
            PrepareConfig(
                inputs=files, tokenizer=str(root / "tok"), output_dir=str(root / "data"), workers=1, val_fraction=0.05
            )
        )
    )


def _args(prepared: Path, out: Path, *extra: str, steps: int = STEPS) -> list[str]:
    return ["pretrain", "--data", str(prepared), "--output-dir", str(out), *TINY, "--max-steps", str(steps), *extra]


def _ok(proc: subprocess.CompletedProcess) -> str:
    text = output(proc)
    assert proc.returncode == 0, text[-5000:]
    assert "Traceback" not in text, text[-5000:]
    return text


def _close(a: dict[int, float], b: dict[int, float], steps, tol: float = 2e-5) -> None:
    for s in steps:
        assert abs(a[s] - b[s]) < tol, (s, a[s], b[s])


@pytest.fixture(scope="module")
def reference(prepared, tmp_path_factory) -> dict[int, float]:
    """One process, batch 8: the losses that 2 ranks x batch 4 must reproduce."""
    out = tmp_path_factory.mktemp("ref") / "run"
    _ok(run_aura(*_args(prepared, out, "--batch-size", "8"), env=env()))
    return read_log(out)


@pytest.fixture(scope="module")
def ddp_run(prepared, tmp_path_factory) -> tuple[Path, str]:
    """2 ranks x batch 4 with DDP, started through `aura launch` (which runs torchrun)."""
    out = tmp_path_factory.mktemp("ddp") / "run"
    proc = run_aura(
        "launch",
        "--gpus-per-node",
        "2",
        "--master-port",
        str(free_port()),
        *_args(prepared, out, "--batch-size", "4", "--strategy", "ddp"),
        env=env(),
        timeout=400,
    )
    return out, _ok(proc)


@pytest.mark.slow
def test_ddp_two_ranks_equal_one_process_and_log_like_the_guide(ddp_run, reference):
    out, text = ddp_run
    losses = read_log(out)
    assert sorted(losses) == list(range(1, STEPS + 1))
    _close(losses, reference, range(1, STEPS + 1))
    assert losses[STEPS] < losses[1] - 0.5  # it learns
    # every line carries the rank prefix; each step line the real cross-rank check
    lines = [ln for ln in text.splitlines() if ln.startswith("[Rank ")]
    assert len(lines) > STEPS
    step_lines = [ln for ln in lines if "| Step " in ln]
    assert len(step_lines) == STEPS and all(ln.endswith("| Sync=OK") for ln in step_lines)
    assert all(re.match(r"\[Rank 0/2 \| Node \S+ \| Device cpu\] ", ln) for ln in step_lines)
    assert "Parallelism strategy: ddp (chosen with --strategy)" in text
    assert "Global batch: 8 sequences (256 tokens) per step = micro-batch 4 x accumulation 1 x 2 processes" in text
    finals = re.findall(r"\[Rank (\d)/2 [^\]]*\] Training complete\. Gradients synchronised\.", text)
    assert sorted(finals) == ["0", "1"]
    assert text.rstrip().splitlines()[-1].endswith("Training complete. Gradients synchronised.")
    # rank 0 alone writes logs and checkpoints: one TensorBoard file, full-state checkpoints
    assert len(list((out / "tb").iterdir())) == 1
    ckpt = out / f"checkpoint-step-{SAVE}"
    assert (ckpt / "model.safetensors").is_file() and not (ckpt / "dcp").exists()
    assert json.loads((ckpt / "trainer_state.json").read_text())["world_size"] == 2
    assert json.loads((out / "run.json").read_text())["status"] == "finished"


@pytest.mark.slow
def test_ddp_checkpoint_resumes_on_one_process(prepared, ddp_run, reference, tmp_path):
    """World size 2 -> 1: the data position is remapped through the global window count."""
    import shutil

    out = tmp_path / "run"
    shutil.copytree(ddp_run[0] / f"checkpoint-step-{SAVE * 2}", out / f"checkpoint-step-{SAVE * 2}")
    _ok(run_aura(*_args(prepared, out, "--batch-size", "8", "--resume-from", "latest"), env=env()))
    losses = read_log(out)
    assert min(losses) == SAVE * 2 + 1
    _close(losses, reference, range(SAVE * 2 + 1, STEPS + 1))


@pytest.mark.slow
def test_fsdp_equals_ddp_resumes_exactly_and_exports_a_hf_model(prepared, ddp_run, tmp_path):
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    steps = 12
    out = tmp_path / "fsdp"
    text = _ok(torchrun("-m", "aura", *_args(prepared, out, "--batch-size", "4", "--strategy", "fsdp", steps=steps)))
    assert "Parallelism strategy: fsdp" in text and "| Sync=FSDP" in text
    full = read_log(out)
    _close(full, read_log(ddp_run[0]), range(1, 6))  # same first steps as DDP (other LR schedule after)
    ckpt = out / f"checkpoint-step-{SAVE}"
    files = sorted(p.name for p in (ckpt / "dcp").iterdir())
    assert ".metadata" in files and sum(f.endswith(".distcp") for f in files) == 2  # one shard per rank
    assert not (ckpt / "model.safetensors").exists() and not list(out.glob(".tmp-*"))
    # final/ is a normal HF dir with the full weights gathered on rank 0
    final = out / "final"
    hf = AutoModelForCausalLM.from_pretrained(final)
    weights = load_file(str(final / "model.safetensors"))
    assert type(hf).__name__ == "LlamaForCausalLM" and len(weights) >= 20
    ids = torch.tensor([[1, 5, 9, 30, 200]])
    with torch.no_grad():
        assert torch.isfinite(hf(ids).logits).all()

    # resume on 2 ranks (FSDP) and on 1 process (DCP reshards, an explicit --load-sharded: DCP unpickles its
    # metadata, so a run without FSDP reads it only when told): the same losses as uninterrupted
    for name, launcher in (("two", lambda a: torchrun("-m", "aura", *a)), ("one", lambda a: run_aura(*a, env=env()))):
        run = tmp_path / name
        import shutil

        shutil.copytree(ckpt, run / ckpt.name)
        batch = "4" if name == "two" else "8"
        _ok(
            launcher(
                _args(
                    prepared,
                    run,
                    "--batch-size",
                    batch,
                    "--strategy",
                    "fsdp" if name == "two" else "auto",
                    "--resume-from",
                    "latest",
                    *(["--load-sharded"] if name == "one" else []),
                    steps=steps,
                )
            )
        )
        resumed = read_log(run)
        assert min(resumed) == SAVE + 1, name
        _close(resumed, full, range(SAVE + 1, steps + 1))
        if name == "one":  # the weights it ends with equal the FSDP run's gathered final/
            other = load_file(str(run / "final" / "model.safetensors"))
            assert max((other[k] - weights[k]).abs().max().item() for k in weights) < 1e-4


def test_full_checkpoint_into_fsdp_is_refused_clearly(tmp_path):
    from aura.core.errors import AuraError
    from aura.distributed import DistInfo
    from aura.train.run.checkpoint import ShardedStateIO

    (tmp_path / "trainer_state.json").write_text("{}")
    with pytest.raises(AuraError, match="saved without FSDP.*--strategy ddp"):
        ShardedStateIO().load_state(None, None, tmp_path, dist=DistInfo(), read=None)


@pytest.mark.slow
def test_killed_rank_restarts_the_group_and_resumes_from_the_checkpoint(prepared, reference, tmp_path):
    import psutil

    out = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        f"--master_port={free_port()}",
        "--max_restarts=1",
        "-m",
        "aura",
        *_args(prepared, out, "--batch-size", "4"),
    ]
    agent = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env(), cwd=ROOT)
    killed = None
    deadline = time.time() + 240
    while killed is None and time.time() < deadline and agent.poll() is None:
        time.sleep(0.05)
        logged = _logged_so_far(out)
        if (out / f"checkpoint-step-{SAVE}").is_dir() and len(logged) >= SAVE + 2:
            for child in psutil.Process(agent.pid).children():
                try:
                    rank = child.environ().get("RANK")
                except psutil.Error:
                    continue
                if rank == "1":
                    killed = logged
                    child.kill()  # SIGKILL: no handler, no interrupt checkpoint
    text = agent.communicate(timeout=300)[0]
    assert killed is not None, text[-4000:]
    assert agent.returncode == 0, text[-5000:]
    assert max(killed) < STEPS  # killed mid-run
    restart = re.search(
        r"torchrun restarted the worker group \(restart 1\): resuming from the latest "
        r"checkpoint: \S+checkpoint-step-(\d+)",
        text,
    )
    assert restart, text[-5000:]
    resumed_at = int(restart.group(1))
    assert SAVE <= resumed_at <= max(killed)
    losses = read_log(out)  # rows logged after the checkpoint by the killed attempt were dropped
    assert sorted(losses) == list(range(1, STEPS + 1))
    _close(losses, reference, range(1, STEPS + 1))  # the curve continues exactly from the checkpoint
    assert (out / "final" / "model.safetensors").is_file()
    assert json.loads((out / "run.json").read_text())["status"] == "finished"
    assert not list(out.glob(".tmp-*"))  # nothing half-written left behind


def _logged_so_far(out: Path) -> dict[int, float]:
    try:
        return read_log(out)
    except (OSError, ValueError, KeyError):  # not there yet, or a row half-appended
        return {}


def _node(
    node_rank: int,
    port: int,
    args: list[str],
    *,
    netns: str | None = None,
    extra: list[str] = (),
    extra_env: dict | None = None,
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
        *args,
    ]
    if netns:
        cmd = ["ip", "netns", "exec", netns, *cmd]
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env(**(extra_env or {})), cwd=ROOT
    )


def _wait_both(nodes: list[subprocess.Popen]) -> str:
    texts = []
    for n in nodes:
        try:
            texts.append(n.communicate(timeout=300)[0])
        except subprocess.TimeoutExpired:
            n.kill()
            texts.append(n.communicate()[0])
    for n, t in zip(nodes, texts):
        assert n.returncode == 0, t[-4000:]
    return "\n".join(texts)


def _check_two_node_training(text: str, out: Path, reference: dict[int, float], steps: int) -> None:
    assert "Global batch: 8 sequences" in text and "| Sync=OK" in text
    assert len(re.findall(r"\] Training complete\. Gradients synchronised\.", text)) == 2
    _close(read_log(out), reference, range(1, steps + 1))


@pytest.mark.slow
def test_two_nodes_on_loopback_train(prepared, reference, tmp_path):
    steps, port, out = 4, free_port(), tmp_path / "run"
    args = _args(prepared, out, "--batch-size", "4", steps=steps)
    text = _wait_both([_node(0, port, args), _node(1, port, args)])
    _check_two_node_training(text, out, reference, steps)


@pytest.mark.slow
def test_two_nodes_across_network_namespaces_train(prepared, reference, tmp_path, veth_pair):  # noqa: F811
    ns, dev = veth_pair
    steps, port, out = 4, free_port(), tmp_path / "run"
    args = _args(prepared, out, "--batch-size", "4", steps=steps)
    common = ["--master-addr", "10.200.0.1"]
    text = _wait_both(
        [
            _node(
                0,
                port,
                args,
                netns=ns[0],
                extra=[*common, "--local-addr", "10.200.0.1", "--rdzv-conf", "is_host=true"],
                extra_env={"GLOO_SOCKET_IFNAME": dev[0]},
            ),
            _node(
                1,
                port,
                args,
                netns=ns[1],
                extra=[*common, "--local-addr", "10.200.0.2", "--rdzv-conf", "is_host=false"],
                extra_env={"GLOO_SOCKET_IFNAME": dev[1]},
            ),
        ]
    )
    assert "--rdzv_endpoint=10.200.0.1:" in text
    _check_two_node_training(text, out, reference, steps)


@pytest.mark.slow
def test_a_dead_node_is_diagnosed_not_reported_as_our_bug(prepared, tmp_path):
    """Node 1 dies mid-run (its whole process tree SIGKILLed, as a power cut does): node 0's rank sees gloo
    close the connection and says what happened and how to resume, not "this is our bug"."""
    import psutil

    port, out = free_port(), tmp_path / "run"
    args = _args(prepared, out, "--batch-size", "4", steps=2000)
    node0, node1 = _node(0, port, args), _node(1, port, args)
    deadline = time.time() + 240
    while time.time() < deadline and node0.poll() is None and len(_logged_so_far(out)) < 3:
        time.sleep(0.1)
    assert len(_logged_so_far(out)) >= 3, "training never started"
    for p in [*psutil.Process(node1.pid).children(recursive=True), psutil.Process(node1.pid)]:
        try:
            p.kill()
        except psutil.Error:
            pass
    node1.communicate(timeout=60)
    try:
        text = node0.communicate(timeout=240)[0]
    except subprocess.TimeoutExpired:
        node0.kill()
        text = node0.communicate()[0]
    assert node0.returncode != 0, text[-4000:]
    assert "this is our bug" not in text, text[-5000:]
    assert "Another rank exited or disconnected mid-communication" in text, text[-5000:]
    assert "--resume-from latest" in text, text[-5000:]


def _lan_nodes(
    prepared: Path, outs: list[Path], n_steps: int, *extra: str, swap: bool = False
) -> list[subprocess.Popen]:
    """Two `aura launch` nodes on loopback, each with its own output folder; a static rendezvous, so the node
    rank fixes which folder rank 0 writes (``swap``: node 1's)."""
    port = free_port()
    return [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "aura",
                "launch",
                "--nnodes",
                "2",
                "--gpus-per-node",
                "1",
                "--node-rank",
                str(1 - i if swap else i),
                "--master-addr",
                "127.0.0.1",
                "--master-port",
                str(port),
                "--rdzv-timeout",
                "60",
                *_args(prepared, outs[i], "--batch-size", "4", *extra, steps=n_steps),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env(),
            cwd=ROOT,
        )
        for i in (0, 1)
    ]


@pytest.mark.slow
def test_two_nodes_without_a_shared_disk_resume_from_node_0s_copy(prepared, reference, tmp_path):
    """A LAN of PCs each with its own disk (guide 2): the two nodes name different output folders. Only the
    folder of the node that saved (rank 0's) holds the checkpoint. A part no node holds refuses both nodes
    with the list of it; otherwise the resume sends what a node lacks over the process group, also when rank
    0 is now the node without it (with c10d ranks go by arrival), and the curve continues exactly."""
    first, steps = SAVE, SAVE + 3
    outs = [tmp_path / "node0" / "run", tmp_path / "node1" / "run"]

    def both(n_steps: int, *extra: str, swap: bool = False) -> list[subprocess.Popen]:
        return _lan_nodes(prepared, outs, n_steps, *extra, swap=swap)

    _wait_both(both(first))
    ckpt = f"checkpoint-step-{SAVE}"
    assert (outs[0] / ckpt / "trainer_state.json").is_file() and (outs[0] / ckpt / "files.json").is_file()
    assert not (outs[1] / ckpt).exists()  # node 1 holds nothing: only the node that saved has it
    before = read_log(outs[0])

    # a part lost on node 0 and absent from node 1 cannot be fetched: both ranks are refused with the list
    lost = outs[0] / ckpt / "model.safetensors"
    lost.rename(tmp_path / "aside.safetensors")
    nodes = both(steps, "--resume-from", "latest")
    texts = [n.communicate(timeout=300)[0] for n in nodes]
    assert all(n.returncode != 0 for n in nodes), texts[0][-3000:]
    for text in texts:
        assert "Traceback" not in text, text[-4000:]
        assert (
            "no node holds 1 of its parts, so they cannot be sent over the network:\n  - model.safetensors "
            "(missing on: " in text
        ), text[-4000:]
    assert not (outs[1] / ckpt / "trainer_state.json").exists()  # nothing half-fetched passes for whole
    (tmp_path / "aside.safetensors").rename(lost)

    # rank 0 now on the node without the checkpoint: it is sent there before the resume is chosen
    text = _wait_both(both(steps, "--resume-from", "latest", swap=True))
    assert re.search(
        r"Checkpoint \S+node1/run/checkpoint-step-5: 1[0-9] files \([\d.]+ [kM]i?B\) received from "
        r"rank 1 over the network",
        text,
    ), text[-4000:]
    resumed = read_log(outs[1])  # rank 0's folder now: the steps after the checkpoint
    assert sorted(resumed) == list(range(SAVE + 1, steps + 1))
    _close({**before, **resumed}, reference, range(1, steps + 1))  # as one uninterrupted run
    fetched, whole = outs[1] / ckpt, outs[0] / ckpt
    assert sorted(p.name for p in fetched.iterdir()) == sorted(p.name for p in whole.iterdir())
    for name in ("model.safetensors", "optimizer.pt", "trainer_state.json"):
        assert (fetched / name).read_bytes() == (whole / name).read_bytes(), name
    assert not list(tmp_path.glob("node*/run/**/.tmp-*"))


@pytest.mark.slow
def test_fsdp_on_two_nodes_without_a_shared_disk_gathers_shards_on_node_0(prepared, reference, tmp_path):
    """FSDP2 on two nodes with their own folders: node 1's DCP shard is sent to node 0 at save (node 0 holds
    the whole checkpoint, node 1 nothing), and a resume with rank 0 on node 1 gets it back over the network."""
    outs = [tmp_path / "node0" / "run", tmp_path / "node1" / "run"]
    _wait_both(_lan_nodes(prepared, outs, SAVE, "--strategy", "fsdp"))
    ckpt = outs[0] / f"checkpoint-step-{SAVE}"
    assert sorted(p.name for p in (ckpt / "dcp").iterdir()) == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    assert not outs[1].exists() or not any(outs[1].iterdir())  # its shard went to node 0, its staging is gone
    before = read_log(outs[0])
    text = _wait_both(_lan_nodes(prepared, outs, SAVE + 3, "--strategy", "fsdp", "--resume-from", "latest", swap=True))
    assert "received from rank 1 over the network" in text, text[-4000:]
    resumed = read_log(outs[1])
    assert sorted(resumed) == list(range(SAVE + 1, SAVE + 4))
    _close({**before, **resumed}, reference, range(1, SAVE + 4), tol=1e-4)
