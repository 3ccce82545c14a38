"""Parity with TRL: `aura finetune --objective kto` (the real CLI) logs, step by step, the same loss, gradient
norm, rewards, log-probabilities and KL estimate as TRL's KTOTrainer on the same tiny Llama, data, initial
LoRA weights and hyper-parameters (CPU, fp32, no dropout), within 1e-4 over 10 steps, with unequal desirable
and undesirable weights.

The micro-batch holds the whole (small) dataset, so both trainers see the same examples per step whatever
order their samplers choose, and TRL's mismatched KL pairs (completions rotated by one within its batch)
are Aura's (rotated by one in the data's order). The chat template is Mistral's, as in the DPO/ORPO parity
test (tests/test_preference_parity.py)."""

from __future__ import annotations

import json

from tests import test_preference_parity as parity
from tests.conftest import run_aura
from tests.test_preference import step_rows
from tests.test_preference_parity import LR, SEED, STEPS, _peft_model, _tokenizer, _trl_args

env = parity.env  # the same tiny Llama fixture (built once for this module)

EXAMPLES = [
    ("¿Cuál es la capital de Francia?", "La capital de Francia es París.", True),
    ("¿Cuánto es dos más dos?", "Cinco, creo.", False),
    ("Dame un consejo para dormir mejor.", "Acuéstate a la misma hora cada día y evita las pantallas.", True),
    ("¿Qué idioma se habla en México?", "Inglés.", False),
    ("¿Cómo se dice gracias en inglés?", "Se dice «thank you».", True),
]
BETA, UNDESIRABLE = 0.1, 1.3
KEYS = {
    "loss": "train_loss",
    "grad_norm": "grad_norm",
    "rewards/chosen": "rewards/chosen",
    "rewards/rejected": "rewards/rejected",
    "logps/chosen": "logps/chosen",
    "logps/rejected": "logps/rejected",
    "kl": "kl",
}


def test_kto_matches_trl_kto_trainer(env, tmp_path):
    """KTO, LoRA, reference = base with the adapter disabled, 3 good and 2 bad answers per micro-batch."""
    from datasets import Dataset
    from trl import KTOConfig, KTOTrainer

    data = tmp_path / "kto.jsonl"
    data.write_text(
        "".join(
            json.dumps({"prompt": p, "completion": c, "label": lab}, ensure_ascii=False) + "\n"
            for p, c, lab in EXAMPLES
        ),
        encoding="utf-8",
    )
    out = tmp_path / "aura"
    r = run_aura(
        "finetune",
        "--objective",
        "kto",
        "--base-model",
        env["llama"],
        "--data",
        data,
        "--output-dir",
        out,
        "--template",
        "mistral",
        "--val-fraction",
        "0",
        "--max-steps",
        STEPS,
        "--learning-rate",
        LR,
        "--warmup-steps",
        0,
        "--min-lr",
        0,
        "--lora-r",
        8,
        "--lora-alpha",
        16,
        "--lora-dropout",
        0,
        "--precision",
        "fp32",
        "--seed",
        SEED,
        "--log-interval",
        1,
        "--save-steps",
        0,
        "--beta",
        BETA,
        "--undesirable-weight",
        UNDESIRABLE,
        "--batch-size",
        len(EXAMPLES),
        "--gradient-accumulation-steps",
        1,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "KTO reference: the base model with the adapter disabled" in r.stdout
    aura_rows = [step_rows(out)[s] for s in range(1, STEPS + 1)]

    rows = [
        {"prompt": [{"role": "user", "content": p}], "completion": [{"role": "assistant", "content": c}], "label": lab}
        for p, c, lab in EXAMPLES
    ]
    args = _trl_args(KTOConfig, tmp_path / "trl", batch=len(EXAMPLES), accum=1)
    args.undesirable_weight = UNDESIRABLE
    trainer = KTOTrainer(
        model=_peft_model(env), args=args, train_dataset=Dataset.from_list(rows), processing_class=_tokenizer(env)
    )
    trainer.train()
    trl_steps = [h for h in trainer.state.log_history if "loss" in h and "train_runtime" not in h]
    assert len(trl_steps) == STEPS
    for step, (mine, theirs) in enumerate(zip(aura_rows, trl_steps), 1):
        for trl_key, aura_key in KEYS.items():
            assert abs(float(mine[aura_key]) - float(theirs[trl_key])) < 1e-4, (
                step,
                trl_key,
                mine[aura_key],
                theirs[trl_key],
            )
    # the run learnt something and the KL estimate moved off 0 (not a comparison of flat lines)
    first, last = aura_rows[0], aura_rows[-1]
    assert float(first["kl"]) == 0 and float(last["kl"]) > 1e-3
    assert float(last["rewards/chosen"]) - float(last["rewards/rejected"]) > 0
