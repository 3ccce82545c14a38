"""The training loop: loss falls, exact resume, token-normalised accumulation, data sharding, logs."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest
import torch

from tests.evidence import require_or_skip
from tests.tiny_models import CORPUS_DIR, train_tokenizer

TINY = dict(
    model_preset="manual",
    arch="llama",
    embed_size=64,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    seq_length=32,
    intermediate_size=256,
    batch_size=4,
    log_interval=1,
    sample_tokens=0,
)


def build_prepared(root: Path) -> Path:
    """A byte-level BPE (vocab 800) and the embedded corpus prepared with it (aura data prepare)."""
    from aura.data.prepare import PrepareConfig, prepare

    data = root / "data"
    if not (data / "meta.json").is_file():
        tok = train_tokenizer(root / "tok", vocab_size=800)
        prepare(
            PrepareConfig(
                inputs=[str(p) for p in sorted(CORPUS_DIR.glob("*.txt"))],
                tokenizer=str(tok),
                output_dir=str(data),
                workers=1,
                val_fraction=0.05,
            )
        )
    return data


@pytest.fixture(scope="session")
def prepared(prepared_corpus) -> Path:
    return prepared_corpus


def read_log(run: Path, kind: str = "step") -> dict[int, float]:
    with open(run / "training_log.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["kind"] == kind]
    key = "train_loss" if kind == "step" else "val_loss"
    return {int(r["step"]): float(r[key]) for r in rows}


def run_pretrain(out: Path, data: Path, **overrides):
    from aura.train.pretrain import PretrainConfig, pretrain

    cfg = PretrainConfig(data=[str(data)], output_dir=out, **{**TINY, **overrides})
    assert pretrain(cfg) == 0
    return out


def test_loss_falls_and_logs_every_series(prepared, tmp_path):
    run = run_pretrain(tmp_path / "run", prepared, max_steps=40, learning_rate=3e-3, eval_interval=20, save_steps=0)
    losses = read_log(run, "step")
    assert sorted(losses) == list(range(1, 41))
    first, last = sum(losses[s] for s in range(1, 4)) / 3, sum(losses[s] for s in range(38, 41)) / 3
    assert last < first - 0.8, (first, last)
    assert read_log(run, "eval")  # validation at step 20 (and 40)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run / "tb"))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    for tag in (
        "Loss/train_step",
        "LR",
        "Throughput/tokens_per_s",
        "System/CPU_percent",
        "System/RAM_percent",
        "System/GPU_VRAM_MB",
    ):
        assert tag in tags, tag
    steps = [e.step for e in acc.Scalars("Loss/train_step")]
    assert steps == list(range(1, 41))
    assert abs(acc.Scalars("Loss/train_step")[-1].value - losses[40]) < 1e-4


def test_epoch_series_and_epoch_checkpoints(prepared, tmp_path):
    from aura.data.pretrain_data import PretrainBatches, open_splits

    # seq 256 x batch 16: the corpus is a couple of epochs of a few steps each
    train_split, _ = open_splits(prepared)
    per_epoch = PretrainBatches(train_split, seq_len=256, batch_size=16).batches_per_epoch
    run = run_pretrain(
        tmp_path / "run", prepared, seq_length=256, batch_size=16, epochs=2, log_interval=2, save_steps=0, keep_last=0
    )
    epochs = read_log(run, "epoch")
    assert sorted(epochs) == [per_epoch, 2 * per_epoch]
    assert (run / f"checkpoint-step-{per_epoch}").is_dir() and (run / f"checkpoint-step-{2 * per_epoch}").is_dir()
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run / "tb"))
    acc.Reload()
    for tag in ("Loss/train_epoch", "Loss/val_epoch", "Time/epoch_seconds"):
        assert [e.step for e in acc.Scalars(tag)] == [1, 2], tag


def test_resume_reproduces_losses_exactly(prepared, tmp_path):
    """N steps straight == N/2 steps, then resume from the checkpoint: identical per-step losses."""
    straight = run_pretrain(
        tmp_path / "a",
        prepared,
        max_steps=12,
        save_steps=6,
        gradient_accumulation_steps=2,
        learning_rate=3e-3,
        keep_last=0,
    )
    resumed = tmp_path / "b"
    resumed.mkdir()
    shutil.copytree(straight / "checkpoint-step-6", resumed / "checkpoint-step-6")
    run_pretrain(
        resumed,
        prepared,
        max_steps=12,
        save_steps=6,
        gradient_accumulation_steps=2,
        learning_rate=3e-3,
        resume_from="latest",
    )
    a, b = read_log(straight), read_log(resumed)
    assert sorted(b) == list(range(7, 13))
    assert [a[s] for s in range(7, 13)] == [b[s] for s in range(7, 13)]  # exact, not approximate


def test_resumed_epoch_mean_equals_the_uninterrupted_one(prepared, tmp_path):
    """Issue 14: an epoch that straddles a resume averages all its steps, not only those after the resume."""
    flags = dict(
        seq_length=256, batch_size=16, epochs=2, save_steps=20, keep_last=0, learning_rate=3e-3, precision="fp32"
    )  # 16 steps per epoch: the checkpoint at 20 is inside epoch 2
    straight = run_pretrain(tmp_path / "a", prepared, **flags)
    resumed = tmp_path / "b"
    resumed.mkdir()
    shutil.copytree(straight / "checkpoint-step-20", resumed / "checkpoint-step-20")
    run_pretrain(resumed, prepared, **flags, resume_from="latest")

    def epoch_losses(run: Path) -> dict[int, float]:
        with open(run / "training_log.csv", newline="") as f:
            return {int(r["step"]): float(r["train_loss"]) for r in csv.DictReader(f) if r["kind"] == "epoch"}

    a, b = epoch_losses(straight), epoch_losses(resumed)
    assert sorted(b) == [32]
    assert b[32] == pytest.approx(a[32], abs=1e-6)


def test_accumulation_equals_bigger_batch(prepared, tmp_path):
    """batch 4 x accumulation 2 == batch 8 x 1: the loss is normalised over the whole window. In fp32: `auto`
    picks bf16 on CPUs with avx512_bf16, whose rounding differs between the two batch shapes by more than
    the tolerance."""
    a = read_log(
        run_pretrain(
            tmp_path / "a",
            prepared,
            max_steps=4,
            batch_size=4,
            gradient_accumulation_steps=2,
            learning_rate=3e-3,
            save_steps=0,
            precision="fp32",
        )
    )
    b = read_log(
        run_pretrain(
            tmp_path / "b",
            prepared,
            max_steps=4,
            batch_size=8,
            gradient_accumulation_steps=1,
            learning_rate=3e-3,
            save_steps=0,
            precision="fp32",
        )
    )
    for s in range(1, 5):
        assert a[s] == pytest.approx(b[s], abs=2e-5)


def test_ranks_read_disjoint_parts_and_match_single_process(prepared):
    from aura.data.pretrain_data import PretrainBatches, open_splits

    split, _ = open_splits(prepared)
    single = PretrainBatches(split, seq_len=32, batch_size=8, seed=3)
    ranks = [PretrainBatches(split, seq_len=32, batch_size=4, seed=3, rank=r, world_size=2) for r in range(2)]
    assert ranks[0].batches_per_epoch == ranks[1].batches_per_epoch == single.batches_per_epoch
    for _ in range(3):
        full = single.next_batch()["input_ids"]
        parts = [r.next_batch()["input_ids"] for r in ranks]
        assert torch.equal(torch.cat(parts), full)
        assert not any(torch.equal(x, y) for x in parts[0] for y in parts[1])
    # exact resume of the data position, and a new order each epoch
    state = ranks[0].state_dict()
    expected = ranks[0].next_batch()["input_ids"]
    again = PretrainBatches(split, seq_len=32, batch_size=4, seed=3, rank=0, world_size=2)
    again.load_state_dict(state)
    assert torch.equal(again.next_batch()["input_ids"], expected)
    assert not torch.equal(single.batch_at(0, 0)["input_ids"], single.batch_at(1, 0)["input_ids"])
    b = single.batch_at(0, 0)
    assert torch.equal(b["input_ids"][:, 1:], b["shift_labels"][:, :-1])  # targets are the next tokens


def test_loss_with_padded_labels_matches_transformers(prepared):
    """HF-convention labels with -100 padding: the loop's sum / count equals transformers' mean loss."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from aura.train.objectives.objective import count_targets, token_loss_sum

    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=800,
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            intermediate_size=64,
        )
    )
    ids = torch.randint(0, 800, (2, 12))
    labels = ids.clone()
    labels[0, :5] = -100  # a prompt that is not trained on
    labels[1, 9:] = -100  # padding
    batch = {"input_ids": ids, "labels": labels}
    with torch.no_grad():
        ours = token_loss_sum(model, batch) / count_targets(batch)
        ref = model(input_ids=ids, labels=labels).loss
    assert ours.item() == pytest.approx(ref.item(), rel=1e-6)


