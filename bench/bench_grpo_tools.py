"""GRPO with tools learns on a CPU: the shipped calculator (``aura/resources/tools/calculadora.py``), a tiny Llama
and Spanish arithmetic questions, multi-turn rollouts with real sandboxed calls; the reward rises through the
tool.

The model (``tests.tiny_tool_models.build_tool_copier``): a tiny Llama (d 128, 4 layers, a BPE of 800 tokens
that splits digits one by one) given ``--warmup`` supervised steps (mini-batches of 32) on 600 made-up
conversations: a question ``a OP b`` (two-digit numbers, + - *, six phrasings), a call
``calcular("a OP b")`` that copies its numbers, a *made-up* tool output (a random number, never the true
value) and ``Respuesta: R`` that copies it. It learns to call and to copy, never any arithmetic. The GRPO
prompts are ``--prompts`` other questions (no expression of theirs is in the warm-up) whose answer is the true
value: a completion earns ``exact-answer`` (on its final turn) only by a call that copies the question's
numbers and an answer that copies what the real calculator returned. The warm-up leaves both copies
imperfect, so groups have a signal; GRPO (LoRA, G 8, 2 questions per step, each of the 8 questions every 4
steps) should raise the share of right answers. Whether the gain is a skill or these questions' answers, 32
held-out questions (in neither the warm-up nor GRPO) tell: their greedy reward through the calculator (GRPO's
validation reward, ``aura.train.objectives.grpo_eval``) before and after GRPO. The script prints first what
one sandboxed call of the calculator costs (the median of 20, forked from a kept server as in a run, and in a
sandbox of its own: a fresh ``python -I`` process), then the mean
reward, the calls and failed calls per step, the first-k and last-k means, the held-out reward before and
after, and the run's seconds.

    python bench/bench_grpo_tools.py                 # the published run
    python bench/bench_grpo_tools.py --steps 4       # a quick look
    python bench/bench_grpo_tools.py --sandbox-only  # the cost of one call alone
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
CALCULATOR = ROOT / "aura" / "resources" / "tools" / "calculadora.py"


def held_out_reward(model_dir: Path, data: Path, adapter: Path | None = None) -> float:
    """The mean ``exact-answer`` of greedy conversations on the questions of ``data``, through the calculator:
    GRPO's validation reward (``aura.train.objectives.grpo_eval.RewardEvaluator`` with tools)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from aura.data.prompts import encode_prompts, load_prompts
    from aura.data.rewards import RewardSet, parse_reward
    from aura.distributed import DistInfo
    from aura.inference.loading import end_of_turn_ids
    from aura.inference.sampling import SamplingParams
    from aura.inference.tools import ToolBox, load_tools
    from aura.train.objectives.grpo_eval import RewardEvaluator

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter).eval()
    tools = ToolBox(load_tools(CALCULATOR))
    prompts = encode_prompts(load_prompts(data), tok, templated=True, tools=tools.schemas)
    ends = list(end_of_turn_ids(tok))
    sampling = SamplingParams(max_new_tokens=96, stop_ids=tuple(ends), stop_strings=("</tool_call>",))
    evaluator = RewardEvaluator(
        prompts,
        model=model,
        rewards=RewardSet([parse_reward("exact-answer")]),
        tokenizer=tok,
        sampling=sampling,
        batch_size=8,
        interval=1,
        tools=dict(tools=tools, max_turns=2, end_of_turn=ends),
    )
    return evaluator(model, dist=DistInfo())["val_reward"]


def run(
    steps: int, out_dir: Path, *, warmup: int, lr: float, prompts: int, held_out: int
) -> tuple[list[dict], float, float]:
    from aura.train.finetune import finetune
    from aura.train.finetune_config import FinetuneConfig
    from tests.tiny_tool_models import arithmetic_prompts, build_tool_copier

    questions = arithmetic_prompts(prompts + held_out, seed=1234)
    data, unseen = out_dir / "prompts.jsonl", out_dir / "held_out.jsonl"
    for path, part in ((data, questions[:prompts]), (unseen, questions[prompts:])):
        path.write_text("".join(json.dumps({"prompt": q, "answer": v}, ensure_ascii=False) + "\n" for q, _, v in part))
    model = build_tool_copier(out_dir, skip=frozenset(e for _, e, _ in questions), steps=warmup)
    before = held_out_reward(model, unseen)
    cfg = FinetuneConfig(
        output_dir=out_dir / "run",
        base_model=str(model),
        data=str(data),
        objective="grpo",
        method="lora",
        max_steps=steps,
        num_generations=8,
        batch_size=8,
        gradient_accumulation_steps=2,
        max_completion_length=96,
        reward=["exact-answer"],
        tools=str(CALCULATOR),
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
    after = held_out_reward(model, unseen, adapter=out_dir / "run" / "final")
    with open(out_dir / "run" / "training_log.csv", newline="") as f:
        return [r for r in csv.DictReader(f) if r["kind"] == "step"], before, after


def sandbox_ms(n: int = 20) -> tuple[float, float]:
    """The median wall-clock milliseconds of one sandboxed calculator call: in a sandbox of its own (a fresh
    interpreter started for the call, ``sandbox.call``), and forked from a kept sandbox server (what a run's
    ``ToolBox`` does), interleaved."""
    import statistics

    from aura.inference.sandbox import Sandbox, call

    alone, kept = [], []
    with Sandbox() as box:
        assert box.call(str(CALCULATOR), "calcular", {"expresion": "1 + 1"}).ok  # the server started
        for i in range(n):
            for times, run_call in ((alone, call), (kept, box.call)):
                started = time.perf_counter()
                assert run_call(str(CALCULATOR), "calcular", {"expresion": f"{i} + 1"}).ok
                times.append((time.perf_counter() - started) * 1000)
    return statistics.median(alone), statistics.median(kept)


def main() -> None:
    from figures import figure

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--warmup", type=int, default=150, help="supervised steps that teach calling and copying")
    ap.add_argument("--prompts", type=int, default=8, help="GRPO questions (2 per step, every one each 4 steps)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--held-out", type=int, default=32, help="questions in neither the warm-up nor GRPO")
    ap.add_argument("--sandbox-only", action="store_true", help="only the cost of one sandboxed call")
    args = ap.parse_args()
    alone, kept = sandbox_ms()
    figure("grpo_tools.sandbox_call_ms", f"{kept:.1f} ms forked from a kept server, {alone:.1f} ms alone")
    figure("grpo_tools.sandbox_kept_vs_alone", f"{alone / kept:.1f}x faster")
    if args.sandbox_only:
        return
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        rows, before, after = run(
            args.steps, Path(tmp), warmup=args.warmup, lr=args.lr, prompts=args.prompts, held_out=args.held_out
        )
    seconds = time.perf_counter() - started
    k = max(1, min(8, len(rows) // 3))

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
    figure("grpo_tools.held_out_reward.before", f"{before:.3f}")
    figure("grpo_tools.held_out_reward.after", f"{after:.3f}")
    print(f"{len(rows)} steps in {seconds:.0f} s (tiny model build and warm-up included)")


if __name__ == "__main__":
    main()

# reproduce:
# reproduce: --sandbox-only
# reproduce-quick: --steps 2 --warmup 10 --prompts 4 --held-out 4
