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
* the same two in CPU seconds of the child and its ended subprocesses (``os.times`` at its exit and at each
  step end: Aura's step log, TRL's ``on_step_end``): on a machine shared with other jobs a process waits for a
  core for a share of its wall time that moves with their load, and its CPU time much less.

Completion tokens are counted from what each side sampled (Aura: its training_log.csv; TRL: a zero-weight
reward that sees every completion's ids); memory is the child's peak RSS.

    python bench/versus_trl_grpo.py                 # 12 steps, G 8, 64-token completions
    python bench/versus_trl_grpo.py --steps 20 --max-completion-length 128
    python bench/versus_trl_grpo.py --repeats 3     # 3 runs a side, alternating which side goes first

``--tools``: multi-turn GRPO with tools on both sides. The tiny Llama of ``bench/bench_grpo_tools.py``
(``tests.tiny_tool_models.build_tool_copier``: d 128, 4 layers, a digit-by-digit BPE of 800 tokens, a
Qwen-style template that writes ``<tool_call>`` JSON blocks), given ``--warmup`` supervised steps on other
questions so that it calls the calculator and copies its output, is built once by the parent before either
side starts; 64 Spanish arithmetic questions with their true values; the shipped calculator
(``aura/resources/tools/calculadora.py``); at most 2 tool turns per completion (Aura's ``--max-tool-turns``,
TRL's ``max_tool_calling_iterations``), 96-token completions (tool turns included); the reward is
``exact-answer`` on the final turn (TRL: a function that applies Aura's ``final_answer`` and
``answers_match`` to the last assistant message). **The calls are not run the same way, by design**: Aura
runs every call in a fresh sandboxed ``python -I`` subprocess (time, memory, file and network limits), TRL
calls the same Python function in its own process, as TRL runs tools; so each of Aura's calls costs tens of
milliseconds more. Both sides count their calls (Aura: its log's ``tool_calls``; TRL: a wrapper around the
function) and the wall seconds spent in them (Aura: its ``ToolBox.run``, one turn's calls; TRL: the
wrapper), printed with their share of the run; CPU seconds include the ended subprocesses' (Aura's calls).

    python bench/versus_trl_grpo.py --tools --repeats 3

On a shared machine the other jobs' load changes from one minute to the next: ``--repeats`` alternates the
order of the two sides from one repeat to the next and keeps each side's fastest figures (both sample the
same number of completions every time); every run's figures and the load average are printed.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))
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
CALCULATOR = ROOT / "aura" / "resources" / "tools" / "calculadora.py"
MAX_TOOL_TURNS = 2


def write_prompts(path: Path, n: int = 64) -> Path:
    rows = [
        {"prompt": PROMPTS[i % len(PROMPTS)].format(a=i + 2, b=3 * i + 1, c="abcdefghij"[i % 10])} for i in range(n)
    ]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def cpu_now() -> float:
    """CPU seconds of this process and of its ended subprocesses (Aura's sandboxed tool calls)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def tool_setup(root: Path, *, warmup: int, n: int = 64) -> tuple[Path, Path]:
    """--tools: (model, prompts). ``n`` Spanish arithmetic questions with their true values, and the tiny
    Llama of ``bench/bench_grpo_tools.py`` (``tests.tiny_tool_models.build_tool_copier``: ``warmup``
    supervised steps on other questions teach it to call ``calcular`` and copy its output), built once here,
    before either side starts."""
    from tests.tiny_tool_models import arithmetic_prompts, build_tool_copier

    questions = arithmetic_prompts(n, seed=1234)
    data = root / "tool-prompts.jsonl"
    rows = [json.dumps({"prompt": q, "answer": v}, ensure_ascii=False) + "\n" for q, _, v in questions]
    data.write_text("".join(rows), encoding="utf-8")
    model = build_tool_copier(root / "tool-model", skip=frozenset(e for _, e, _ in questions), steps=warmup)
    return model, data


def aura_argv(a) -> list[str]:
    """The ``aura finetune --objective grpo`` command line of Aura's side."""
    if a.tools:  # the calculator, run the way Aura runs every tool: a fresh sandboxed subprocess per call
        mode = ["--reward", "exact-answer", "--tools", CALCULATOR, "--max-tool-turns", MAX_TOOL_TURNS]
    else:
        mode = ["--reward", "format", "--format-pattern", FORMAT, "--template", "chatml"]
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
        *mode,
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
        "--loss-type",
        "dapo",
    ]
    return [str(x) for x in argv]