def cpu_fp16_or_skip() -> None:
    try:
        torch.amp.GradScaler("cpu")
        with torch.autocast("cpu", dtype=torch.float16):
            torch.nn.Linear(4, 4)(torch.randn(2, 4))
    except Exception as e:  # noqa: BLE001
        require_or_skip("torch-cpu-kernels", f"this PyTorch build has no CPU fp16 autocast/GradScaler: {e}")


def test_fp16_with_grad_scaler(prepared, tmp_path):
    cpu_fp16_or_skip()
    run = run_pretrain(
        tmp_path / "run", prepared, max_steps=6, precision="fp16", learning_rate=3e-3, save_steps=3, keep_last=0
    )
    losses = read_log(run)
    assert sorted(losses) == list(range(1, 7))
    assert (run / "checkpoint-step-6" / "scaler.pt").is_file()
    state = torch.load(run / "checkpoint-step-6" / "scaler.pt", weights_only=True)
    # no step skipped for an overflow (6 good steps at the initial scale), so the run follows fp32's:
    assert state["scale"] == 65536.0 and state["_growth_tracker"] == 6, state
    # the reference: the same 6 steps in fp32, step by step (measured: at most 4e-5 apart, 2026-11-28)
    fp32 = read_log(
        run_pretrain(tmp_path / "fp32", prepared, max_steps=6, precision="fp32", learning_rate=3e-3, save_steps=0)
    )
    for step in range(1, 7):
        assert losses[step] == pytest.approx(fp32[step], rel=1e-3), (step, losses, fp32)
    # ...and a resume from step 3 (the scaler's state restored) repeats steps 4-6 exactly
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copytree(run / "checkpoint-step-3", resumed / "checkpoint-step-3")
    run_pretrain(
        resumed, prepared, max_steps=6, precision="fp16", learning_rate=3e-3, save_steps=3, resume_from="latest"
    )
    again = read_log(resumed)
    assert sorted(again) == [4, 5, 6] and [again[s] for s in (4, 5, 6)] == [losses[s] for s in (4, 5, 6)]


