"""The harness shared by the benchmarks that race Aura against TRL (bench_finetune.py, bench_dpo.py,
bench_simpo.py): one tiny Llama built here, each side in its own subprocess (``--child aura|trl``), tokens/s
and the child's peak resident set size over alternated repeats with the Aura/TRL ratios (``main``), or steady
state and whole command over alternated repeats (``alternate``); both print ``FIGURE`` lines."""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def peak_rss_mb() -> float:
    """This process's peak RSS since its ``exec``, in MB: ``VmHWM`` (``getrusage``'s ``ru_maxrss`` keeps, across
    ``exec``, the peak of the parent that forked it: a child would report at least the size of the parent that
    built the models)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def build_model(root: Path) -> Path:
    """A 4-layer Llama (hidden 256, vocab 2000) with its own byte-level BPE, as a Hugging Face directory."""
    from tests.tiny_models import build_llama, train_tokenizer

    tok = train_tokenizer(root / "tok", vocab_size=2000)
    return build_llama(root / "llama", tok, hidden=256, layers=4, heads=4, kv_heads=2, intermediate=768, ctx=512)


def train_aura(out: str, **flags) -> dict:
    """The Aura side: ``aura finetune`` with ``flags`` (FinetuneConfig fields) into ``out``; wall seconds of
    the whole command and the padded tokens of the steps it took (its training_log.csv)."""
    import csv

    # what the TRL children import before their clock starts (torch, transformers' auto classes, peft), imported
    # here too, so that both clocks time the same phase: data, model, training, saving. Until 2026-12-03 Aura's
    # clock also timed these imports (several seconds on a 2-core VM) and TRL's did not.
    import torch  # noqa: F401
    from peft import LoraConfig  # noqa: F401
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: F401

    from aura.train.finetune import finetune
    from aura.train.finetune_config import FinetuneConfig

    t = time.perf_counter()
    assert finetune(FinetuneConfig(output_dir=Path(out), **flags)) == 0
    seconds = time.perf_counter() - t
    with open(Path(out) / "training_log.csv") as f:
        tokens = max(int(r["tokens"]) for r in csv.DictReader(f))
    return {"seconds": seconds, "tokens": tokens}


def count_tokens_the_same_way() -> dict:
    """One count for both sides: every token id that enters the model's input embedding (vocab 2000) while
    the model is in training mode (a global forward pre-hook, installed in the child before either library
    builds anything). Padding counts as each library pads; forwards under ``eval()`` do not count."""
    import torch

    counter = {"n": 0}

    def hook(module, args):
        if isinstance(module, torch.nn.Embedding) and module.training and module.num_embeddings == 2000 and args:
            counter["n"] += args[0].numel()

    torch.nn.modules.module.register_module_forward_pre_hook(hook)
    return counter


TRAINED = {"n": 0}  # tokens of the trained forwards so far (``count_trained_tokens``), read at each step's end


def count_trained_tokens() -> None:
    """Count into ``TRAINED`` every token id that enters the 2000-row input embedding with gradients on: the
    trained (student) forwards only, on both sides, padding as each side pads; a sampler's or a frozen
    teacher's forward (no gradients) does not count. Installed in the child before either library builds
    anything."""
    import torch

    def hook(module, args):
        if (
            isinstance(module, torch.nn.Embedding)
            and module.num_embeddings == 2000
            and args
            and torch.is_grad_enabled()
        ):
            TRAINED["n"] += args[0].numel()

    torch.nn.modules.module.register_module_forward_pre_hook(hook)


def step_end() -> tuple[float, float, int]:
    """(wall clock, CPU clock, trained tokens so far): what a child records at the end of each optimizer step."""
    import time

    return time.perf_counter(), time.process_time(), TRAINED["n"]


def main(script: str, children: dict[str, Callable[[argparse.Namespace], dict]], *, steps: int, name: str = "") -> None:
    """``children[side](args)`` trains one side and returns {"seconds", "tokens"} (its own count); run as
    ``--child SIDE`` it prints them with the peak RSS and the shared token count, run plainly it starts the
    sides ``--repeats`` times, alternating their order, prints every run and each side's fastest, and the
    ratios of the fastest (``FIGURE`` lines, ``name`` their key's prefix)."""
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=steps)
    p.add_argument("--max-length", type=int, default=256)
    p.add_argument("--repeats", type=int, default=1, help="runs per side, alternating which side goes first")
    p.add_argument("--child", choices=list(children))
    p.add_argument("--model")
    p.add_argument("--out")
    a = p.parse_args()
    if a.child:
        counter = count_tokens_the_same_way()
        result = children[a.child](a)
        result["own_tokens"] = result.pop("tokens")
        result["tokens"] = counter["n"]
        result["peak_rss_mb"] = peak_rss_mb()
        print("RESULT " + json.dumps(result), flush=True)
        return
    from figures import figure, ratio

    sides = list(children)
    print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
    runs: dict[str, list[dict]] = {side: [] for side in sides}
    with tempfile.TemporaryDirectory() as tmp:
        model = build_model(Path(tmp))
        for repeat in range(a.repeats):
            for side in sides if repeat % 2 == 0 else sides[::-1]:
                env = dict(os.environ, AURA_PLAIN="1", AURA_LANG="en", TOKENIZERS_PARALLELISM="false")
                out = Path(tmp) / f"{side}-{repeat}"
                started = time.perf_counter()
                r = subprocess.run(
                    [
                        sys.executable,
                        script,
                        "--child",
                        side,
                        "--model",
                        str(model),
                        "--out",
                        str(out),
                        "--steps",
                        str(a.steps),
                        "--max-length",
                        str(a.max_length),
                    ],
                    capture_output=True,
                    text=True,
                    env=env,
                )
                line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
                if r.returncode != 0 or not line:
                    sys.exit(f"{side} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
                run = json.loads(line[-1][7:])
                run["process_seconds"] = time.perf_counter() - started  # interpreter and imports included
                runs[side].append(run)
                print(
                    f"run {repeat + 1} {side:5s} {run['seconds']:7.1f} s  {run['tokens']:>8,} tokens "
                    f"(own count {run['own_tokens']:,})  {run['tokens'] / run['seconds']:8.1f} tok/s  "
                    f"{a.steps / run['seconds']:.3f} steps/s  peak RSS {run['peak_rss_mb']:7.0f} MB  "
                    f"(whole process {run['process_seconds']:.1f} s)",
                    flush=True,
                )
    best = {side: min(runs[side], key=lambda r: r["seconds"]) for side in sides}
    for side, r in best.items():
        print(
            f"fastest {side:5s} {r['tokens']:>8,} tokens  {r['seconds']:7.1f} s  "
            f"{r['tokens'] / r['seconds']:8.1f} tok/s  peak RSS {max(x['peak_rss_mb'] for x in runs[side]):7.0f} MB"
        )
    a_, t_ = best["aura"], best["trl"]
    steps_ratio = t_["seconds"] / a_["seconds"]
    tokens_ratio = (a_["tokens"] / a_["seconds"]) / (t_["tokens"] / t_["seconds"])
    memory = max(x["peak_rss_mb"] for x in runs["aura"]) / max(x["peak_rss_mb"] for x in runs["trl"])
    print(
        f"fastest of {a.repeats}, aura/trl: steps/s x{steps_ratio:.2f} (same steps, same examples), "
        f"tokens/s x{tokens_ratio:.2f} (tokens counted the same way: {a_['tokens']:,} vs {t_['tokens']:,}), "
        f"peak RSS x{memory:.2f} (each side's largest)"
    )
    whole = min(x["process_seconds"] for x in runs["trl"]) / min(x["process_seconds"] for x in runs["aura"])
    print(f"whole processes (interpreter, imports, everything), fastest of each, aura/trl: x{whole:.2f}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    prefix = name or Path(script).stem
    figure(f"{prefix}.steps_per_s", ratio(steps_ratio))
    figure(f"{prefix}.tokens_per_s", ratio(tokens_ratio))
    figure(f"{prefix}.peak_rss", ratio(memory))


def conversational_pairs() -> list[dict]:
    """Aura's shipped preference pairs in TRL's conversational form (prompt, chosen, rejected as message lists),
    what the DPO and reward-model benchmarks give TRL's trainers."""
    from aura.data.preference import DEFAULT_PAIRS

    records = [json.loads(ln) for ln in DEFAULT_PAIRS.read_text(encoding="utf-8").splitlines()]
    return [
        {
            "prompt": [{"role": "user", "content": r["prompt"]}],
            "chosen": [{"role": "assistant", "content": r["chosen"]}],
            "rejected": [{"role": "assistant", "content": r["rejected"]}],
        }
        for r in records
    ]


def clocked_aura(argv: list) -> list[tuple[float, float, int]]:
    """Run ``aura ARGV`` through the program's own entry point in this process, with ``--log-interval 1``
    in ARGV, and return each optimizer step's end as ``step_end()``: the Aura side of ``alternate``."""
    from aura.cli import entry
    from aura.train.run.metrics import TrainMetrics

    ends: list[tuple[float, float, int]] = []
    log_step = TrainMetrics.log_step

    def timed_log_step(self, *args, **kwargs):  # called once per step (log_interval 1), after the update
        ends.append(step_end())
        return log_step(self, *args, **kwargs)

    TrainMetrics.log_step = timed_log_step
    assert entry([str(x) for x in argv]) == 0
    return ends


def alternate(
    script: str,
    children: dict[str, Callable[[argparse.Namespace], list]],
    *,
    steps: int,
    per_step: int,
    unit: str = "examples",
    name: str = "",
) -> None:
    """Steady state and whole command, fastest of several alternated runs (as bench/versus_trl_grpo.py).

    ``children[side](args)`` trains one side and returns each optimizer step's end as (wall clock, CPU
    clock); run as ``--child SIDE`` (one thread) it prints them with the peak RSS and CPU seconds, run plainly
    it builds the model, starts the sides ``--repeats`` times, alternating which goes first, and prints every
    run and each side's fastest figures (largest peak). Whole command = the child's wall time measured here
    (interpreter, imports, data, model, every step, the save); steady state = from the end of step 1 to the end
    of the last step, over the steps in between. ``per_step``: ``unit``s trained per optimizer step (the same
    on both sides)."""
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=steps)
    p.add_argument("--max-length", type=int, default=256)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--child", choices=list(children))
    p.add_argument("--model")
    p.add_argument("--out")
    a = p.parse_args()
    if a.child:
        import torch

        torch.set_num_threads(1)
        count_trained_tokens()
        ends = children[a.child](a)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        print(
            "RESULT "
            + json.dumps({"ends": ends, "peak_rss_mb": peak_rss_mb(), "cpu_seconds": usage.ru_utime + usage.ru_stime}),
            flush=True,
        )
        return
    import time

    runs: dict[str, list[dict]] = {side: [] for side in children}
    print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        model = build_model(Path(tmp))
        for repeat in range(a.repeats):
            for side in list(children) if repeat % 2 == 0 else list(children)[::-1]:
                env = dict(
                    os.environ, AURA_PLAIN="1", AURA_LANG="en", TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1"
                )
                t = time.perf_counter()
                r = subprocess.run(
                    [
                        sys.executable,
                        script,
                        "--child",
                        side,
                        "--model",
                        str(model),
                        "--out",
                        str(Path(tmp) / f"{side}-{repeat}"),
                        "--steps",
                        str(a.steps),
                        "--max-length",
                        str(a.max_length),
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
                ends = run["ends"]
                if len(ends) != a.steps:
                    sys.exit(f"{side} clocked {len(ends)} steps, not {a.steps}")
                gaps = max(len(ends) - 1, 1)
                run.update(
                    seconds=wall, step_s=(ends[-1][0] - ends[0][0]) / gaps, cpu_step_s=(ends[-1][1] - ends[0][1]) / gaps
                )
                # trained tokens per steady-state step (the children that record them: step_end())
                tokens = (ends[-1][2] - ends[0][2]) / gaps if len(ends[0]) > 2 else 0
                run["tokens_step"] = tokens
                if tokens:
                    run["cpu_ms_per_ktok"] = 1e6 * run["cpu_step_s"] / tokens
                runs[side].append(run)
                per_tok = (
                    f", {tokens:.0f} trained tok/step, {run['cpu_ms_per_ktok']:.0f} CPU ms/1k tok" if tokens else ""
                )
                print(
                    f"run {repeat + 1} {side:5s} whole command {wall:6.1f} s ({run['cpu_seconds']:5.1f} CPU s)  "
                    f"steady state {run['step_s']:.3f} s/step ({run['cpu_step_s']:.3f} CPU s{per_tok})  "
                    f"peak RSS {run['peak_rss_mb']:5.0f} MB  load {os.getloadavg()[0]:.2f}",
                    flush=True,
                )
    keys = ("seconds", "step_s", "cpu_seconds", "cpu_step_s")
    best = {
        side: {**{k: min(r[k] for r in rs) for k in keys}, "peak_rss_mb": max(r["peak_rss_mb"] for r in rs)}
        for side, rs in runs.items()
    }
    total = a.steps * per_step
    for side, r in best.items():
        print(
            f"{side:5s} {a.steps} steps x {per_step} {unit}  whole command {r['seconds']:6.1f} s = "
            f"{total / r['seconds']:.2f} {unit}/s  steady state {per_step / r['step_s']:.2f} {unit}/s  "
            f"CPU: whole {r['cpu_seconds']:.1f} s, per step {r['cpu_step_s']:.3f} s  peak RSS {r['peak_rss_mb']:5.0f} "
            "MB"
        )
    au, tr = best["aura"], best["trl"]
    print(
        f"aura/trl: whole-command {unit}/s x{tr['seconds'] / au['seconds']:.2f}  steady-state {unit}/s "
        f"x{tr['step_s'] / au['step_s']:.2f}  CPU time: whole x{tr['cpu_seconds'] / au['cpu_seconds']:.2f}, "
        f"per step x{tr['cpu_step_s'] / au['cpu_step_s']:.2f}  peak RSS x{au['peak_rss_mb'] / tr['peak_rss_mb']:.2f}"
    )
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    from figures import figure, ratio

    prefix = name or Path(script).stem
    figure(f"{prefix}.whole_command", ratio(tr["seconds"] / au["seconds"]))
    figure(f"{prefix}.steady_state", ratio(tr["step_s"] / au["step_s"]))
    figure(f"{prefix}.cpu_whole", ratio(tr["cpu_seconds"] / au["cpu_seconds"]))
    figure(f"{prefix}.cpu_per_step", ratio(tr["cpu_step_s"] / au["cpu_step_s"]))
    figure(f"{prefix}.peak_rss", ratio(au["peak_rss_mb"] / tr["peak_rss_mb"]))
    if all("cpu_ms_per_ktok" in r for rs in runs.values() for r in rs):  # the same work per token, both sides
        fastest = {side: min(r["cpu_ms_per_ktok"] for r in rs) for side, rs in runs.items()}
        print(
            f"CPU ms per 1,000 trained tokens (steady state, fastest run): aura {fastest['aura']:.0f}, trl "
            f"{fastest['trl']:.0f}: x{fastest['trl'] / fastest['aura']:.2f}"
        )
        figure(f"{prefix}.cpu_per_token", ratio(fastest["trl"] / fastest["aura"]))
