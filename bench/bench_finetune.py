"""Fine-tuning speed and memory: `aura finetune --method lora` (Aura's loop) vs TRL SFTTrainer + peft.

Same tiny Llama (built here), same data (the embedded Spanish instruction CSV; loss on responses only
in both), same LoRA (r 16, alpha 32, dropout 0.05, every linear layer but the head), batch 2 x
accumulation 4, lr 2e-4, 3 % warm-up, cosine, fp32, same number of optimizer steps, this CPU. Each
side runs in its own subprocess; tokens/s = tokens of the (padded) batches it trained on / wall
seconds of the whole command (loading, tokenising, training, saving the adapter); peak memory = the
child's peak resident set size (``VmHWM``, ``versus_trl.peak_rss_mb``).

Tokens are counted the same way on both sides (bench/versus_trl.py: every id entering the input embedding
in training mode); the sides alternate for ``--repeats`` runs and each side's fastest is compared, every
run printed.

    .venv/bin/python bench/bench_finetune.py [--steps 30] [--max-length 256] [--repeats 3]
"""

from __future__ import annotations

import time

import versus_trl  # bench/: the shared Aura-vs-TRL harness

# reproduce: --steps 30 --repeats 3
# reproduce-quick: --steps 1 --max-length 64
# reproduce-needs: module:trl
# reproduce-quick-needs: module:trl


def child_aura(a) -> dict:
    return versus_trl.train_aura(
        a.out,
        base_model=a.model,
        method="lora",
        max_steps=a.steps,
        max_length=a.max_length,
        truncation="truncate",
        precision="fp32",
        save_steps=0,
        log_interval=10,
        val_fraction=0.0,
        seed=0,
    )


def child_trl(a) -> dict:
    import csv

    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from aura.data import EMBEDDED_INSTRUCTIONS

    t = time.perf_counter()
    with open(EMBEDDED_INSTRUCTIONS, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    ds = Dataset.from_list(
        [
            {
                "prompt": [
                    {
                        "role": "user",
                        "content": (r["instruction"] + ("\n\n" + r["input"] if r["input"] else "")).strip(),
                    }
                ],
                "completion": [{"role": "assistant", "content": r["response"].strip()}],
            }
            for r in rows
        ]
    )
    tok = AutoTokenizer.from_pretrained(a.model)
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32)
    args = SFTConfig(
        output_dir=a.out,
        per_device_train_batch_size=2,
        gradient_accumulation_steps=4,
        learning_rate=2e-4,
        lr_scheduler_type="cosine",
        warmup_steps=max(1, round(0.03 * a.steps)),
        max_steps=a.steps,
        max_length=a.max_length,
        weight_decay=0.0,
        logging_steps=10,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        bf16=False,  # TRL's configs default to bf16 autocast, also on the CPU: fp32 as Aura's side
        seed=0,
        dataloader_num_workers=0,
        completion_only_loss=True,
    )
    lora = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, target_modules="all-linear", task_type="CAUSAL_LM")
    trainer = SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tok, peft_config=lora)
    tokens = {"n": 0}
    fwd = trainer.model.forward

    def counting_forward(*args, **kwargs):
        ids = kwargs.get("input_ids")
        if ids is not None and trainer.model.training:
            tokens["n"] += ids.numel()
        return fwd(*args, **kwargs)

    trainer.model.forward = counting_forward
    trainer.train()
    trainer.save_model(a.out + "/final")
    return {"seconds": time.perf_counter() - t, "tokens": tokens["n"]}


if __name__ == "__main__":
    versus_trl.main(__file__, {"aura": child_aura, "trl": child_trl}, steps=30, name="sft_vs_trl")
