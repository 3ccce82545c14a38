"""GRPO, Aura vs TRL GRPOTrainer on this CPU: the same tiny Llama (bench/versus_trl.py's: 4 layers, hidden 256,
vocab 2000), prompts, G, completion length, LoRA (r 16 on every projection, no dropout), beta, precision (fp32)
and reward, each side in its own subprocess with one thread.

Both sides are timed the same way:

* whole run: the child process's wall time, measured by this parent from its start to its exit
  (interpreter, imports, data, model, LoRA set-up, every step, the final save): what a user waits for;
* per step: the seconds between the end of the first step and the end of the last, over the steps in
  between (rollout, reference pass, loss, backward, optimizer step and logging; the first step, which
  pays one-time warm-ups, is left out on both sides). Aura: the training log's elapsed seconds at each
  step; TRL: a callback's clock at each ``on_step_end``;
* the same two in CPU seconds of the child (``getrusage`` at its exit; ``time.process_time`` at each step
  end: Aura's step log, TRL's ``on_step_end``): on a machine shared with other jobs a process waits for a
  core for a share of its wall time that moves with their load, and its CPU time much less.

Completion tokens are counted from what each side sampled (Aura: its training_log.csv; TRL: a zero-weight
reward that sees every completion's ids); memory is the child's peak RSS.

    python bench/versus_trl_grpo.py                 # 12 steps, G 8, 64-token completions
    python bench/versus_trl_grpo.py --steps 20 --max-completion-length 128
    python bench/versus_trl_grpo.py --repeats 3     # 3 runs a side, alternating which side goes first

On a shared machine the other jobs' load changes from one minute to the next: ``--repeats`` alternates the
order of the two sides from one repeat to the next and keeps each side's fastest figures (both sample the
same number of completions every time); every run's figures and the load average are printed.
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

PROMPTS = [
    "¿Cuánto es {a} más {b}?",
    "Escribe el número {a} en letras.",
    "¿Qué número va después del {a}?",
    "Suma {a} y {b} y explica la cuenta.",
    "Di una palabra que empiece por la letra {c}.",
]
G, LORA = 8, dict(r=16, alpha=32)
FORMAT = r"(?s).*\d.*"  # a completion that holds a digit


def write_prompts(path: Path, n: int = 64) -> Path:
    rows = [
        {"prompt": PROMPTS[i % len(PROMPTS)].format(a=i + 2, b=3 * i + 1, c="abcdefghij"[i % 10])} for i in range(n)
    ]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def child_aura(a) -> dict:
    """``aura finetune --objective grpo ...`` through the program's own entry point (what the ``aura``
    command runs, its quick exit included), in this process so that each step's CPU time can be read."""
    from aura.cli import entry
    from aura.train.run.metrics import TrainMetrics

    argv = [
        "finetune",
        "--objective",
        "grpo",
        "--method",
        "lora",
        "--base-model",
        a.model,
        "--data",
        a.data,
        "--output-dir",
        a.out,
        "--max-steps",
        a.steps,
        "--num-generations",
        G,
        "--batch-size",
        G,
        "--gradient-accumulation-steps",
        1,
        "--max-completion-length",
        a.max_completion_length,
        "--reward",
        "format",
        "--format-pattern",
        FORMAT,
        "--beta",
        0.04,
        "--lora-r",
        LORA["r"],
        "--lora-alpha",
        LORA["alpha"],
        "--lora-dropout",
        0.0,
        "--precision",
        "fp32",
        "--lr",
        1e-5,
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
        "--loss-type",
        "dapo",
    ]
    cpu_ends: list[float] = []
    log_step = TrainMetrics.log_step

    def timed_log_step(self, *args, **kwargs):  # called once per step (log_interval 1), after the update
        cpu_ends.append(time.process_time())
        return log_step(self, *args, **kwargs)

    TrainMetrics.log_step = timed_log_step
    assert entry([str(x) for x in argv]) == 0
    with open(Path(a.out) / "training_log.csv") as f:
        rows = [r for r in csv.DictReader(f) if r["kind"] == "step"]
    return {
        "steps": len(rows),
        "step_ends": [float(r["seconds"]) for r in rows],
        "cpu_step_ends": cpu_ends,
        "completion_tokens": sum(float(r["completion_length"]) * G for r in rows),
    }


