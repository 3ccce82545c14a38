"""Training over a slow LAN (issue 11) on 2 ranks (CPU, gloo): --ddp-comm none|bf16|powersgd and
--local-steps (DiLoCo). Every mode learns and keeps its replicas equal at each synchronisation;
PowerSGD during its warm-up is plain DDP step for step; a run resumed from a checkpoint logs the same
per-step losses as the uninterrupted one (PowerSGD's error feedback and DiLoCo's replicas, outer momentum
and inner AdamW states included); bad combinations get clear messages.

The six pretraining runs, `aura check-dist --model-preset` and two LoRA fine-tunings share ONE torchrun launch
(tests/dist_scripts/lan_runs.py calls the CLI's entry point
once per run): one start-up instead of nine, about two minutes in all on two busy cores.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import run_aura_here
from tests.distutil import ROOT, SCRIPTS, env, free_port, output
from tests.test_dist_train import prepared  # noqa: F401  (fixture: tokenizer + prepared data)
from tests.test_loop import read_log

STEPS, SAVE, H = 12, 5, 3


@pytest.fixture(scope="module")
def lan(prepared, tmp_path_factory) -> tuple[Path, dict[str, str]]:  # noqa: F811
    """(root of the run dirs, each run's console output by name)."""
    import json

    from tests.test_finetune import short_records
    from tests.tiny_models import build_llama, train_tokenizer

    root = tmp_path_factory.mktemp("lan")
    base = build_llama(root / "llama", train_tokenizer(root / "tok", vocab_size=500), hidden=64, layers=2)
    sft = root / "sft.jsonl"
    sft.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in short_records()), encoding="utf-8")
    ports = [str(free_port()) for _ in range(9)]
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        f"--master_port={free_port()}",
        str(SCRIPTS / "lan_runs.py"),
        str(root),
        str(prepared),
        str(base),
        str(sft),
        *ports,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=400, cwd=ROOT)
    text = output(proc)
    assert proc.returncode == 0 and "Traceback" not in text, text[-6000:]
    parts = re.split(r"^=== RUN (\S+) ===$", text, flags=re.M)
    runs = {parts[i]: parts[i + 1] for i in range(1, len(parts), 2)}
    for name, part in runs.items():
        assert f"=== RC {name} 0 ===" in part, part[-4000:]
    return root, runs


def _sync_fields(text: str) -> dict[int, str]:
    return {int(m[1]): m[2] for m in re.finditer(r"\| Step (\d+)/\d+ \|.*\| Sync=(\S+)$", text, flags=re.M)}


@pytest.mark.dist
def test_every_mode_learns_and_checks_its_replicas_at_each_sync(lan):
    root, runs = lan
    for name in ("ddp", "bf16", "powersgd", "local"):
        losses = read_log(root / name)
        assert sorted(losses) == list(range(1, STEPS + 1)), name
        assert losses[STEPS] < losses[1] - 0.5, (name, losses)  # it learns
        assert (root / name / "final" / "model.safetensors").is_file()
    for name in ("ddp", "bf16", "powersgd"):  # DDP: the replicas are compared after every step
        assert _sync_fields(runs[name]) == {s: "OK" for s in range(1, STEPS + 1)}, name
        assert re.search(
            r"Communication: [\d.]+ % of step time \([\d.]+ s of [\d.]+ s over 1 step; measured in "
            r"the DDP hooks",
            runs[name],
        ), name
    assert (
        "Gradient communication: --ddp-comm powersgd (rank 2, full all-reduce for the first 3 steps" in runs["powersgd"]
    )
    assert "Gradient communication: --ddp-comm bf16 (gradients sent as bf16: half the bytes)" in runs["bf16"]
    # DiLoCo: no DDP; equal replicas after each outer step (every H steps and the last), "local" between
    local = runs["local"]
    assert "Parallelism strategy: none (--local-steps 3: every rank trains its own replica" in local
    assert _sync_fields(local) == {s: "OK" if s % H == 0 else "local" for s in range(1, STEPS + 1)}
    assert (
        len(
            re.findall(
                r"Communication: [\d.]+ % of step time \([\d.]+ s of [\d.]+ s over 3 steps; "
                r"pseudo-gradient all-reduce",
                local,
            )
        )
        == STEPS // H
    )


