"""``aura pipeline run`` on two nodes (loopback, CPU, gloo), as a LAN runs it: two processes with the
environment of ``aura launch`` (NNODES=2, NODE_RANK 0 and 1) run the same small LAN pipeline in ONE shared
folder. The training stage runs on both through torchrun (world size 2), after ``comm: auto`` measured the
link and its advice was used; the tokenizer and the data are written once, under a lock, and taken by the
other node; the eval runs on node 0 alone; a rerun of both skips every finished stage."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import run_aura_here
from tests.distutil import ROOT, env, free_port

LAN = """\
description: {es: "LAN de prueba en dos nodos.", en: "Two-node test LAN."}
stages:
  - name: tokenizer
    command: tokenizer train
    options: {inputs: [aura:corpus_es], doc_sep: blankline, vocab_size: 512}
  - name: prepare
    command: data prepare
    options: {inputs: [aura:corpus_es], doc_sep: blankline, tokenizer: tokenizer, val_fraction: 0.05, workers: 1}
  - name: pretrain
    command: pretrain
    launch: {}
    comm: {step_seconds: 0.05, size_mb: 1, iters: 3}
    options: {data: [prepare], model_preset: tiny, seq_length: 64, batch_size: 2, max_steps: 4, save_steps: 2,
              log_interval: 1, time_budget: 0, device: cpu, strategy: ddp, sample_tokens: 4}
  - name: eval
    command: eval
    options: {model: [pretrain.final], data: prepare, suite: aura-es, limit: 2, device: cpu}
"""


def _nodes(pipeline: Path, out: Path, port: int) -> list[str]:
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "aura", "pipeline", "run", str(pipeline), "-o", str(out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=ROOT,
            env=env(NNODES="2", NODE_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GPUS_PER_NODE="1"),
        )
        for rank in (0, 1)
    ]
    texts = []
    for p in procs:
        try:
            texts.append(p.communicate(timeout=400)[0])
        except subprocess.TimeoutExpired:
            p.kill()
            texts.append(p.communicate()[0])
    for rank, (p, text) in enumerate(zip(procs, texts)):
        assert p.returncode == 0, f"node {rank}:\n{text[-4000:]}"
    return texts


def _json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def test_plan_says_where_each_stage_runs_and_how_the_link_is_chosen():
    """lan-5-nodes on node 2 of 5: the layout, and `comm: auto`'s measurement in the plan (nothing runs)."""
    e = {"NNODES": "5", "NODE_RANK": "2", "GPUS_PER_NODE": "1", "MASTER_ADDR": "192.168.1.50"}
    # one size on both sides (auto would size the model for five GPUs' budget: aura.models.size_budget)
    same = ["--set", "pretrain.model_preset=qwen3-medium"]
    proc = run_aura_here("pipeline", "plan", "lan-5-nodes", "--assume", "RTX 4090 24GB", *same, env=e)
    assert proc.returncode == 0, proc.stderr
    assert (
        "Node 2 of 5: pretrain on every node (torchrun); tokenizer, prepare on each node; sft, dpo, eval, gguf "
        "on node 0."
    ) in proc.stdout
    assert (
        "pretrain: comm: auto: before the stage the link is measured (aura launch check-dist --model-preset"
        in proc.stdout
    )
    alone = run_aura_here("pipeline", "plan", "lan-5-nodes", "--assume", "RTX 4090 24GB", *same)
    assert alone.returncode == 0 and "On 1 node (NNODES): on several nodes, export NNODES, NODE_RANK" in alone.stdout
    # the estimate counts every node's GPU: five times the global batch, each step as long
    rows = [re.search(r"^pretrain .*?\s([\d,]+)\s+([\d,]+)\s+([\d,]+)\s", p.stdout, flags=re.M) for p in (proc, alone)]
    five, one = ([int(x.replace(",", "")) for x in m.groups()] for m in rows)
    assert five[0] == 5 * one[0] and five[1] == one[1] and five[2] == 5 * one[2], (five, one)


