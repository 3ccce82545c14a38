"""Parity with TRL: `aura finetune --objective dpo|orpo` (the real CLI), and DPO's `--dpo-loss ipo|hinge` and
`--label-smoothing`, log step by step the same loss and reward metrics as TRL's DPOTrainer / ORPOTrainer on the same
tiny Llama, data, initial LoRA weights and
hyper-parameters (CPU, fp32, no dropout), within 1e-4 (relative for values past 1: summed log-probs reach
-80) over 10 steps.

Every optimizer step covers the whole (small) dataset, so both trainers see the same pairs per step
whatever order their samplers choose. The chat template is Mistral's: its answers end with the EOS token
and nothing after it, so TRL's completion tokens and Aura's answer tokens are the same ids.
"""

from __future__ import annotations

import csv
import json

import pytest

from tests.conftest import run_aura
from tests.evidence import importorskip
from tests.tiny_models import build_llama, train_tokenizer

PAIRS = [
    ("¿Cuál es la capital de Francia?", "La capital de Francia es París.", "No sé, busca en internet."),
    ("¿Cuánto es dos más dos?", "Dos más dos son cuatro.", "Cinco, creo."),
    (
        "Dame un consejo para dormir mejor.",
        "Acuéstate a la misma hora cada día y evita las pantallas.",
        "Duerme cuando quieras.",
    ),
    (
        "¿Qué idioma se habla en México?",
        "En México se habla sobre todo español, además de muchas lenguas indígenas.",
        "Inglés.",
    ),
]
STEPS, SEED, LR, BETA = 10, 7, 5e-3, 0.1
DPO_KEYS = {
    "loss": "train_loss",
    "rewards/chosen": "rewards/chosen",
    "rewards/rejected": "rewards/rejected",
    "rewards/accuracies": "rewards/accuracy",
    "rewards/margins": "rewards/margin",
    "logps/chosen": "logps/chosen",
    "logps/rejected": "logps/rejected",
}
ORPO_KEYS = {
    **DPO_KEYS,
    "nll_loss": "nll_loss",
    "log_odds_ratio": "log_odds_ratio",
    "log_odds_chosen": "log_odds_chosen",
}


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("pref_parity")
    tok = train_tokenizer(root / "tok", vocab_size=500)
    llama = build_llama(root / "llama", tok, hidden=64, layers=2)
    return {"root": root, "tok": tok, "llama": llama}