@pytest.mark.dist
def test_powersgd_warmup_is_plain_ddp_and_compression_stays_close(lan):
    root, _ = lan
    ddp, psgd, bf16 = (read_log(root / n) for n in ("ddp", "powersgd", "bf16"))
    # --powersgd-warmup 3: the first 3 steps are DDP's all-reduce, step for step (a warm-up covering the
    # whole run is plain DDP); from step 4 on the gradients are rank-2 approximations
    assert [psgd[s] for s in (1, 2, 3)] == [ddp[s] for s in (1, 2, 3)]
    assert any(abs(psgd[s] - ddp[s]) > 1e-4 for s in range(4, STEPS + 1))
    assert all(abs(psgd[s] - ddp[s]) / ddp[s] < 0.03 for s in range(1, STEPS + 1))
    assert bf16[1] == ddp[1]  # the first step's loss comes before any all-reduce
    assert any(bf16[s] != ddp[s] for s in range(2, STEPS + 1))
    assert all(abs(bf16[s] - ddp[s]) / ddp[s] < 0.01 for s in range(1, STEPS + 1))


@pytest.mark.dist
def test_resumed_runs_log_the_same_losses(lan):
    """Resumed from the step-5 checkpoint: PowerSGD's per-rank error feedback and Q matrices come back
    (through DDP's bucket rebuild); DiLoCo's checkpoint falls inside an interval (5 = 3 + 2 local steps),
    so each rank's own replica and AdamW moments come back too."""
    root, _ = lan
    for name in ("powersgd", "local"):
        full, resumed = read_log(root / name), read_log(root / f"{name}-resumed")
        assert sorted(resumed) == list(range(SAVE + 1, STEPS + 1)), name
        assert {s: resumed[s] for s in resumed} == {s: full[s] for s in resumed}, name
    engine = torch.load(root / "powersgd" / f"checkpoint-step-{SAVE}" / "scaler.pt", weights_only=True)
    ranks = engine["aura_ddp_comm"]["ranks"]
    assert len(ranks) == 2 and ranks[0]["iter"] == SAVE and ranks[0]["error"]
    assert not torch.equal(*(next(iter(r["error"].values())) for r in ranks))  # each rank's own error
    state = torch.load(root / "local" / f"checkpoint-step-{SAVE}" / "scaler.pt", weights_only=True)["aura_local_sgd"]
    assert state["inner"] == SAVE % H and state["ranks"][1]["params"] is not None


@pytest.mark.dist
def test_powersgd_buckets_reach_gloo_in_the_same_order_on_every_rank(tmp_path):
    """PowerSGD's P and Q all-reduces are issued from gloo's callback threads: with several buckets, one
    rank's next bucket could start before the previous chain ended and gloo would pair collectives of
    different sizes (it aborted or hung the two-node pipeline test). 100 steps, 2 ranks, many buckets,
    random pauses: both ranks finish with the same parameters (on the unordered hook: a hang or abort)."""
    import json

    from tests.distutil import torchrun

    result = tmp_path / "r.json"
    proc = torchrun(SCRIPTS / "powersgd_order.py", "100", result, timeout=240)
    assert proc.returncode == 0, output(proc)[-4000:]
    ranks = [json.loads(Path(f"{result}.rank{r}").read_text()) for r in (0, 1)]
    assert ranks[0] == ranks[1] and ranks[0]["steps"] == 100


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--local-steps", "0"], "--local-steps must be at least 1 (got: 0)"),
        (
            ["--strategy", "fsdp", "--ddp-comm", "powersgd"],
            "With --ddp-comm powersgd, DDP's all-reduce is compressed, which FSDP2 does not use: drop --ddp-comm or "
            "use --strategy ddp.",
        ),
        (["--local-steps", "8", "--ddp-comm", "bf16"], "--local-steps does not use DDP, so --ddp-comm bf16 would have"),
        (["--ddp-comm", "powersgd", "--powersgd-warmup", "1"], "--powersgd-warmup must be at least 2 (got: 1)"),
        (
            ["--ddp-comm", "powersgd", "--powersgd-rank", "100"],
            "--powersgd-rank 100 is larger than the layer model.embed_tokens.weight (400 x 64): PowerSGD cannot "
            "compress it at that rank. Use --powersgd-rank 32 or less.",
        ),
    ],
)
def test_bad_combinations_are_refused_clearly(prepared, tmp_path, flags, message):  # noqa: F811
    proc = run_aura_here(
        "pretrain",
        "--data",
        str(prepared),
        "--output-dir",
        str(tmp_path / "run"),
        "--model-preset",
        "manual",
        "--arch",
        "llama",
        "--embed-size",
        "64",
        "--num-layers",
        "1",
        "--num-heads",
        "4",
        "--num-kv-heads",
        "2",
        "--seq-length",
        "32",
        "--intermediate-size",
        "128",
        "--max-steps",
        "1",
        *flags,
    )
    text = output(proc)
    assert proc.returncode == 2 and message in text and "Traceback" not in text, text[-3000:]


