"""Parity with TRL: `aura finetune --objective simpo|cpo` (the real CLI) logs, step by step, the same loss
and reward metrics as TRL's CPOTrainer (``loss_type="simpo"`` without the NLL term, ``loss_type="sigmoid"``
with it) on the same tiny Llama, data, initial LoRA weights and hyper-parameters (CPU, fp32, no dropout),
within 1e-4 over 10 steps: every step's update follows from the previous step's gradients, so equal losses
and rewards at steps 2..10 say the gradients were equal too. The harness (model, data, LoRA, TRL's arguments,
the comparison) is tests/test_preference_parity.py's."""

from __future__ import annotations

import pytest

from tests.evidence import importorskip
from tests.test_preference_parity import DPO_KEYS, PAIRS, _aura_rows, _compare, _peft_model, _tokenizer, _trl_args
from tests.tiny_models import build_llama, train_tokenizer


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """The tiny Llama and tokenizer of tests/test_preference_parity.py's harness."""
    root = tmp_path_factory.mktemp("simpo_parity")
    tok = train_tokenizer(root / "tok", vocab_size=500)
    return {"root": root, "tok": tok, "llama": build_llama(root / "llama", tok, hidden=64, layers=2)}


def _text_rows(tok, pairs) -> list[dict]:
    """TRL's CPO takes text: the template's prompt and what each answer adds to it."""
    rows = []
    for p, c, r in pairs:
        prompt = tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
        full = [
            tok.apply_chat_template(
                [{"role": "user", "content": p}, {"role": "assistant", "content": a}], tokenize=False
            )
            for a in (c, r)
        ]
        rows.append({"prompt": prompt, "chosen": full[0][len(prompt) :], "rejected": full[1][len(prompt) :]})
    return rows


def _trl_run(env, tmp_path, pairs, *, batch: int, accum: int, **cpo) -> list[dict]:
    from datasets import Dataset

    cpo_module = importorskip("trl.experimental.cpo", "trl")
    args = _trl_args(cpo_module.CPOConfig, tmp_path / "trl", batch=batch, accum=accum)
    for key, value in cpo.items():
        setattr(args, key, value)
    tok = _tokenizer(env)
    trainer = cpo_module.CPOTrainer(
        model=_peft_model(env), args=args, train_dataset=Dataset.from_list(_text_rows(tok, pairs)), processing_class=tok
    )
    trainer.train()
    return trainer.state.log_history


def test_simpo_matches_trl_cpo_trainer_simpo_loss(env, tmp_path):
    """SimPO: length-normalised log-probs, target margin gamma 0.3, no NLL term; 2 pairs x 2 accumulation."""
    aura_rows = _aura_rows(
        env,
        "simpo",
        PAIRS,
        "--objective",
        "simpo",
        "--gamma",
        0.3,
        "--batch-size",
        2,
        "--gradient-accumulation-steps",
        2,
    )
    assert "nll_loss" not in aura_rows[0]  # pure SimPO logs no NLL
    trl_logs = _trl_run(env, tmp_path, PAIRS, batch=2, accum=2, loss_type="simpo", simpo_gamma=0.3, cpo_alpha=0.0)
    _compare(aura_rows, trl_logs, DPO_KEYS)


def test_cpo_matches_trl_cpo_trainer_with_its_nll_term(env, tmp_path):
    """CPO: summed log-probs and TRL's default NLL weight (cpo_alpha 1); one pair per micro-batch (TRL averages
    the NLL over a batch's tokens, Aura per pair: the same for one pair)."""
    pairs = PAIRS[:3]
    aura_rows = _aura_rows(
        env, "cpo", pairs, "--objective", "cpo", "--batch-size", 1, "--gradient-accumulation-steps", 3
    )
    trl_logs = _trl_run(env, tmp_path, pairs, batch=1, accum=3, loss_type="sigmoid")
    assert {"nll_loss", "rewards/margins"} <= set(trl_logs[0])
    _compare(aura_rows, trl_logs, {**DPO_KEYS, "nll_loss": "nll_loss"})
