"""Reward models, Aura vs TRL RewardTrainer on this CPU: the same tiny Llama (bench/versus_trl.py's: 4 layers,
hidden 256, vocab 2000) under a one-output sequence-classification head (``score``, seeded the same), the
embedded Spanish preference pairs (``aura/resources/preference_es.jsonl``; TRL gets them in its conversational
form), the ChatML template on both sides, LoRA r 16 / alpha 32 / no dropout on every projection with the score
head trained whole, the Bradley–Terry loss, batch 4 pairs x accumulation 2, lr 1e-4, fp32, max length 256, the
same number of optimizer steps; each side in its own subprocess with one thread.

Both sides are timed the same way (``versus_trl.alternate``, as bench/bench_kto.py):

* whole command: the child process's wall time, measured by this parent from its start to its exit
  (interpreter, imports, data, model, LoRA set-up, every step, the final save): what a user waits for;
* steady state: the seconds between the end of the first step and the end of the last, over the steps in
  between (the first step, which pays one-time warm-ups, is left out on both sides);
* the same two in CPU seconds of the child.

Pairs/s = optimizer steps x 8 pairs / seconds; memory is the child's peak RSS.

    python bench/bench_reward.py                 # 12 steps, one run a side
    python bench/bench_reward.py --repeats 3     # 3 runs a side, alternating which side goes first
"""

# reproduce: --repeats 3 --steps 12
# reproduce-needs: module:trl
# reproduce-quick: --steps 2 --max-length 64
# reproduce-quick-needs: module:trl

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import versus_trl  # noqa: E402  (bench/: the shared Aura-vs-TRL harness)

BATCH, ACCUM, LR, SEED, LORA = 4, 2, 1e-4, 0, dict(r=16, alpha=32)
PROJECTIONS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def child_aura(a) -> list[tuple[float, float]]:
    """``aura finetune --objective reward ...`` through the program's own entry point, clocked per step."""
    argv = [
        "finetune",
        "--objective",
        "reward",
        "--method",
        "lora",
        "--base-model",
        a.model,
        "--output-dir",
        a.out,
        "--max-steps",
        a.steps,
        "--batch-size",
        BATCH,
        "--gradient-accumulation-steps",
        ACCUM,
        "--max-length",
        a.max_length,
        "--lora-r",
        LORA["r"],
        "--lora-alpha",
        LORA["alpha"],
        "--lora-dropout",
        0.0,
        "--precision",
        "fp32",
        "--lr",
        LR,
        "--warmup-steps",
        0,
        "--val-fraction",
        0.0,
        "--save-steps",
        0,
        "--log-interval",
        1,
        "--seed",
        SEED,
        "--template",
        "chatml",
    ]
    return versus_trl.clocked_aura(argv)


def child_trl(a) -> list[tuple[float, float]]:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, TrainerCallback
    from trl import RewardConfig, RewardTrainer

    from aura.text.templates import CHATML  # the same template Aura applies

    tok = AutoTokenizer.from_pretrained(a.model)
    tok.chat_template = CHATML
    data = Dataset.from_list(versus_trl.conversational_pairs())
    torch.manual_seed(SEED)  # the score head, as Aura seeds it
    model = AutoModelForSequenceClassification.from_pretrained(a.model, num_labels=1, dtype=torch.float32)
    args = RewardConfig(
        output_dir=a.out,
        max_steps=a.steps,
        per_device_train_batch_size=BATCH,
        gradient_accumulation_steps=ACCUM,
        max_length=a.max_length,
        learning_rate=LR,
        warmup_steps=0,
        lr_scheduler_type="cosine",
        weight_decay=0.0,
        use_cpu=True,
        bf16=False,
        report_to=[],
        logging_steps=1,
        save_strategy="no",
        gradient_checkpointing=False,
        dataloader_num_workers=0,
        seed=SEED,
    )
    peft = LoraConfig(
        r=LORA["r"],
        lora_alpha=LORA["alpha"],
        lora_dropout=0.0,
        task_type="SEQ_CLS",
        target_modules=PROJECTIONS,
        modules_to_save=["score"],
    )
    ends: list[tuple[float, float]] = []

    class StepClock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            ends.append((time.perf_counter(), time.process_time()))

    trainer = RewardTrainer(
        model=model, args=args, train_dataset=data, processing_class=tok, peft_config=peft, callbacks=[StepClock()]
    )
    trainer.train()
    trainer.save_model(a.out + "/final")
    return ends


if __name__ == "__main__":
    versus_trl.alternate(
        __file__, {"aura": child_aura, "trl": child_trl}, steps=12, per_step=BATCH * ACCUM, unit="pairs"
    )