def test_layout_every_node_needs_what_the_multi_node_stage_reads(tmp_path):
    from aura.pipeline import nodes, spec

    text = LAN.replace("    launch: {}\n", "    launch: {nnodes: 3, node_rank: 1, gpus_per_node: 1}\n")
    text += (
        "  - name: sft\n    command: finetune\n    options: {base_model: pretrain.final, "
        "data: aura:instrucciones_es.csv, method: full, max_steps: 1, device: cpu}\n"
    )
    (tmp_path / "p.yaml").write_text(text, encoding="utf-8")
    pipe = spec.resolve(spec.load(str(tmp_path / "p.yaml")), tmp_path / "out")
    lay = nodes.layout(pipe)
    assert (lay.nnodes, lay.node_rank, lay.state_file) == (3, 1, "pipeline.node-1.json")
    assert lay.where == {"tokenizer": "every", "prepare": "every", "pretrain": "all", "eval": "main", "sft": "main"}


def test_the_mode_applied_is_the_one_check_dist_advises():
    """`comm: auto` applies `choose`, the flags behind `advise`'s line (the LAN guide's cases)."""
    from aura.cluster.check import advise, choose

    cases = [
        ("gpt2-small", 2, 2e-5, 100e9 / 8, "none", {"ddp_comm": "none"}),
        ("gpt2-medium", 5, 2e-4, 10e9 / 8, "powersgd", {"ddp_comm": "powersgd"}),
        ("gpt2-medium", 5, 2e-4, 1e9 / 8, "powersgd", {"ddp_comm": "powersgd"}),
    ]
    for preset, world, lat, bw, mode, flags in cases:
        got = choose(preset, world=world, latency_s=lat, busbw=bw, step_s=1.0)
        assert (got["mode"], got["flags"]) == (mode, flags), (preset, bw, got)
        line = advise(preset, world=world, latency_s=lat, busbw=bw, step_s=1.0)
        assert ("plain DDP" in line) if mode == "none" else ("--ddp-comm powersgd" in line)
    # where the advice names two ("powersgd or --local-steps H"): PowerSGD within 25 % of the step, else DiLoCo
    slow = choose("gpt2-medium", world=5, latency_s=2e-4, busbw=1e9 / 8, step_s=0.3)
    assert slow["mode"] == "local-steps" and slow["flags"] == {"local_steps": 256}, slow
    line = advise("gpt2-medium", world=5, latency_s=2e-4, busbw=1e9 / 8, step_s=0.3)
    assert line.endswith("use --ddp-comm powersgd or --local-steps 256."), line


@pytest.mark.parametrize(
    "edit, expected",
    [
        (
            ("    comm: {step_seconds: 0.05, size_mb: 1, iters: 3}\n", "    comm: {step_second: 1}\n"),
            "'comm' is 'auto' or a mapping of aura check-dist options",
        ),
        (("    launch: {}\n", ""), "'comm: auto' measures the link"),
        (("model_preset: tiny", "model_preset: tiny, ddp_comm: bf16"), "remove 'ddp_comm'"),
    ],
)
def test_comm_auto_is_checked_before_anything_runs(tmp_path, edit, expected):
    assert edit[0] in LAN
    (tmp_path / "bad.yaml").write_text(LAN.replace(edit[0], edit[1]), encoding="utf-8")
    proc = run_aura_here("pipeline", "run", str(tmp_path / "bad.yaml"), "-o", str(tmp_path / "out"))
    assert proc.returncode == 2 and expected in proc.stderr and "stage 'pretrain'" in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.dist
