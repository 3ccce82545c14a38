"""GRPO, Aura vs TRL GRPOTrainer on this CPU: the same tiny Llama (bench/versus_trl.py's: 4 layers, hidden 256,
vocab 2000), prompts, G, completion length, LoRA (r 16 on every projection, no dropout), beta and reward, each
side in its own subprocess; optimizer steps/s, completion tokens/s and the child's peak RSS, with the Aura/TRL
ratios. Both clocks cover the whole run (data, model, LoRA set-up, training); the steps alone are timed too
(Aura: the training loop's elapsed seconds at its last step; TRL: the sum of its ``step_time`` metric,
sampling and update without the optimizer step). Completion tokens are counted from what each side sampled (Aura: its training_log.csv; TRL: a
zero-weight reward that sees every completion's ids).

    python bench/versus_trl_grpo.py                 # 12 steps, G 8, 64-token completions
    python bench/versus_trl_grpo.py --steps 20 --max-completion-length 128
    python bench/versus_trl_grpo.py --repeats 3     # alternate the sides 3 times, keep each side's fastest run

On a shared machine the other jobs' load changes from one minute to the next: ``--repeats`` alternates the
two sides and keeps each side's fastest run (both sample the same completions every time), and every run's
figures are printed.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import versus_trl  # noqa: E402  (bench/: the shared Aura-vs-TRL harness)

PROMPTS = ["¿Cuánto es {a} más {b}?", "Escribe el número {a} en letras.", "¿Qué número va después del {a}?",
           "Suma {a} y {b} y explica la cuenta.", "Di una palabra que empiece por la letra {c}."]
G, LORA = 8, dict(r=16, alpha=32)
FORMAT = r"(?s).*\d.*"  # a completion that holds a digit


def write_prompts(path: Path, n: int = 64) -> Path:
    rows = [{"prompt": PROMPTS[i % len(PROMPTS)].format(a=i + 2, b=3 * i + 1, c="abcdefghij"[i % 10])}
            for i in range(n)]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def child_aura(a) -> dict:
    from aura.train.finetune import finetune
    from aura.train.finetune_config import FinetuneConfig

    t = time.perf_counter()
    cfg = FinetuneConfig(output_dir=Path(a.out), base_model=a.model, data=a.data, objective="grpo", method="lora",
                         max_steps=a.steps, num_generations=G, batch_size=G, gradient_accumulation_steps=1,
                         max_completion_length=a.max_completion_length, reward=["format"], format_pattern=FORMAT,
                         beta=0.04, lora_r=LORA["r"], lora_alpha=LORA["alpha"], lora_dropout=0.0, precision="fp32",
                         learning_rate=1e-5, warmup_steps=0, val_fraction=0.0, save_steps=0, log_interval=1,
                         template="chatml", loss_type="dapo")
    assert finetune(cfg) == 0
    seconds = time.perf_counter() - t
    with open(Path(a.out) / "training_log.csv") as f:
        rows = [r for r in csv.DictReader(f) if r["kind"] == "step"]
    return {"seconds": seconds, "steps": len(rows), "loop_seconds": float(rows[-1]["seconds"]),
            "completion_tokens": sum(float(r["completion_length"]) * G for r in rows)}


def child_trl(a) -> dict:
    import re

    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from aura.text.templates import CHATML  # the same template Aura applies

    t = time.perf_counter()  # like the Aura side: the whole setup (data, model, LoRA) and the training
    tok = AutoTokenizer.from_pretrained(a.model)
    tok.chat_template = CHATML
    rows = [json.loads(ln) for ln in Path(a.data).read_text(encoding="utf-8").splitlines()]
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": r["prompt"]}]} for r in rows])
    pattern, seen = re.compile(FORMAT), {"tokens": 0}

    def format_reward(completions, **_):
        return [1.0 if pattern.fullmatch(c[0]["content"]) else 0.0 for c in completions]

    def count_tokens(completion_ids, **_):  # weight 0: only counts what was sampled
        seen["tokens"] += sum(len(ids) for ids in completion_ids)
        return [0.0] * len(completion_ids)

    args = GRPOConfig(output_dir=a.out, max_steps=a.steps, per_device_train_batch_size=G, num_generations=G,
                      gradient_accumulation_steps=1, max_completion_length=a.max_completion_length, beta=0.04,
                      learning_rate=1e-5, warmup_steps=0, lr_scheduler_type="cosine", use_cpu=True, bf16=False,
                      fp16=False, report_to=[], logging_steps=1, save_strategy="no", loss_type="dapo",
                      reward_weights=[1.0, 0.0], gradient_checkpointing=False, dataloader_num_workers=0)
    peft = LoraConfig(r=LORA["r"], lora_alpha=LORA["alpha"], lora_dropout=0.0, task_type="CAUSAL_LM",
                      target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    trainer = GRPOTrainer(model=a.model, reward_funcs=[format_reward, count_tokens], args=args, train_dataset=data,
                          processing_class=tok, peft_config=peft)
    trainer.train()
    loop = sum(h["step_time"] for h in trainer.state.log_history if "step_time" in h)  # generation + update
    return {"seconds": time.perf_counter() - t, "steps": a.steps, "loop_seconds": loop,
            "completion_tokens": seen["tokens"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--max-completion-length", type=int, default=64)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--child", choices=("aura", "trl"))
    p.add_argument("--model")
    p.add_argument("--data")
    p.add_argument("--out")
    a = p.parse_args()
    if a.child:
        import torch

        torch.set_num_threads(1)
        result = {"aura": child_aura, "trl": child_trl}[a.child](a)
        result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print("RESULT " + json.dumps(result), flush=True)
        return
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        model = versus_trl.build_model(Path(tmp))
        data = write_prompts(Path(tmp) / "prompts.jsonl")
        for repeat in range(a.repeats):
            for side in ("aura", "trl"):
                env = dict(os.environ, AURA_PLAIN="1", AURA_LANG="en", TOKENIZERS_PARALLELISM="false",
                           OMP_NUM_THREADS="1")
                out = Path(tmp) / f"{side}-{repeat}"
                r = subprocess.run([sys.executable, __file__, "--child", side, "--model", str(model), "--data",
                                    str(data), "--out", str(out), "--steps", str(a.steps),
                                    "--max-completion-length", str(a.max_completion_length)],
                                   capture_output=True, text=True, env=env)
                line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
                if r.returncode != 0 or not line:
                    sys.exit(f"{side} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
                run = json.loads(line[-1][7:])
                print(f"run {repeat + 1} {side:5s} {run['seconds']:7.1f} s  peak RSS {run['peak_rss_mb']:6.0f} MB",
                      flush=True)
                if side not in results or run["seconds"] < results[side]["seconds"]:
                    results[side] = run
    for side, r in results.items():
        print(f"{side:5s} {r['steps']:>3} steps  {r['seconds']:7.1f} s  {r['steps'] / r['seconds']:6.3f} steps/s  "
              f"{r['completion_tokens'] / r['seconds']:8.1f} completion tok/s  peak RSS {r['peak_rss_mb']:6.0f} MB  "
              f"training steps alone {r['loop_seconds'] / r['steps']:.2f} s/step")
    au, tr = results["aura"], results["trl"]
    print(f"aura/trl: steps/s x{(au['steps'] / au['seconds']) / (tr['steps'] / tr['seconds']):.2f}  "
          f"completion tok/s x{(au['completion_tokens'] / au['seconds']) / (tr['completion_tokens'] / tr['seconds']):.2f}"
          f"  peak RSS x{au['peak_rss_mb'] / tr['peak_rss_mb']:.2f}  training steps alone (no set-up) "
          f"x{(tr['loop_seconds'] / tr['steps']) / (au['loop_seconds'] / au['steps']):.2f}")


if __name__ == "__main__":
    main()