def child_aura(a) -> dict:
    """``aura finetune --objective grpo ...`` through the program's own entry point (what the ``aura``
    command runs, its quick exit included), in this process so that each step's CPU time can be read."""
    from aura.cli import entry
    from aura.inference.tools import ToolBox
    from aura.train.run.metrics import TrainMetrics

    cpu_ends: list[float] = []
    tool_ends: list[float] = []
    log_step, run_tools, in_tools = TrainMetrics.log_step, ToolBox.run, [0.0]

    def timed_log_step(self, *args, **kwargs):  # called once per step (log_interval 1), after the update
        cpu_ends.append(cpu_now())
        tool_ends.append(in_tools[0])
        return log_step(self, *args, **kwargs)

    def timed_run(self, calls):  # one tool turn's calls (run in parallel threads): their wall seconds
        started = time.perf_counter()
        try:
            return run_tools(self, calls)
        finally:
            in_tools[0] += time.perf_counter() - started

    TrainMetrics.log_step, ToolBox.run = timed_log_step, timed_run
    assert entry(aura_argv(a)) == 0
    with open(Path(a.out) / "training_log.csv") as f:
        rows = [r for r in csv.DictReader(f) if r["kind"] == "step"]
    return {
        "steps": len(rows),
        "step_ends": [float(r["seconds"]) for r in rows],
        "cpu_step_ends": cpu_ends,
        "completion_tokens": sum(float(r["completion_length"]) * G for r in rows),
        "tool_calls": sum(float(r.get("tool_calls") or 0) for r in rows),
        "tool_seconds": in_tools[0],
        "tool_step_ends": tool_ends,
        "reward": sum(float(r["reward"]) for r in rows) / max(len(rows), 1),
    }


def trl_tools_side(tok) -> tuple[list, list, dict]:
    """--tools, TRL's side: (tools, reward functions, tallies). The shipped calculator's own function, called
    in-process as TRL calls a tool, wrapped to count its calls and their seconds; the reward is Aura's
    ``exact-answer`` (its ``final_answer`` and ``answers_match``) on the last assistant message, the final turn
    Aura's reward reads. TRL parses tool calls with a response template it picks for the chat templates it
    knows; the tiny model's template writes Qwen's ``<tool_call>`` JSON blocks, so TRL's Qwen template is
    set, and its end of turn ``<|im_end|>`` is made the EOS, as in Qwen's tokenizers (TRL generates a turn
    until EOS; Aura stops at the template's end of turn or ``</tool_call>``)."""
    import functools

    from trl.chat_template_utils import qwen3_template

    from aura.data.rewards import answers_match, final_answer
    from aura.resources.tools.calculadora import calcular

    tok.response_template, tok.eos_token = qwen3_template, "<|im_end|>"
    tally = {"tool_calls": 0, "tool_seconds": 0.0, "rewards": []}

    @functools.wraps(calcular)
    def counted(*args, **kwargs):
        tally["tool_calls"] += 1
        started = time.perf_counter()
        try:
            return calcular(*args, **kwargs)
        finally:
            tally["tool_seconds"] += time.perf_counter() - started

    def exact_answer(completions, answer, **_):
        finals = [next((m["content"] or "" for m in reversed(c) if m["role"] == "assistant"), "") for c in completions]
        scores = [1.0 if answers_match(final_answer(f), g) else 0.0 for f, g in zip(finals, answer)]
        tally["rewards"].append(sum(scores) / len(scores))
        return scores

    return [counted], [exact_answer], tally


def trl_config(a):
    """(GRPOConfig, LoraConfig) of TRL's side: Aura's settings, fp32 (TRL defaults to bf16 autocast)."""
    from peft import LoraConfig
    from trl import GRPOConfig

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
        max_tool_calling_iterations=MAX_TOOL_TURNS if a.tools else None,
    )
    peft = LoraConfig(
        r=LORA["r"],
        lora_alpha=LORA["alpha"],
        lora_dropout=0.0,
        task_type="CAUSAL_LM",
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    )
    return args, peft