def test_lr_schedule_is_a_pure_function_of_the_step():
    from aura.train.optim.schedule import lr_at

    kw = dict(base=1e-3, min_lr=1e-4, warmup=10, total=100)
    assert lr_at(0, **kw) == pytest.approx(1e-4)
    assert lr_at(9, **kw) == pytest.approx(1e-3)
    assert lr_at(99, **kw) == pytest.approx(1e-4, rel=1e-2)
    assert lr_at(55, **kw) == pytest.approx(
        1e-4 + 0.5 * 9e-4 * (1 + __import__("math").cos(__import__("math").pi * 0.5))
    )
    values = [lr_at(s, **kw) for s in range(10, 100)]
    assert values == sorted(values, reverse=True)


def test_no_weight_decay_on_norms_biases_embeddings():
    from transformers import GPT2Config, GPT2LMHeadModel

    from aura.train.args import TrainArgs
    from aura.train.optim.step_engine import build_optimizer

    model = GPT2LMHeadModel(GPT2Config(vocab_size=100, n_embd=32, n_layer=1, n_head=2, n_positions=16))
    opt = build_optimizer(model, TrainArgs(learning_rate=1e-3), torch.device("cpu"))
    decay = {id(p) for p in opt.param_groups[0]["params"]}
    names = {n for n, p in model.named_parameters() if id(p) in decay}
    assert names and all(
        n.endswith(("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")) for n in names
    )
    assert opt.param_groups[1]["weight_decay"] == 0.0


