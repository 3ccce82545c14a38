"""Preference-tuning speed and memory: `aura finetune --objective dpo --method lora` vs TRL DPOTrainer + peft.

Same tiny Llama (built here), same data (the embedded Spanish preference pairs,
``aura/resources/preference_es.jsonl``, in TRL's conversational form for TRL), same chat template (the
model's ChatML), same LoRA (r 16, alpha 32, dropout 0.05, every linear layer but the head), sigmoid DPO
with beta 0.1 and the reference = the base with the adapter disabled, batch 2 pairs x accumulation 4, lr
5e-5, cosine, fp32, max length 256, the same number of optimizer steps, this CPU. Each side runs in its
own subprocess; tokens/s = tokens of the (padded, chosen + rejected) batches it trained on / wall seconds
of the whole command (loading, tokenising, training, saving the adapter); peak memory = the child's peak
resident set size (``VmHWM``, ``versus_trl.peak_rss_mb``).

Tokens are counted the same way on both sides (bench/versus_trl.py); ``--repeats`` alternates the sides.

    .venv/bin/python bench/bench_dpo.py [--steps 20] [--max-length 256] [--repeats 3]
"""

from __future__ import annotations

import time

import versus_trl  # bench/: the shared Aura-vs-TRL harness

# reproduce: --steps 6 --repeats 3
# reproduce-quick: --steps 1 --max-length 64
# reproduce-needs: module:trl
# reproduce-quick-needs: module:trl

LR, BATCH, ACCUM = 5e-5, 2, 4


def child_aura(a) -> dict:
    return versus_trl.train_aura(
        a.out,
        base_model=a.model,
        objective="dpo",
        method="lora",
        max_steps=a.steps,
        max_length=a.max_length,
        precision="fp32",
        save_steps=0,
        log_interval=10,
        val_fraction=0.0,
        seed=0,
        learning_rate=LR,
        batch_size=BATCH,
        gradient_accumulation_steps=ACCUM,
        warmup_steps=0,
    )


def child_trl(a) -> dict:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig, DPOTrainer

    t = time.perf_counter()
    ds = Dataset.from_list(versus_trl.conversational_pairs())
    tok = AutoTokenizer.from_pretrained(a.model)
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32)
    args = DPOConfig(
        output_dir=a.out,
        per_device_train_batch_size=BATCH,
        gradient_accumulation_steps=ACCUM,
        learning_rate=LR,
        lr_scheduler_type="cosine",
        warmup_steps=0,
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
        beta=0.1,
        gradient_checkpointing=False,
    )
    lora = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, target_modules="all-linear", task_type="CAUSAL_LM")
    trainer = DPOTrainer(model=model, args=args, train_dataset=ds, processing_class=tok, peft_config=lora)
    tokens = {"n": 0}
    collate = trainer.data_collator

    def counting_collator(examples):
        batch = collate(examples)
        tokens["n"] += batch["input_ids"].numel()
        return batch

    trainer.data_collator = counting_collator
    trainer.train()
    trainer.save_model(a.out + "/final")
    return {"seconds": time.perf_counter() - t, "tokens": tokens["n"]}


if __name__ == "__main__":
    versus_trl.main(__file__, {"aura": child_aura, "trl": child_trl}, steps=20, name="dpo_vs_trl")