def child_trl(a) -> dict:
    import re

    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOTrainer

    from aura.text.templates import CHATML  # the same template Aura applies

    tok = AutoTokenizer.from_pretrained(a.model)
    rows = [json.loads(ln) for ln in Path(a.data).read_text(encoding="utf-8").splitlines()]
    data = Dataset.from_list(
        [
            {"prompt": [{"role": "user", "content": r["prompt"]}], **({"answer": r["answer"]} if a.tools else {})}
            for r in rows
        ]
    )
    pattern, seen = re.compile(FORMAT), {"tokens": 0}

    def format_reward(completions, **_):
        return [1.0 if pattern.fullmatch(c[0]["content"]) else 0.0 for c in completions]

    def count_tokens(completion_ids, **_):  # weight 0: only counts what was sampled
        seen["tokens"] += sum(len(ids) for ids in completion_ids)
        return [0.0] * len(completion_ids)

    if a.tools:  # the tokenizer's own template (the tool-capable one Aura renders too)
        tools, rewards, tally = trl_tools_side(tok)
    else:
        tok.chat_template = CHATML
        tools, rewards, tally = None, [format_reward], {}
    args, peft = trl_config(a)
    step_ends: list[float] = []
    cpu_ends: list[float] = []

    tool_ends: list[float] = []

    class StepClock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            step_ends.append(time.perf_counter())
            cpu_ends.append(cpu_now())
            tool_ends.append(tally.get("tool_seconds", 0.0))

    trainer = GRPOTrainer(
        model=a.model,
        reward_funcs=[*rewards, count_tokens],
        tools=tools,
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
        "tool_calls": tally.get("tool_calls", 0),
        "tool_seconds": tally.get("tool_seconds", 0.0),
        "tool_step_ends": tool_ends,
        "reward": sum(tally.get("rewards", [])) / max(len(tally.get("rewards", [])), 1),
    }


