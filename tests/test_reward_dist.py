"""`aura finetune --objective reward` under FSDP2 and DeepSpeed ZeRO-2 on 2 gloo ranks (DDP is in
tests/test_reward_model.py): 2 ranks x 1 pair log, step by step, the loss, accuracy, margin and mean scores of
one process with 2 pairs (``test_reward_model.lora_run``: 8 pairs, 2 for validation, 4 steps, a checkpoint
every 2). The score head lies outside the transformer blocks (FSDP2's root holds it, trained whole beside
LoRA: peft's ``modules_to_save``); the pairs go through the model as shared-prompt rows. An FSDP2 run
resumed from its step-2 DCP checkpoint logs exactly the uninterrupted run's strings, and every saved
``final/`` (LoRA through peft, full fine-tuning through transformers' ``AutoModelForSequenceClassification``)
scores texts as the one-process run's ``final/`` does."""

from __future__ import annotations

import shutil

import pytest

from tests.distutil import output, torchrun
from tests.test_preference import step_rows
from tests.test_preference_parity import PAIRS
from tests.test_reward_model import COMMON, _aura, env, lora_run  # noqa: F401  (env, lora_run: module fixtures)

pytestmark = [pytest.mark.dist, pytest.mark.slow]
LOGGED = ("train_loss", "rewards/chosen", "rewards/rejected", "rewards/accuracy", "rewards/margin")


def _two_ranks(base, single, out, *args) -> str:
    """``single``: test_reward_model.lora_run, whose data and flags the 2 ranks take (1 pair each)."""
    argv = ["--base-model", base, "--data", single["data"], "--output-dir", out, *COMMON, *single["args"]]
    r = torchrun(
        "-m", "aura", "finetune", *map(str, [*argv, *args]), "--batch-size", "1", "--backend", "gloo", timeout=600
    )
    assert r.returncode == 0, output(r)
    return output(r)


def _same_steps(one: dict[int, dict], two: dict[int, dict], steps) -> None:
    assert set(one) == set(two) == set(steps)
    for step in steps:
        for key in LOGGED:
            assert float(two[step][key]) == pytest.approx(float(one[step][key]), rel=1e-5, abs=1e-5), (step, key)


def _scores(base, final) -> list[float]:
    """The scores of every answer of PAIRS (one text per forward, no padding) by ``final`` loaded without Aura:
    a LoRA adapter through peft on the base, a full model through transformers."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(final)
    if (final / "adapter_config.json").is_file():
        from peft import PeftModel

        base = AutoModelForSequenceClassification.from_pretrained(base, num_labels=1)
        base.config.pad_token_id = tok.pad_token_id
        model = PeftModel.from_pretrained(base, final)
    else:
        model = AutoModelForSequenceClassification.from_pretrained(final)
    out = []
    for prompt, *answers in PAIRS:
        for answer in answers:
            messages = [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}]
            ids = tok(tok.apply_chat_template(messages, tokenize=False), add_special_tokens=False).input_ids
            with torch.no_grad():
                out.append(float(model.eval()(input_ids=torch.tensor([ids])).logits[0, 0]))
    return out


def _same_scores(base, one, two) -> None:
    mine, theirs = _scores(base, one), _scores(base, two)
    assert mine == pytest.approx(theirs, abs=1e-4)
    assert max(mine) - min(mine) > 1e-2  # a trained head: the answers score apart


def test_lora_reward_model_under_fsdp2_equals_one_process_resumes_exactly_and_saves_its_head(env, lora_run, tmp_path):  # noqa: F811
    run = tmp_path / "fsdp"
    text = _two_ranks(env["llama"], lora_run, run, "--strategy", "fsdp", "--save-steps", 2)
    assert "Parallelism strategy: fsdp" in text and "Each pair goes through the model as one row" in text
    rows = step_rows(run)
    _same_steps(step_rows(lora_run["run"]), rows, range(1, 5))
    assert (run / "checkpoint-step-2" / "dcp").is_dir()
    _same_scores(env["llama"], lora_run["run"] / "final", run / "final")

    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copytree(run / "checkpoint-step-2", resumed / "checkpoint-step-2")
    text = _two_ranks(
        env["llama"], lora_run, resumed, "--strategy", "fsdp", "--save-steps", 2, "--resume-from", "latest"
    )
    assert "Resumed from" in text
    again = step_rows(resumed)
    assert set(again) == {3, 4}
    for step in again:  # exactly: the logged strings, not within a tolerance
        assert [again[step][k] for k in ("grad_norm", *LOGGED)] == [rows[step][k] for k in ("grad_norm", *LOGGED)]


def test_lora_reward_model_under_deepspeed_zero2_equals_one_process_and_saves_its_head(env, lora_run, tmp_path):  # noqa: F811
    """A checkpoint at step 2 too: its adapter (LoRA and the score head) is written by rank 0 alone."""
    ds = tmp_path / "ds.json"
    ds.write_text('{"zero_optimization": {"stage": 2}}', encoding="utf-8")
    run = tmp_path / "ds"
    text = _two_ranks(env["llama"], lora_run, run, "--deepspeed", ds, "--save-steps", 2)
    assert "DeepSpeed ZeRO-2: micro-batch 1, accumulation 1, global batch 2" in text
    _same_steps(step_rows(lora_run["run"]), step_rows(run), range(1, 5))
    assert (run / "checkpoint-step-2" / "deepspeed" / "state").is_dir()
    _same_scores(env["llama"], lora_run["run"] / "final", run / "final")


def test_full_reward_model_under_fsdp2_equals_one_process_and_its_final_folder_loads(env, lora_run, tmp_path):  # noqa: F811
    """Full fine-tuning: every weight sharded (the score head in the root), gathered into final/."""
    full = ["--method", "full", "--max-steps", 2, "--save-steps", 0]
    single = tmp_path / "single"
    _aura(env, single, lora_run["data"], *lora_run["args"], *full)
    run = tmp_path / "fsdp"
    _two_ranks(env["llama"], lora_run, run, "--strategy", "fsdp", *full)
    _same_steps(step_rows(single), step_rows(run), range(1, 3))
    assert (run / "final" / "model.safetensors").is_file()
    _same_scores(env["llama"], single / "final", run / "final")