def _aura_rows(env, name: str, pairs, *args, steps: int = STEPS) -> list[dict]:
    data = env["root"] / f"{name}.jsonl"
    data.write_text(
        "".join(json.dumps({"prompt": p, "chosen": c, "rejected": r}, ensure_ascii=False) + "\n" for p, c, r in pairs),
        encoding="utf-8",
    )
    out = env["root"] / f"aura-{name}"
    r = run_aura(
        "finetune",
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
        steps,
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
        *args,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    with open(out / "training_log.csv", newline="") as f:
        return [row for row in csv.DictReader(f) if row["kind"] == "step"]


def _peft_model(env):
    """The same initial LoRA weights as Aura's run: Aura's own set-up, seeded the same way."""
    import torch
    from transformers import AutoModelForCausalLM

    from aura.train.adapters import setup_model

    model = AutoModelForCausalLM.from_pretrained(env["llama"], dtype=torch.float32)
    torch.manual_seed(SEED)
    return setup_model(model, method="lora", lora_r=8, lora_alpha=16, lora_dropout=0.0)


def _tokenizer(env):
    from transformers import AutoTokenizer

    from aura.text.templates import get_template

    tok = AutoTokenizer.from_pretrained(env["tok"])
    tok.chat_template = get_template("mistral")
    return tok


def _trl_args(config_cls, out, *, batch: int, accum: int, steps: int = STEPS):
    return config_cls(
        output_dir=str(out),
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=accum,
        learning_rate=LR,
        lr_scheduler_type="cosine",
        warmup_steps=0,
        max_steps=steps,
        logging_steps=1,
        beta=BETA,
        report_to=[],
        save_strategy="no",
        seed=SEED,
        max_grad_norm=1.0,
        weight_decay=0.0,
        adam_beta1=0.9,
        adam_beta2=0.999,
        adam_epsilon=1e-8,
        use_cpu=True,
        bf16=False,
        disable_tqdm=True,
    )


def _compare(aura_rows, trl_logs, keys, steps: int = STEPS):
    trl_steps = [h for h in trl_logs if "loss" in h and "train_runtime" not in h]
    assert len(aura_rows) == len(trl_steps) == steps
    worst = 0.0
    for step, (mine, theirs) in enumerate(zip(aura_rows, trl_steps), 1):
        for trl_key, aura_key in keys.items():
            diff = abs(float(mine[aura_key]) - float(theirs[trl_key])) / max(1.0, abs(float(theirs[trl_key])))
            worst = max(worst, diff)
            assert diff < 1e-4, (step, trl_key, float(mine[aura_key]), theirs[trl_key])  # relative past 1
    # the run learnt something (the comparison is not between two flat lines)
    assert float(aura_rows[-1]["rewards/margin"]) > float(aura_rows[0]["rewards/margin"])
    return worst


def test_dpo_matches_trl_dpo_trainer(env, tmp_path):
    """Sigmoid DPO, LoRA, reference = base with the adapter disabled; 2 pairs x 2 accumulation steps."""
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    aura_rows = _aura_rows(
        env, "dpo", PAIRS, "--objective", "dpo", "--batch-size", 2, "--gradient-accumulation-steps", 2
    )
    rows = [
        {
            "prompt": [{"role": "user", "content": p}],
            "chosen": [{"role": "assistant", "content": c}],
            "rejected": [{"role": "assistant", "content": r}],
        }
        for p, c, r in PAIRS
    ]
    args = _trl_args(DPOConfig, tmp_path / "trl", batch=2, accum=2)
    args.loss_type = ["sigmoid"]
    trainer = DPOTrainer(
        model=_peft_model(env), args=args, train_dataset=Dataset.from_list(rows), processing_class=_tokenizer(env)
    )
    trainer.train()
    _compare(aura_rows, trainer.state.log_history, DPO_KEYS)


def test_orpo_matches_trl_orpo_trainer(env, tmp_path):
    """ORPO with the NLL over the whole chosen sequence (--train-on-prompt, as TRL); one pair per
    micro-batch (TRL averages the NLL over a batch's tokens, Aura per pair: the same for one pair)."""
    from datasets import Dataset

    orpo = importorskip("trl.experimental.orpo", "trl")
    pairs = PAIRS[:3]
    aura_rows = _aura_rows(
        env,
        "orpo",
        pairs,
        "--objective",
        "orpo",
        "--train-on-prompt",
        "--batch-size",
        1,
        "--gradient-accumulation-steps",
        3,
    )
    tok = _tokenizer(env)
    rows = []
    for p, c, r in pairs:  # TRL's ORPO takes text: the template's prompt and what each answer adds to it
        prompt = tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
        full = [
            tok.apply_chat_template(
                [{"role": "user", "content": p}, {"role": "assistant", "content": a}], tokenize=False
            )
            for a in (c, r)
        ]
        rows.append({"prompt": prompt, "chosen": full[0][len(prompt) :], "rejected": full[1][len(prompt) :]})
    trainer = orpo.ORPOTrainer(
        model=_peft_model(env),
        args=_trl_args(orpo.ORPOConfig, tmp_path / "trl", batch=1, accum=3),
        train_dataset=Dataset.from_list(rows),
        processing_class=tok,
    )
    trainer.train()
    _compare(aura_rows, trainer.state.log_history, ORPO_KEYS)


@pytest.mark.slow
@pytest.mark.parametrize(
    "aura_loss,trl_loss,batch",
    [
        (("--dpo-loss", "ipo"), "ipo", 2),
        (("--dpo-loss", "hinge"), "hinge", 2),
        # cDPO: TRL 1.x's sigmoid ignores label_smoothing; its AOT loss keeps the conservative form
        # -(1-e)·logσ(βd) - e·logσ(-βd), d sorted within a micro-batch: one pair per micro-batch, nothing to sort
        (("--label-smoothing", "0.2"), "aot", 1),
    ],
)
def test_dpo_loss_variants_match_trl(env, tmp_path, aura_loss, trl_loss, batch):
    """`--dpo-loss ipo|hinge` and `--label-smoothing` against TRL's DPOTrainer: every step the whole dataset,
    the same loss and reward metrics within 1e-4 step by step over 6 steps."""
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    steps, accum = 6, len(PAIRS) // batch
    aura_rows = _aura_rows(
        env,
        f"dpo-{trl_loss}",
        PAIRS,
        "--objective",
        "dpo",
        "--batch-size",
        batch,
        "--gradient-accumulation-steps",
        accum,
        *aura_loss,
        steps=steps,
    )
    rows = [
        {
            "prompt": [{"role": "user", "content": p}],
            "chosen": [{"role": "assistant", "content": c}],
            "rejected": [{"role": "assistant", "content": r}],
        }
        for p, c, r in PAIRS
    ]
    args = _trl_args(DPOConfig, tmp_path / "trl", batch=batch, accum=accum, steps=steps)
    args.loss_type = [trl_loss]
    if trl_loss == "aot":
        args.label_smoothing = 0.2
    trainer = DPOTrainer(
        model=_peft_model(env), args=args, train_dataset=Dataset.from_list(rows), processing_class=_tokenizer(env)
    )
    trainer.train()
    _compare(aura_rows, trainer.state.log_history, DPO_KEYS, steps)
