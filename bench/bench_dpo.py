"""Preference-tuning speed and memory: `aura finetune --objective dpo --method lora` vs TRL DPOTrainer + peft.

Same tiny Llama (built here), same data (the embedded Spanish preference pairs,
``aura/resources/preference_es.jsonl``, in TRL's conversational form for TRL), same chat template (the
model's ChatML), same LoRA (r 16, alpha 32, dropout 0.05, every linear layer but the head), sigmoid DPO
with beta 0.1 and the reference = the base with the adapter disabled, batch 2 pairs x accumulation 4, lr
5e-5, cosine, fp32, max length 256, the same number of optimizer steps, this CPU. Each side runs in its
own subprocess; tokens/s = tokens of the (padded, chosen + rejected) batches it trained on / wall seconds
of the whole command (loading, tokenising, training, saving the adapter); peak memory = the child's peak
resident set size (``resource.getrusage(RUSAGE_SELF).ru_maxrss``).

    .venv/bin/python bench/bench_dpo.py [--steps 20] [--max-length 256]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
LR, BATCH, ACCUM = 5e-5, 2, 4


def child_aura(a) -> dict:
    from aura.train.finetune import FinetuneConfig, finetune

    t = time.perf_counter()
    cfg = FinetuneConfig(base_model=a.model, output_dir=Path(a.out), objective="dpo", method="lora",
                         max_steps=a.steps, max_length=a.max_length, precision="fp32", save_steps=0, log_interval=10,
                         val_fraction=0.0, seed=0, learning_rate=LR, batch_size=BATCH,
                         gradient_accumulation_steps=ACCUM, warmup_steps=0)
    assert finetune(cfg) == 0
    seconds = time.perf_counter() - t
    import csv

    with open(Path(a.out) / "training_log.csv") as f:
        tokens = max(int(r["tokens"]) for r in csv.DictReader(f))  # padded tokens of the steps taken
    return {"seconds": seconds, "tokens": tokens}


def child_trl(a) -> dict:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig, DPOTrainer

    from aura.data.preference import DEFAULT_PAIRS

    t = time.perf_counter()
    records = [json.loads(ln) for ln in DEFAULT_PAIRS.read_text(encoding="utf-8").splitlines()]
    ds = Dataset.from_list([{"prompt": [{"role": "user", "content": r["prompt"]}],
                             "chosen": [{"role": "assistant", "content": r["chosen"]}],
                             "rejected": [{"role": "assistant", "content": r["rejected"]}]} for r in records])
    tok = AutoTokenizer.from_pretrained(a.model)
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32)
    args = DPOConfig(output_dir=a.out, per_device_train_batch_size=BATCH, gradient_accumulation_steps=ACCUM,
                     learning_rate=LR, lr_scheduler_type="cosine", warmup_steps=0, max_steps=a.steps,
                     max_length=a.max_length, weight_decay=0.0, logging_steps=10, save_strategy="no", report_to=[],
                     use_cpu=True, seed=0, dataloader_num_workers=0, beta=0.1, gradient_checkpointing=False)
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


def build_model(root: Path) -> Path:
    from tests.tiny_models import build_llama, train_tokenizer

    tok = train_tokenizer(root / "tok", vocab_size=2000)
    return build_llama(root / "llama", tok, hidden=256, layers=4, heads=4, kv_heads=2, intermediate=768, ctx=512)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--max-length", type=int, default=256)
    p.add_argument("--child", choices=["aura", "trl"])
    p.add_argument("--model")
    p.add_argument("--out")
    a = p.parse_args()
    if a.child:
        result = (child_aura if a.child == "aura" else child_trl)(a)
        result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print("RESULT " + json.dumps(result), flush=True)
        return
    with tempfile.TemporaryDirectory() as tmp:
        model = build_model(Path(tmp))
        results = {}
        for side in ("aura", "trl"):
            env = dict(os.environ, AURA_PLAIN="1", AURA_LANG="en", TOKENIZERS_PARALLELISM="false")
            r = subprocess.run([sys.executable, __file__, "--child", side, "--model", str(model), "--out",
                                str(Path(tmp) / side), "--steps", str(a.steps), "--max-length", str(a.max_length)],
                               capture_output=True, text=True, env=env)
            line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
            if r.returncode != 0 or not line:
                sys.exit(f"{side} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
            results[side] = json.loads(line[-1][7:])
            results[side]["tokens_per_s"] = results[side]["tokens"] / results[side]["seconds"]
    for side, r in results.items():
        print(f"{side:5s} {r['tokens']:>8,} tokens  {r['seconds']:7.1f} s  {r['tokens_per_s']:8.1f} tok/s  "
              f"peak RSS {r['peak_rss_mb']:7.0f} MB")
    a_, t_ = results["aura"], results["trl"]
    print(f"speed ratio aura/trl: {a_['tokens_per_s'] / t_['tokens_per_s']:.2f}x  "
          f"memory ratio aura/trl: {a_['peak_rss_mb'] / t_['peak_rss_mb']:.2f}")


if __name__ == "__main__":
    main()
