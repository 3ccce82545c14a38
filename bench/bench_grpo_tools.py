"""GRPO with tools learns on a CPU: the shipped calculator (``aura/resources/tools/calculadora.py``), a tiny Llama
and Spanish math prompts, multi-turn rollouts with real sandboxed calls.

The model is a random tiny Llama given a few supervised steps (``tests.tiny_models.build_tool_caller`` with
``copies``): call ``calcular("12 + 3")``, read a made-up output (a random number from 20 to 99, never 15) and
answer by copying it. Every prompt's answer is 15, which the model never saw as an answer: it is reached by
making a well-formed call (the real calculator returns 15) and copying its output; the reward is
``exact-answer`` on the final turn. The hope: GRPO raises the share of conversations that call the tool well
and answer with its output. Measured so far (docs/benchmarks.md): the calls are made and run (most
completions call, a few calls fail), but the tiny model does not learn to copy the tool's output within its
warm-up, so no completion earns the reward and GRPO has no signal; a run whose reward rises through the tool
is still to be found (a longer warm-up, or a real small model). The script prints the mean
reward and the tool calls per step of the first and last steps, the calls and failed calls, the run's seconds,
and first what one sandboxed call of the calculator costs (the median of 20: a fresh ``python -I`` process).

    python bench/bench_grpo_tools.py                 # 8 steps (the published run)
    python bench/bench_grpo_tools.py --steps 4       # a quick look
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def run(steps: int, out_dir: Path, *, warmup: int, lr: float, prompts: int, copies: int) -> list[dict]:
    from aura.train.finetune import finetune
    from aura.train.finetune_config import FinetuneConfig
    from tests.tiny_models import build_tool_caller

    rows = [json.loads(ln) for ln in (ROOT / "aura/resources/math_es/train.jsonl").read_text().splitlines()[:prompts]]
    prompts = [r["prompt"][:60] for r in rows]
    data = out_dir / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": p, "answer": "15"}, ensure_ascii=False) + "\n" for p in prompts))
    model = build_tool_caller(out_dir, prompts, steps=warmup, copies=copies)
    cfg = FinetuneConfig(
        output_dir=out_dir / "run",
        base_model=str(model),
        data=str(data),
        objective="grpo",
        method="lora",
        max_steps=steps,
        num_generations=4,
        batch_size=4,
        gradient_accumulation_steps=2,
        max_completion_length=128,
        reward=["exact-answer"],
        tools=str(ROOT / "aura/resources/tools/calculadora.py"),
        max_tool_turns=2,
        lora_r=16,
        lora_dropout=0.0,
        learning_rate=lr,
        min_lr=lr,
        warmup_steps=0,
        val_fraction=0.0,
        save_steps=0,
        log_interval=1,
        precision="fp32",
        seed=0,
    )
    assert finetune(cfg) == 0
    with open(out_dir / "run" / "training_log.csv", newline="") as f:
        return [r for r in csv.DictReader(f) if r["kind"] == "step"]


def sandbox_ms(n: int = 20) -> float:
    """The median wall-clock milliseconds of one sandboxed calculator call."""
    import statistics

    from aura.inference.sandbox import call

    times = []
    for i in range(n):
        started = time.perf_counter()
        assert call(str(ROOT / "aura/resources/tools/calculadora.py"), "calcular", {"expresion": f"{i} + 1"}).ok
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    from figures import figure

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=40, help="supervised steps that teach calling and copying")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--copies", type=int, default=3, help="made-up tool outputs per prompt in the warm-up")
    ap.add_argument("--lr", type=float, default=2e-3)
    args = ap.parse_args()
    figure("grpo_tools.sandbox_call_ms", f"{sandbox_ms():.0f} ms")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        rows = run(args.steps, Path(tmp), warmup=args.warmup, lr=args.lr, prompts=args.prompts, copies=args.copies)
    seconds = time.perf_counter() - started
    k = max(1, min(6, len(rows) // 3))

    def mean(key: str, part: list[dict]) -> float:
        return sum(float(r[key]) for r in part) / len(part)

    print(f"{'step':>4} {'reward':>7} {'calls':>6} {'failed':>6} {'length':>7}")
    for r in rows:
        print(
            f"{r['step']:>4} {float(r['reward']):7.3f} {float(r['tool_calls']):6.0f} "
            f"{float(r['tool_failures']):6.0f} {float(r['completion_length']):7.1f}"
        )
    figure(f"grpo_tools.reward_mean.first_{k}_steps", f"{mean('reward', rows[:k]):.3f}")
    figure(f"grpo_tools.reward_mean.last_{k}_steps", f"{mean('reward', rows[-k:]):.3f}")
    calls = sum(float(r["tool_calls"]) for r in rows)
    failed = sum(float(r["tool_failures"]) for r in rows)
    figure("grpo_tools.tool_calls", f"{calls:.0f} ({failed:.0f} failed)")
    figure(f"grpo_tools.tool_calls.first_{k}_steps", f"{mean('tool_calls', rows[:k]):.2f}")
    figure(f"grpo_tools.tool_calls.last_{k}_steps", f"{mean('tool_calls', rows[-k:]):.2f}")
    print(f"{len(rows)} steps in {seconds:.0f} s (tiny model build and warm-up included)")


if __name__ == "__main__":
    main()

# reproduce:
# reproduce-quick: --steps 3 --warmup 8 --prompts 4 --copies 1