def test_two_nodes_share_one_folder_train_together_and_resume(tmp_path):
    pipeline = tmp_path / "lan.yaml"
    pipeline.write_text(LAN, encoding="utf-8")
    out, port = tmp_path / "shared", free_port()
    t0 = time.monotonic()
    first = _nodes(pipeline, out, port)
    first_s = time.monotonic() - t0
    states = [_json(out / "pipeline.json")["stages"], _json(out / "pipeline.node-1.json")["stages"]]

    # the training stage: one run of world size 2 across both nodes, its folder written by rank 0
    run = _json(out / "pretrain" / "run.json")
    assert run["status"] == "finished" and run["launch"]["world_size"] == 2 and run["launch"]["nnodes"] == 2
    assert all(s["pretrain"]["status"] == "finished" for s in states)
    assert (out / "pretrain" / "final" / "model.safetensors").is_file()
    # comm: auto: measured on both nodes once (rank 0 decided), then used by the training stage
    comms = [s["pretrain"]["comm"] for s in states]
    assert comms[0] == comms[1] and comms[0]["world"] == 2 and comms[0]["latency_ms"] > 0 and comms[0]["gbit"] > 0
    flags = comms[0]["flags"]
    assert set(flags) <= {"ddp_comm", "local_steps"} and flags
    joined = "\n".join(first)
    assert re.search(r"pretrain: link measured: latency [\d.]+ ms, [\d.]+ Gbit/s per rank; training with", joined)
    if flags.get("local_steps"):
        assert f"--local-steps {flags['local_steps']}" in states[0]["pretrain"]["command"]
        assert "Parallelism strategy: none (--local-steps" in first[0]
    elif flags.get("ddp_comm") != "none":
        assert f"--ddp-comm {flags['ddp_comm']}" in states[0]["pretrain"]["command"]
        assert f"Gradient communication: --ddp-comm {flags['ddp_comm']}" in first[0]

    # single-process stages never raced: each shared folder was written by exactly one node, under the
    # lock, and taken as it was by the other
    for name in ("tokenizer", "prepare"):
        recs = [s[name] for s in states]
        assert all(r["status"] == "finished" for r in recs)
        makers = [n for n, r in enumerate(recs) if r.get("made_by") is None]
        assert len(makers) == 1, recs
        other = 1 - makers[0]
        assert recs[other]["made_by"] == makers[0] and recs[other]["fingerprint"] == recs[makers[0]]["fingerprint"]
        assert f"{name}: node {makers[0]} made it in this shared folder" in first[other]
    # after the multi-node stage node 0 alone runs the rest; node 1 says so and records it
    assert states[0]["eval"]["status"] == "finished" and (out / "eval").is_dir()
    assert states[1]["eval"]["status"] == "elsewhere"
    assert "eval: runs on node 0 (a single-process stage); nothing to do on node 1." in first[1]
    assert (
        "Node 0 of 2: pretrain on every node (torchrun); tokenizer, prepare on each node; eval on node 0." in first[0]
    )
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "link measured" in report and ("made by node 1" in report) == any(
        states[0][n].get("made_by") == 1 for n in ("tokenizer", "prepare")
    )
    assert not list(out.glob(".*.stage-lock"))

    # the same command again on both nodes: every finished stage skipped, nothing trained again
    again = _nodes(pipeline, out, free_port())
    for rank, text in enumerate(again):
        for name in ("tokenizer", "prepare", "pretrain"):
            assert re.search(rf"\] {name}: finished and unchanged; skipped", text), (rank, text[-3000:])
        assert "link measured" not in text and "torch.distributed.run" not in text
    assert re.search(r"\] eval: finished and unchanged; skipped", again[0])
    assert "eval: runs on node 0" in again[1]
    assert _json(out / "pretrain" / "run.json")["history"] == run["history"]
    print(f"two nodes, one shared folder: first run {first_s:.1f} s")


