"""`--compile` through the real CLI on CPU (inductor), for pretraining with gradient checkpointing and for
LoRA fine-tuning; variable-length SFT batches padded to a few bucket lengths so compile sees few shapes."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_aura
from tests.test_loop import prepared, read_log  # noqa: F401  (session fixture)
from tests.tiny_models import build_llama, train_tokenizer

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
    "--batch-size",
    "4",
    "--log-interval",
    "1",
    "--sample-tokens",
    "0",
    "--precision",
    "fp32",
    "--save-steps",
    "0",
    "--max-steps",
    "3",
]


def _ok(proc) -> str:
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-4000:]
    assert "Traceback" not in text, text[-4000:]
    return text


@pytest.fixture(scope="module")
def eager(prepared, tmp_path_factory) -> dict[int, float]:  # noqa: F811
    """The per-step losses of TINY eager in one process (batch 4, checkpointing: the recomputed forward is
    the same one), the reference of every compiled run of this file (DDP and FSDP2 on 2 ranks x batch 2
    log the single process's losses: tests/test_dist_train.py, tests/test_distributed.py)."""
    out = tmp_path_factory.mktemp("eager") / "run"
    _ok(run_aura("pretrain", "--data", prepared, "--output-dir", out, *TINY, "--gradient-checkpointing"))
    return read_log(out)


@pytest.mark.slow
def test_pretrain_compiled_with_checkpointing_matches_eager(prepared, eager, tmp_path):  # noqa: F811
    compiled = tmp_path / "compiled"
    _ok(
        run_aura(
            "pretrain",
            "--data",
            prepared,
            "--output-dir",
            compiled,
            *TINY,
            "--gradient-checkpointing",
            "--compile",
            timeout=900,
        )
    )
    a, b = eager, read_log(compiled)
    assert a.keys() == b.keys() == {1, 2, 3}
    for step in a:  # inductor reorders float ops: equal to rounding, not bit for bit
        assert b[step] == pytest.approx(a[step], rel=1e-4), step
    config = json.loads((compiled / "run.json").read_text())
    assert "compile" in json.dumps(config)


def test_sft_batches_are_padded_to_bucket_lengths():
    from aura.data.sft_batches import Encoded, SFTDataSource, length_buckets

    assert length_buckets(2048) == (64, 128, 256, 512, 1024, 2048)
    assert length_buckets(96) == (64, 96)
    examples = [Encoded(input_ids=list(range(n)), labels=list(range(n))) for n in (5, 17, 40, 70, 33, 90, 12, 65)]
    plain = SFTDataSource(examples, batch_size=2, pad_id=0, shuffle=False, max_length=96)
    bucketed = SFTDataSource(examples, batch_size=2, pad_id=0, shuffle=False, max_length=96, buckets=length_buckets(96))
    plain_lengths = {b["input_ids"].shape[1] for b in plain}
    lengths = {b["input_ids"].shape[1] for b in bucketed}
    assert len(plain_lengths) == 4 and lengths == {64, 96}
    for p, b in zip(plain, bucketed):  # padding only: same tokens, labels masked, mask marks the real ones
        n = p["input_ids"].shape[1]
        assert (b["input_ids"][:, :n] == p["input_ids"]).all() and (b["labels"][:, n:] == -100).all()
        assert int(b["attention_mask"].sum()) == int(p["attention_mask"].sum())


@pytest.mark.slow
def test_lora_finetune_compiled_matches_eager_step_by_step(tmp_path):
    """LoRA with checkpointing, compiled (bucket-padded batches) against the same run eager: the per-step losses
    agree to rounding, so compile changes nothing the run learns."""
    tok = train_tokenizer(tmp_path / "tok", vocab_size=500)
    base = build_llama(tmp_path / "llama", tok, hidden=64, layers=2)
    flags = [
        "--base-model",
        base,
        "--max-steps",
        "4",
        "--max-length",
        "96",
        "--truncation",
        "truncate",
        "--lora-r",
        "8",
        "--lora-dropout",
        "0",
        "--precision",
        "fp32",
        "--batch-size",
        "4",
        "--gradient-accumulation-steps",
        "1",
        "--learning-rate",
        "5e-3",
        "--save-steps",
        "0",
        "--log-interval",
        "1",
        "--gradient-checkpointing",
    ]
    _ok(run_aura("finetune", "--output-dir", tmp_path / "eager", *flags))
    text = _ok(run_aura("finetune", "--output-dir", tmp_path / "compiled", "--compile", *flags, timeout=900))
    eager, compiled = read_log(tmp_path / "eager"), read_log(tmp_path / "compiled")
    assert eager.keys() == compiled.keys() == {1, 2, 3, 4}, text[-2000:]
    for step, loss in eager.items():  # inductor reorders float ops: equal to rounding, not bit for bit
        assert compiled[step] == pytest.approx(loss, rel=1e-4), step
    assert eager[4] < eager[1] - 0.05  # and the run does learn
    assert (tmp_path / "compiled" / "final" / "adapter_model.safetensors").is_file()


@pytest.mark.dist
@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_compiled_blocks_under_two_gloo_ranks_match_eager(prepared, eager, tmp_path, strategy):  # noqa: F811
    """`--compile` under torchrun: each block compiled, then wrapped by DDP or sharded by FSDP2 (torchtitan's
    order); 2 ranks x batch 2 give the losses of the eager run in one process with batch 4."""
    from tests.distutil import torchrun

    two_ranks = [a if a != "4" or TINY[i - 1] != "--batch-size" else "2" for i, a in enumerate(TINY)]
    out = tmp_path / "compiled"
    text = _ok(
        torchrun(
            "-m",
            "aura",
            "pretrain",
            "--data",
            prepared,
            "--output-dir",
            out,
            *two_ranks,
            "--backend",
            "gloo",
            "--strategy",
            strategy,
            "--compile",
            timeout=900,
        )
    )
    assert f"Parallelism strategy: {strategy}" in text
    assert ("| Sync=OK" if strategy == "ddp" else "| Sync=FSDP") in text  # replicas checked every step
    compiled = read_log(out)
    assert eager.keys() == compiled.keys() == {1, 2, 3}
    for step, loss in eager.items():  # inductor reorders float ops: equal to rounding
        assert compiled[step] == pytest.approx(loss, rel=1e-4), step