def test_comm_flags_with_deepspeed_are_refused_in_spanish(tmp_path):
    proc = run_aura_here(
        "finetune",
        "--base-model",
        str(tmp_path / "base"),
        "--output-dir",
        str(tmp_path / "run"),
        "--deepspeed",
        str(tmp_path / "ds.json"),
        "--local-steps",
        "16",
        env={"AURA_LANG": "es"},
    )
    text = output(proc)
    assert proc.returncode == 2, text[-3000:]
    assert "--local-steps no funciona con --deepspeed (DeepSpeed hace su propia comunicación)" in text


@pytest.mark.dist
def test_check_dist_measures_the_link_and_advises(lan):
    _, runs = lan
    text = runs["check-dist"]
    assert re.search(r"Link: latency [\d.]+ ms \| bandwidth per rank [\d.]+ Gbit/s", text)
    assert "gpt2-medium: 1,345 MB of fp32 gradients per step between 2 ranks" in text
    assert re.search(r"--ddp-comm powersgd \(rank 4\)\s+[\d.]+ s", text)


@pytest.mark.dist
def test_finetune_takes_the_same_flags(lan):
    """LoRA fine-tuning on 2 ranks: PowerSGD on the adapters' gradients, and local steps (DiLoCo)."""
    root, runs = lan
    assert _sync_fields(runs["ft-powersgd"]) == {s: "OK" for s in range(1, 5)}
    assert "Gradient communication: --ddp-comm powersgd (rank 2" in runs["ft-powersgd"]
    assert _sync_fields(runs["ft-local"]) == {1: "local", 2: "OK", 3: "local", 4: "OK"}
    for name in ("ft-powersgd", "ft-local"):
        assert (root / name / "final" / "adapter_model.safetensors").is_file(), name


def test_advice_for_the_lan_guide(capsys):
    """The issue's case, computed: gpt2-medium, five PCs, 1 Gbit/s (0.2 ms latency), 1 s of compute per step."""
    from aura.cluster.check import advise

    line = advise("gpt2-medium", world=5, latency_s=2e-4, busbw=1e9 / 8, step_s=1.0)
    assert line == (
        "1.00 Gbit/s: ~17.2 s per step in all-reduce with gpt2-medium; use --ddp-comm powersgd or --local-steps 128."
    )
    table = capsys.readouterr()
    assert "--ddp-comm bf16" in table.out + table.err
    # a fast link: nothing to change; 10 Gbit/s: compression is enough
    assert (
        advise("gpt2-small", world=2, latency_s=2e-5, busbw=100e9 / 8, step_s=1.0)
        == "Communication is negligible: train with plain DDP (no --ddp-comm)."
    )
    assert advise("gpt2-medium", world=5, latency_s=2e-4, busbw=10e9 / 8, step_s=1.0).endswith(
        "use --ddp-comm powersgd (rank 4)."
    )


def test_the_advice_builds_its_model_on_the_meta_device():
    """The advice reads shapes only: every tensor its model makes is on the meta device. It built and
    randomly initialised the whole preset on the CPU instead (build_model's default device overrode the
    caller's `with torch.device("meta")`): ~20 s and 1.4 GB for gpt2-medium in every check-dist advice and
    every pipeline's `comm: auto`."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    from aura.cluster.check import comm_times

    class Devices(TorchDispatchMode):
        seen: set[str] = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            self.seen |= {t.device.type for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)}
            return out

    with Devices() as mode:
        nbytes, _ = comm_times("gpt2-small", world=2, latency_s=1e-4, busbw=1e9)
    assert mode.seen == {"meta"}, mode.seen
    from aura.models.presets import PRESETS, build_model

    same = build_model(PRESETS["gpt2-small"], 32000, device="meta")  # the shapes it counts: fp32 gradients
    assert nbytes == 4 * sum(p.numel() for p in same.parameters()) > 4e8