@pytest.mark.slow
@pytest.mark.dist
def test_two_nodes_without_a_shared_folder(tmp_path):
    """The usual LAN: each node its own DIR. Each makes the same tokenizer and data (deterministic), the
    training stage's folder is node 0's (DDP: global rank 0 writes it), and a rerun skips on both."""
    import hashlib

    pipeline = tmp_path / "lan.yaml"
    pipeline.write_text(LAN, encoding="utf-8")
    outs, port = [tmp_path / "node0", tmp_path / "node1"], free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "aura", "pipeline", "run", str(pipeline), "-o", str(outs[rank])],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=ROOT,
            env=env(NNODES="2", NODE_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GPUS_PER_NODE="1"),
        )
        for rank in (0, 1)
    ]
    texts = [p.communicate(timeout=400)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], texts[0][-3000:] + texts[1][-3000:]

    def digest(folder: Path) -> dict[str, str]:
        return {
            str(f.relative_to(folder)): hashlib.sha256(f.read_bytes()).hexdigest()
            for f in sorted(folder.rglob("*"))
            if f.is_file() and f.name not in ("meta.json", ".aura-dir.json")
        }  # these hold paths and times

    for name in ("tokenizer", "prepare"):  # the same bytes on both nodes: each reads its own
        assert digest(outs[0] / name) == digest(outs[1] / name) and digest(outs[0] / name), name
    run = _json(outs[0] / "pretrain" / "run.json")
    assert run["status"] == "finished" and run["launch"]["world_size"] == 2
    assert not (outs[1] / "pretrain" / "final").exists() and not (outs[1] / "eval").exists()
    state1 = _json(outs[1] / "pipeline.node-1.json")["stages"]
    assert state1["pretrain"]["status"] == "finished" and state1["eval"]["status"] == "elsewhere"
    assert not (outs[1] / "pipeline.json").exists() and not (outs[1] / "report.md").exists()
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "aura", "pipeline", "run", str(pipeline), "-o", str(outs[rank])],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=ROOT,
            env=env(
                NNODES="2",
                NODE_RANK=str(rank),
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(free_port()),
                GPUS_PER_NODE="1",
            ),
        )
        for rank in (0, 1)
    ]
    again = [p.communicate(timeout=400)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], again
    for text in again:
        assert re.search(r"\] pretrain: finished and unchanged; skipped", text) and "torch.distributed.run" not in text


@pytest.mark.slow
@pytest.mark.dist
def test_two_nodes_stopped_mid_training_resume_together(tmp_path):
    """SIGTERM to node 0's `aura pipeline run` mid-pretraining: every rank stops at the same step with a
    checkpoint, both nodes exit 3 with their stage `interrupted`; the same command on both resumes the stage
    (node 1's rank reads node 0's checkpoint in the shared folder, with the communication it started with)."""
    import signal

    pipeline = tmp_path / "lan.yaml"
    # 16 steps: the stop lands 2 steps after checkpoint-step-4 (measured), 10 before the end; each step past
    # it is one more step and checkpoint (39-65 MB) in the resumed run (40 steps took 15 s more)
    pipeline.write_text(LAN.split("  - name: eval")[0].replace("max_steps: 4", "max_steps: 16"), encoding="utf-8")
    out, port = tmp_path / "shared", free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "aura", "pipeline", "run", str(pipeline), "-o", str(out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=ROOT,
            env=env(NNODES="2", NODE_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GPUS_PER_NODE="1"),
        )
        for rank in (0, 1)
    ]
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline and not (out / "pretrain" / "checkpoint-step-4").is_dir():
        time.sleep(0.1)
    procs[0].send_signal(signal.SIGTERM)
    texts = [p.communicate(timeout=400)[0] for p in procs]
    assert [p.returncode for p in procs] == [3, 3], texts[0][-3000:] + texts[1][-3000:]
    assert "Pipeline stopped in stage 'pretrain'" in texts[0] and "Pipeline stopped in stage 'pretrain'" in texts[1]
    states = [_json(out / "pipeline.json")["stages"], _json(out / "pipeline.node-1.json")["stages"]]
    assert [s["pretrain"]["status"] for s in states] == ["interrupted", "interrupted"]

    again = _nodes(pipeline, out, free_port())
    for text in again:
        assert re.search(r"\] tokenizer: finished and unchanged; skipped", text)
        assert re.search(r"\] pretrain: it was interrupted; resuming from its latest checkpoint", text), text[-3000:]
        assert "pretrain: resuming with the communication it started with" in text
    run = _json(out / "pretrain" / "run.json")
    assert run["status"] == "finished" and run["last_step"] == 16 and len(run["history"]) == 2
    assert run["history"][1]["resumed_from"] and run["launch"]["world_size"] == 2
    assert all(
        _json(out / f)["stages"]["pretrain"]["status"] == "finished" for f in ("pipeline.json", "pipeline.node-1.json")
    )