def run_child(a, side: str, *, model: Path, data: Path, out: Path) -> dict:
    """One side's run in a fresh interpreter with one thread: its RESULT, timed by this process."""
    env = dict(os.environ, AURA_PLAIN="1", AURA_LANG="en", TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1")
    argv = ["--child", side, "--model", model, "--data", data, "--out", out, "--steps", a.steps]
    argv += ["--max-completion-length", a.max_completion_length, *(["--tools"] if a.tools else [])]
    t = time.perf_counter()
    r = subprocess.run([sys.executable, __file__, *map(str, argv)], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    if r.returncode != 0 or not line:
        sys.exit(f"{side} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    run = json.loads(line[-1][7:])
    ends, cpu, calls = run["step_ends"], run["cpu_step_ends"], run.get("tool_step_ends") or [0.0]
    run.update(
        seconds=wall,
        step_s=(ends[-1] - ends[0]) / max(len(ends) - 1, 1),
        cpu_step_s=(cpu[-1] - cpu[0]) / max(len(cpu) - 1, 1),
        calls_step_s=(calls[-1] - calls[0]) / max(len(calls) - 1, 1),  # the per-step window's time in calls
    )
    return run


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--max-completion-length", type=int, help="default: 64; 96 with --tools")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--tools", action="store_true", help="multi-turn GRPO with the calculator on both sides")
    p.add_argument("--warmup", type=int, default=150, help="--tools: supervised steps that teach the tool calls")
    p.add_argument("--child", choices=("aura", "trl"))
    p.add_argument("--model")
    p.add_argument("--data")
    p.add_argument("--out")
    a = p.parse_args()
    if a.max_completion_length is None:
        a.max_completion_length = 96 if a.tools else 64
    if a.child:
        import torch

        torch.set_num_threads(1)
        result = {"aura": child_aura, "trl": child_trl}[a.child](a)
        result["peak_rss_mb"], result["cpu_seconds"] = versus_trl.peak_rss_mb(), cpu_now()
        print("RESULT " + json.dumps(result), flush=True)
        return
    runs: dict[str, list[dict]] = {"aura": [], "trl": []}
    print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        if a.tools:
            model, data = tool_setup(Path(tmp), warmup=a.warmup)
        else:
            model, data = versus_trl.build_model(Path(tmp)), write_prompts(Path(tmp) / "prompts.jsonl")
        for repeat in range(a.repeats):
            for side in ("aura", "trl") if repeat % 2 == 0 else ("trl", "aura"):
                run = run_child(a, side, model=model, data=data, out=Path(tmp) / f"{side}-{repeat}")
                runs[side].append(run)
                tools = (
                    f"  {run['tool_calls'] / run['steps']:.1f} calls/step ({run['tool_seconds']:.1f} s in calls)"
                    if a.tools
                    else ""
                )
                print(
                    f"run {repeat + 1} {side:5s} whole run {run['seconds']:6.1f} s ({run['cpu_seconds']:5.1f} CPU s)  "
                    f"per step {run['step_s']:.3f} s ({run['cpu_step_s']:.3f} CPU s)  "
                    f"{run['completion_tokens']:6.0f} completion tokens  peak RSS {run['peak_rss_mb']:5.0f} MB  "
                    f"load {os.getloadavg()[0]:.2f}{tools}",
                    flush=True,
                )
    report(runs, tools=a.tools)


def report(runs: dict[str, list[dict]], *, tools: bool) -> None:
    """Each side's fastest figures over the repeats, the ratios, and the FIGURE lines."""
    keys = ("seconds", "step_s", "cpu_seconds", "cpu_step_s")
    best = {
        side: {
            **{k: min(r[k] for r in rs) for k in keys},
            "steps": rs[0]["steps"],
            "peak_rss_mb": max(r["peak_rss_mb"] for r in rs),
            **{k: min(rs, key=lambda r: r["seconds"])[k] for k in ("completion_tokens", "tool_calls", "tool_seconds")},
            "reward": sum(r["reward"] for r in rs) / len(rs),
            "calls_step_s": min(rs, key=lambda r: r["step_s"])["calls_step_s"],  # of the fastest per-step run
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
        if tools:
            print(
                f"{side:5s} tool calls {r['tool_calls']:.0f} = {r['tool_calls'] / r['steps']:.2f}/step, "
                f"{r['tool_seconds']:.2f} s in calls = {100 * r['tool_seconds'] / r['seconds']:.1f}% of the run, "
                f"{1000 * r['tool_seconds'] / max(r['tool_calls'], 1):.1f} ms/call, "
                f"{r['calls_step_s']:.3f} s/step in calls (steps 2-{r['steps']}); mean reward {r['reward']:.3f}"
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

    head = "grpo_tools_vs_trl" if tools else "grpo_vs_trl"
    figure(f"{head}.steps_per_s.whole_process", ratio((au["steps"] / au["seconds"]) / (tr["steps"] / tr["seconds"])))
    figure(f"{head}.steps_per_s.steady", ratio(tr["step_s"] / au["step_s"]))
    figure(f"{head}.completion_tokens_per_s.whole_process", ratio(tok_ratio))
    figure(f"{head}.peak_rss", ratio(au["peak_rss_mb"] / tr["peak_rss_mb"]))
    if tools:  # CPU seconds: less moved by the other jobs' load than wall seconds
        figure(f"{head}.cpu_per_step", ratio(tr["cpu_step_s"] / au["cpu_step_s"]))
        figure(f"{head}.cpu_whole_run", ratio(tr["cpu_seconds"] / au["cpu_seconds"]))
        for side, r in best.items():
            figure(f"{head}.calls_per_step.{side}", f"{r['tool_calls'] / r['steps']:.2f}")
        figure(f"{head}.aura_share_in_calls", f"{100 * au['tool_seconds'] / au['seconds']:.1f}%")
        # each side's step without its time in tool calls (Aura's sandboxed calls cost tens of ms, TRL's µs)
        figure(
            f"{head}.steps_per_s.steady_without_calls",
            ratio((tr["step_s"] - tr["calls_step_s"]) / (au["step_s"] - au["calls_step_s"])),
        )


# reproduce: --repeats 3
# reproduce: --tools --repeats 2
# reproduce-quick: --steps 2 --max-completion-length 8
# reproduce-needs: module:trl
# reproduce-quick-needs: module:trl

if __name__ == "__main__":
    main()
