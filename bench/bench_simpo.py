"""SimPO, Aura vs TRL CPOTrainer(loss_type="simpo") on this CPU: the same tiny Llama (bench/versus_trl.py's: 4
layers, hidden 256, vocab 2000), the embedded Spanish preference pairs (``aura/resources/preference_es.jsonl``;
TRL gets the ChatML prompt and each answer's text, as its CPO trainer takes them), the ChatML template on both
sides, LoRA r 16 / alpha 32 / no dropout on every projection, beta 0.1, gamma 0.5, no NLL term (cpo_alpha 0),
no reference model on either side, batch 2 pairs x accumulation 4, lr 5e-5, fp32, max length 256, the same
number of optimizer steps; each side in its own subprocess with one thread.

Both sides are timed the same way (``versus_trl.alternate``, as bench/versus_trl_grpo.py):

* whole command: the child process's wall time, measured by the parent from its start to its exit
  (interpreter, imports, data, model, LoRA set-up, every step, the final save): what a user waits for;
* steady state: the seconds between the end of the first step and the end of the last, over the steps in
  between (the first step's one-time warm-ups left out on both sides). Aura: a hook on its step log; TRL: a
  callback's clock at each ``on_step_end``;
* the same two in CPU seconds of the child.

Pairs/s = optimizer steps x 8 pairs / seconds (both sides train the same pairs per step); memory is the
child's peak RSS.

    python bench/bench_simpo.py                 # 12 steps, one run a side
    python bench/bench_simpo.py --repeats 3     # 3 runs a side, alternating which side goes first
"""

# reproduce: --repeats 3
# reproduce-needs: module:trl
# reproduce-quick: --steps 2 --max-length 64
# reproduce-quick-needs: module:trl

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import versus_trl  # noqa: E402  (bench/: the shared Aura-vs-TRL harness)

BATCH, ACCUM, LR, BETA, GAMMA, LORA = 2, 4, 5e-5, 0.1, 0.5, dict(r=16, alpha=32)
PROJECTIONS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def child_aura(a) -> list[tuple[float, float]]:
    """``aura finetune --objective simpo ...`` through the program's own entry point (what the ``aura`` command
    runs), in this process so that each step's end can be clocked."""
    argv = [
        "finetune",
        "--objective",
        "simpo",
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
        "--beta",
        BETA,
        "--gamma",
        GAMMA,
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
        "--template",
        "chatml",
    ]
    return versus_trl.clocked_aura(argv)


def child_trl(a) -> list[tuple[float, float]]:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl.experimental.cpo import CPOConfig, CPOTrainer

    from aura.data.preference import DEFAULT_PAIRS
    from aura.text.templates import CHATML  # the same template Aura applies

    tok = AutoTokenizer.from_pretrained(a.model)
    tok.chat_template = CHATML
    rows = []
    for ln in DEFAULT_PAIRS.read_text(encoding="utf-8").splitlines():
        r = json.loads(ln)
        user = [{"role": "user", "content": r["prompt"]}]
        prompt = tok.apply_chat_template(user, tokenize=False, add_generation_prompt=True)
        full = [
            tok.apply_chat_template(user + [{"role": "assistant", "content": r[k]}], tokenize=False)
            for k in ("chosen", "rejected")
        ]
        rows.append({"prompt": prompt, "chosen": full[0][len(prompt) :], "rejected": full[1][len(prompt) :]})
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32)
    args = CPOConfig(
        output_dir=a.out,
        max_steps=a.steps,
        per_device_train_batch_size=BATCH,
        gradient_accumulation_steps=ACCUM,
        max_length=a.max_length,
        beta=BETA,
        loss_type="simpo",
        simpo_gamma=GAMMA,
        cpo_alpha=0.0,
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
        seed=0,
    )
    peft = LoraConfig(
        r=LORA["r"], lora_alpha=LORA["alpha"], lora_dropout=0.0, task_type="CAUSAL_LM", target_modules=PROJECTIONS
    )
    ends: list[tuple[float, float]] = []

    class StepClock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            ends.append((time.perf_counter(), time.process_time()))

    trainer = CPOTrainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tok,
        peft_config=peft,
        callbacks=[StepClock()],
    )
    trainer.train()
    trainer.save_model(a.out + "/final")
    return ends


if __name__ == "__main__":
    versus_trl.alternate(
        __file__, {"aura": child_aura, "trl": child_trl}, steps=12, per_step=BATCH * ACCUM, unit="pairs"
    )