def test_torch_engine_sets_the_lr_and_skips_a_non_finite_window_without_touching_the_weights():
    from aura.distributed import DistInfo
    from aura.train.args import TrainArgs
    from aura.train.optim.step_engine import TorchEngine

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 1))
    engine = TorchEngine.build(
        model, args=TrainArgs(learning_rate=1e-3), dist=DistInfo(device=torch.device("cpu")), precision="fp32"
    )
    x = torch.randn(3, 4)
    engine.set_lr(0.25)
    assert [g["lr"] for g in engine.optimizer.param_groups] == [0.25, 0.25]
    before = [p.detach().clone() for p in model.parameters()]
    loss = model(x).sum() * float("nan")
    engine.backward(loss, last=True)
    outcome = engine.finish(loss.detach().double())
    assert not outcome.applied and outcome.loss != outcome.loss  # NaN: skipped
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))
    assert all(p.grad is None for p in model.parameters())
    loss = model(x).sum()
    engine.backward(loss, last=True)
    outcome = engine.finish(loss.detach().double())
    assert outcome.applied and outcome.grad_norm > 0
    assert not all(torch.equal(a, p) for a, p in zip(before, model.parameters()))
    assert engine.state_dict() == {}  # fp32: no GradScaler, nothing for scaler.pt


def test_fp16_engine_updates_bit_for_bit_like_the_grad_scaler_recipe():
    """TorchEngine's fp16 finish (found-inf agreed over ranks, then the optimizer's own step) leaves the same
    weights and scale as torch's recipe (unscale_, clip, GradScaler.step, update), overflows included."""
    import copy

    from aura.distributed import DistInfo
    from aura.train.args import TrainArgs
    from aura.train.optim.step_engine import TorchEngine, build_optimizer

    cpu_fp16_or_skip()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    ref, args = copy.deepcopy(model), TrainArgs(learning_rate=1e-2, max_grad_norm=1.0)
    engine = TorchEngine.build(model, args=args, dist=DistInfo(device=torch.device("cpu")), precision="fp16")
    opt, scaler = build_optimizer(ref, args, torch.device("cpu")), torch.amp.GradScaler("cpu")
    scales = []
    for step in range(8):
        x = torch.randn(3, 4) * (1e3 if step == 5 else 1.0)  # step 5 overflows whatever the scale
        with engine.autocast():
            loss = model(x).float().sum()
        engine.backward(loss, last=True)
        outcome = engine.finish(loss.detach().double())
        with torch.autocast("cpu", dtype=torch.float16):
            ref_loss = ref(x).float().sum()
        scaler.scale(ref_loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_([p for g in opt.param_groups for p in g["params"]], 1.0, foreach=True)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        assert outcome.applied and engine.scaler.get_scale() == scaler.get_scale(), step
        assert all(torch.equal(a, b) for a, b in zip(model.parameters(), ref.parameters())), step
        scales.append(scaler.get_scale())
    assert scales[5] == scales[4] / 2 and scales[-1] == scales[5]  # skipped updates, then applied ones
    assert engine.state_dict()["scale"] == scales[-1]


def test_one_optimizer_step_fits_on_a_screen():
    """Issue 14: the loop's main function stays short; each concern lives with its owner."""
    import inspect

    from aura.train import loop

    assert len(inspect.getsource(loop.train).splitlines()) < 80
    assert len(inspect.getsource(loop.optimizer_step).splitlines()) < 40
