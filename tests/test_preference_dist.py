"""`aura finetune --objective dpo|orpo` with LoRA under FSDP2 and DeepSpeed ZeRO-2 on 2 gloo ranks: the same
per-step losses and rewards as one process with the same global batch (2 ranks x 1 pair == 1 x 2 pairs),
an FSDP2 run resumed from its mid-run (DCP) checkpoint logs exactly the uninterrupted values, and
DeepSpeed with --precompute-ref (the reference pass runs before DeepSpeed takes the model) agrees with the
live reference. The DDP case is in tests/test_preference.py; DeepSpeed's resume in tests/test_deepspeed.py."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.distutil import output, torchrun
from tests.test_preference import FAST, REWARDS, embedded_records, finetune, step_rows, write_jsonl
from tests.tiny_models import build_llama, train_tokenizer

pytestmark = [pytest.mark.dist, pytest.mark.slow]
STEPS = 4
ORPO_COLUMNS = ("nll_loss", "log_odds_ratio", "log_odds_chosen")


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("preference_dist")
    tok = train_tokenizer(root / "tok", vocab_size=500)
    llama = build_llama(root / "llama", tok, hidden=64, layers=2)
    data = write_jsonl(root / "pairs.jsonl", embedded_records(12))
    ds = root / "ds.json"
    ds.write_text(json.dumps({"zero_optimization": {"stage": 2}}))
    return {"root": root, "llama": llama, "data": data, "ds": ds}


def common(env, objective: str = "dpo") -> list[str]:
    return [
        str(a)
        for a in (
            "--objective",
            objective,
            "--base-model",
            env["llama"],
            "--data",
            env["data"],
            *FAST,
            "--max-steps",
            STEPS,
        )
    ]


@pytest.fixture(scope="module")
def single_dpo(env) -> dict[int, dict]:
    """One process, 2 pairs per step, the live reference (the base with the adapter disabled)."""
    run = env["root"] / "single_dpo"
    finetune(*common(env), "--output-dir", run)
    return step_rows(run)


def two_ranks(*args: str) -> str:
    r = torchrun("-m", "aura", "finetune", *args, "--batch-size", "1", "--backend", "gloo", timeout=600)
    assert r.returncode == 0, output(r)
    return output(r)


def assert_same(a: dict[int, dict], b: dict[int, dict], keys, steps=range(1, STEPS + 1), skip=()) -> None:
    for step in steps:
        for key in keys:
            if (step, key) in skip:
                continue
            assert b[step][key] != "", (step, key)
            assert float(b[step][key]) == pytest.approx(float(a[step][key]), rel=1e-6, abs=1e-5), (step, key)


def test_dpo_under_fsdp2_equals_one_process_and_resumes_exactly(env, single_dpo, tmp_path):
    run = tmp_path / "fsdp"
    text = two_ranks(*common(env), "--output-dir", str(run), "--strategy", "fsdp", "--save-steps", "2")
    assert "Parallelism strategy: fsdp" in text and "adapter disabled" in text
    rows = step_rows(run)
    assert set(rows) == set(range(1, STEPS + 1))
    assert_same(single_dpo, rows, ("train_loss", *REWARDS))
    assert (run / "checkpoint-step-2" / "dcp").is_dir() and (run / "final" / "adapter_model.safetensors").is_file()

    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copytree(run / "checkpoint-step-2", resumed / "checkpoint-step-2")
    text = two_ranks(
        *common(env), "--output-dir", str(resumed), "--strategy", "fsdp", "--save-steps", "2", "--resume-from", "latest"
    )
    assert "Resumed from" in text
    again = step_rows(resumed)
    assert set(again) == {3, 4}
    for step in again:  # exactly: the logged strings, not within a tolerance
        assert [again[step][k] for k in ("train_loss", *REWARDS)] == [rows[step][k] for k in ("train_loss", *REWARDS)]


def test_dpo_under_deepspeed_zero2_equals_one_process_live_or_precomputed_reference(env, single_dpo, tmp_path):
    live = tmp_path / "live"  # the reference: the adapter disabled inside DeepSpeed's engine
    text = two_ranks(*common(env), "--output-dir", str(live), "--deepspeed", str(env["ds"]))
    assert "DeepSpeed ZeRO-2" in text and "adapter disabled" in text
    assert_same(single_dpo, step_rows(live), ("train_loss", *REWARDS))
    run = tmp_path / "pre"
    text = two_ranks(*common(env), "--output-dir", str(run), "--deepspeed", str(env["ds"]), "--precompute-ref")
    assert "DeepSpeed ZeRO-2: micro-batch 1, accumulation 1, global batch 2" in text
    assert "computed once before training (--precompute-ref)" in text
    rows = step_rows(run)
    assert set(rows) == set(range(1, STEPS + 1))
    # step 1: policy == reference, every reward is 0 up to rounding and chosen > rejected a coin toss
    assert_same(single_dpo, rows, ("train_loss", *REWARDS), skip={(1, "rewards/accuracy")})
    assert abs(float(rows[STEPS]["rewards/margin"])) > 1e-3  # the policy moved away from its reference
    assert (run / "final" / "adapter_model.safetensors").is_file()


def test_orpo_under_fsdp2_equals_one_process(env, tmp_path):
    single, run = tmp_path / "single", tmp_path / "fsdp"
    finetune(*common(env, "orpo"), "--output-dir", single)
    two_ranks(*common(env, "orpo"), "--output-dir", str(run), "--strategy", "fsdp")
    assert_same(step_rows(single), step_rows(run), ("train_loss", *REWARDS, *ORPO_COLUMNS))


def test_full_dpo_under_fsdp2_shards_its_reference_and_equals_one_process(env, tmp_path):
    """Full fine-tuning's reference is a frozen copy of the model: under FSDP2 it is sharded like the model
    (``aura.distributed.place_frozen``), not copied whole onto every rank; the losses and rewards stay those of
    one process."""
    single, run = tmp_path / "single", tmp_path / "fsdp"
    fast = common(env)
    for flag in ("--lora-r", "--lora-dropout"):  # LoRA's flags (and their values) out
        i = fast.index(flag)
        del fast[i : i + 2]
    args = [*fast, "--method", "full", "--learning-rate", "1e-3", "--max-steps", "2"]
    finetune(*args, "--output-dir", single)
    text = two_ranks(*args, "--output-dir", str(run), "--strategy", "fsdp")
    assert "Parallelism strategy: fsdp" in text and "a frozen copy" in text
    assert "The frozen copy of the model (the reference) is sharded with FSDP2 over 2 ranks" in text, text[-3000:]
    assert_same(
        step_rows(single), step_rows(run), ("train_loss", *REWARDS), steps=range(1, 3), skip={(1, "rewards/accuracy")}
    )