def child_trl(a) -> dict:
    import re

    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from aura.text.templates import CHATML  # the same template Aura applies

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

    args = GRPOConfig(
        output_dir=a.out,
        max_steps=a.steps,
        per_device_train_batch_size=G,
        num_generations=G,
        gradient_accumulation_steps=1,
        max_completion_length=a.max_completion_length,
        beta=0.04,
        learning_rate=1e-5,
        warmup_steps=0,
        lr_scheduler_type="cosine",
        use_cpu=True,
        bf16=False,
        fp16=False,
        report_to=[],
        logging_steps=1,
        save_strategy="no",
        loss_type="dapo",
        reward_weights=[1.0, 0.0],
        gradient_checkpointing=False,
        dataloader_num_workers=0,
    )
    peft = LoraConfig(
        r=LORA["r"],
        lora_alpha=LORA["alpha"],
        lora_dropout=0.0,
        task_type="CAUSAL_LM",
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    )
    step_ends: list[float] = []
    cpu_ends: list[float] = []

    class StepClock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            step_ends.append(time.perf_counter())
            cpu_ends.append(time.process_time())

    trainer = GRPOTrainer(
        model=a.model,
        reward_funcs=[format_reward, count_tokens],
        args=args,
        train_dataset=data,
        processing_class=tok,
        peft_config=peft,
        callbacks=[StepClock()],
    )
    trainer.train()
    return {
        "steps": len(step_ends),
        "step_ends": step_ends,
        "cpu_step_ends": cpu_ends,
        "completion_tokens": seen["tokens"],
    }


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
        usage = resource.getrusage(resource.RUSAGE_SELF)
        result["peak_rss_mb"], result["cpu_seconds"] = usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime
        print("RESULT " + json.dumps(result), flush=True)
        return
    runs: dict[str, list[dict]] = {"aura": [], "trl": []}
    print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        model = versus_trl.build_model(Path(tmp))
        data = write_prompts(Path(tmp) / "prompts.jsonl")
        for repeat in range(a.repeats):
            for side in ("aura", "trl") if repeat % 2 == 0 else ("trl", "aura"):
                env = dict(
                    os.environ, AURA_PLAIN="1", AURA_LANG="en", TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1"
                )
                out = Path(tmp) / f"{side}-{repeat}"
                t = time.perf_counter()
                r = subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--child",
                        side,
                        "--model",
                        str(model),
                        "--data",
                        str(data),
                        "--out",
                        str(out),
                        "--steps",
                        str(a.steps),
                        "--max-completion-length",
                        str(a.max_completion_length),
                    ],
                    capture_output=True,
                    text=True,
                    env=env,
                )
                wall = time.perf_counter() - t
                line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
                if r.returncode != 0 or not line:
                    sys.exit(f"{side} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
                run = json.loads(line[-1][7:])
                ends, cpu = run["step_ends"], run["cpu_step_ends"]
                run.update(
                    seconds=wall,
                    step_s=(ends[-1] - ends[0]) / max(len(ends) - 1, 1),
                    cpu_step_s=(cpu[-1] - cpu[0]) / max(len(cpu) - 1, 1),
                )
                runs[side].append(run)
                print(
                    f"run {repeat + 1} {side:5s} whole run {wall:6.1f} s ({run['cpu_seconds']:5.1f} CPU s)  "
                    f"per step {run['step_s']:.3f} s ({run['cpu_step_s']:.3f} CPU s)  "
                    f"{run['completion_tokens']:6.0f} completion tokens  peak RSS {run['peak_rss_mb']:5.0f} MB  "
                    f"load {os.getloadavg()[0]:.2f}",
                    flush=True,
                )
    keys = ("seconds", "step_s", "cpu_seconds", "cpu_step_s")
    best = {
        side: {
            **{k: min(r[k] for r in rs) for k in keys},
            "steps": rs[0]["steps"],
            "peak_rss_mb": max(r["peak_rss_mb"] for r in rs),
            "completion_tokens": min(rs, key=lambda r: r["seconds"])["completion_tokens"],
        }
        for side, rs in runs.items()
    }
    for side, r in best.items():
        print(
            f"{side:5s} {r['steps']:>3} steps  whole run {r['seconds']:6.1f} s = "
            f"{r['steps'] / r['seconds']:.3f} steps/s {r['completion_tokens'] / r['seconds']:7.1f} completion tok/s  "
            f"per step {r['step_s']:.3f} s  "
            f"CPU: whole run {r['cpu_seconds']:.1f} s, per step {r['cpu_step_s']:.3f} s  "
            f"peak RSS {r['peak_rss_mb']:5.0f} MB"
        )
    au, tr = best["aura"], best["trl"]
    tok_ratio = (au["completion_tokens"] / au["seconds"]) / (tr["completion_tokens"] / tr["seconds"])
    print(
        f"aura/trl: whole-run steps/s x{(au['steps'] / au['seconds']) / (tr['steps'] / tr['seconds']):.2f}  "
        f"completion tok/s x{tok_ratio:.2f}"
        f"  per-step speed x{tr['step_s'] / au['step_s']:.2f}  CPU time: whole run "
        f"x{tr['cpu_seconds'] / au['cpu_seconds']:.2f}, per step x{tr['cpu_step_s'] / au['cpu_step_s']:.2f}  "
        f"peak RSS x{au['peak_rss_mb'] / tr['peak_rss_mb']:.2f}"
    )
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    from figures import figure, ratio

    figure(
        "grpo_vs_trl.steps_per_s.whole_process", ratio((au["steps"] / au["seconds"]) / (tr["steps"] / tr["seconds"]))
    )
    figure("grpo_vs_trl.steps_per_s.steady", ratio(tr["step_s"] / au["step_s"]))
    figure("grpo_vs_trl.completion_tokens_per_s.whole_process", ratio(tok_ratio))
    figure("grpo_vs_trl.peak_rss", ratio(au["peak_rss_mb"] / tr["peak_rss_mb"]))


# reproduce: --repeats 3
# reproduce-quick: --steps 2 --max-completion-length 8
# reproduce-needs: module:trl
# reproduce-quick-needs: module:trl

if __name__ == "__main__":
    main()
