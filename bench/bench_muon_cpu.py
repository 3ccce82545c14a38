"""Muon on a CPU: Newton-Schulz in fp32 against bf16, and AdamW, for the ``tiny`` preset.

    .venv/bin/python bench/bench_muon_cpu.py [--steps 10] [--rounds 7] [--threads 1] [--corpus /tmp/bench_es.txt]

On a CPU without avx512_bf16 or AMX a bf16 matmul is emulated, ~20x slower than fp32, so Muon's
orthogonalisation runs in fp32 there (``aura.train.optim.muon.ns_dtype``); this measures what that buys.
Two figures per variant, in one run on this machine, with the CPU's name and whether it has avx512_bf16/AMX,
on ``--threads`` threads (1 by default: on a shared machine OpenMP's threads wait for each other whenever
another job takes a core, which makes 2-thread timings swing several-fold):

* the optimizer step alone (``build_optimizer``'s optimizer over the ``tiny`` preset's parameters, vocab
  8000, random gradients): the median over ``--rounds`` rounds, the variants alternated in every round;
* tokens/s of ``aura pretrain --model-preset tiny --optimizer muon|adamw`` (the CLI, its default batch:
  16 x 256 tokens per step, ``--precision auto``), steps 3..``--steps`` from training_log.csv, one
  process per run (``OMP_NUM_THREADS``/``MKL_NUM_THREADS`` = ``--threads``), ``--repeats`` runs per variant
  in alternating order (a b c, c b a, ...); each run's figure is printed and the best one of each variant
  (the run that met the least load) gives the ratios.

Variants: ``adamw``, ``muon-fp32`` and ``muon-bf16`` (Newton-Schulz's dtype forced by replacing ``ns_dtype``
in the process; the rest of the step is the same), printed with their ratios.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

VARIANTS = {"adamw": ("adamw", None), "muon-fp32": ("muon", "float32"), "muon-bf16": ("muon", "bfloat16")}

# the CLI in a fresh interpreter, Newton-Schulz's dtype forced where a variant names one
CHILD = """
import sys, torch
dtype = sys.argv[1]
if dtype != "-":
    from aura.train.optim import muon
    muon.ns_dtype = lambda device, info=None: getattr(torch, dtype)
from aura.cli import entry
raise SystemExit(entry(sys.argv[2:]))
"""


def cpu_line() -> str:
    from aura.models.hardware import cpu_fast_bf16, cpu_flags, cpu_name

    flags = cpu_flags()
    have = [f for f in ("avx512_bf16", "amx_bf16") if f in flags]
    return (
        f"{cpu_name()}: {', '.join(have) if have else 'no avx512_bf16, no amx_bf16'} "
        f"(fast bf16: {'yes' if cpu_fast_bf16() else 'no'}); torch threads {__import__('torch').get_num_threads()}"
    )


def prepare_data(work: Path, corpus: str | None) -> Path:
    from aura.data import EMBEDDED_CORPUS
    from aura.data.prepare import PrepareConfig, prepare
    from aura.tokenizer.train import train_bpe

    inputs = (
        [corpus] if corpus and Path(corpus).is_file() else [str(p) for p in sorted(Path(EMBEDDED_CORPUS).glob("*.txt"))]
    )
    tok = train_bpe(inputs=inputs, vocab_size=8000, output_dir=work / "tok")
    return prepare(
        PrepareConfig(
            inputs=inputs, tokenizer=str(tok), output_dir=str(work / "data"), max_tokens=1_000_000, val_fraction=0.001
        )
    )


def optimizer_steps(rounds: int, threads: int) -> dict[str, float]:
    """Median seconds of one optimizer step per variant (the variants alternated in every round)."""
    from types import SimpleNamespace

    import torch

    from aura.models.presets import PRESETS, build_model
    from aura.train.optim.step_engine import build_optimizer

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = build_model(PRESETS["tiny"], 8000)
    opts = {}
    for name, (optimizer, dtype) in VARIANTS.items():
        args = SimpleNamespace(
            optimizer=optimizer, learning_rate=1e-3, weight_decay=0.1, adam_beta1=0.9, adam_beta2=0.95, adam_eps=1e-8
        )
        opts[name] = opt = build_optimizer(model, args, torch.device("cpu"))
        if dtype is not None:
            opt.dtype = getattr(torch, dtype)
    grads = {p: torch.randn_like(p) * 1e-3 for p in model.parameters()}
    times: dict[str, list[float]] = {name: [] for name in opts}
    snapshot = {p: p.detach().clone() for p in model.parameters()}
    for r in range(rounds + 1):  # round 0 warms up (state allocation)
        for name in list(opts) if r % 2 == 0 else list(reversed(opts)):
            with torch.no_grad():
                for p in model.parameters():
                    p.copy_(snapshot[p])
                    p.grad = grads[p].clone()
            t0 = time.perf_counter()
            opts[name].step()
            dt = time.perf_counter() - t0
            if r:
                times[name].append(dt)
    return {name: statistics.median(ts) for name, ts in times.items()}


def pretrain_tps(data: Path, out: Path, variant: str, steps: int, threads: int) -> float:
    optimizer, dtype = VARIANTS[variant]
    argv = [
        "pretrain",
        "--data",
        str(data),
        "--output-dir",
        str(out),
        "--model-preset",
        "tiny",
        "--optimizer",
        optimizer,
        "--max-steps",
        str(steps),
        "--save-steps",
        "0",
        "--sample-tokens",
        "0",
        "--log-interval",
        "1",
        "--eval-batches",
        "1",
        "--seed",
        "0",
    ]
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, dtype or "-", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "AURA_LANG": "en",
            "AURA_PLAIN": "1",
            "OMP_NUM_THREADS": str(threads),
            "MKL_NUM_THREADS": str(threads),
        },
    )
    if proc.returncode != 0:
        raise SystemExit(f"{variant}: aura pretrain failed\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    rows = [r for r in csv.DictReader(open(out / "training_log.csv")) if r["kind"] == "step"]
    a, b = rows[2], rows[-1]  # steps 3 .. N: after the first steps' warm-up
    return (int(b["tokens"]) - int(a["tokens"])) / (float(b["seconds"]) - float(a["seconds"]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=10, help="aura pretrain steps per run (tokens/s over 3..N)")
    ap.add_argument("--rounds", type=int, default=7, help="timed optimizer steps per variant")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the optimizer step and each run)")
    ap.add_argument("--repeats", type=int, default=2, help="aura pretrain runs per variant (alternated)")
    ap.add_argument("--corpus", default=None)
    ap.add_argument("--skip-pretrain", action="store_true", help="the optimizer step only")
    a = ap.parse_args()
    import torch

    torch.set_num_threads(a.threads)
    print("CPU:", cpu_line(), flush=True)
    print(
        "torch",
        torch.__version__,
        time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load average %.1f %.1f %.1f" % os.getloadavg(),
        flush=True,
    )
    step = optimizer_steps(a.rounds, a.threads)
    print("\noptimizer step, tiny preset (median of", a.rounds, "rounds):")
    for name, s in step.items():
        print(f"  {name:<10} {s * 1e3:9.1f} ms")
    print(
        f"  muon-bf16 / muon-fp32: {step['muon-bf16'] / step['muon-fp32']:.1f}x   "
        f"muon-fp32 / adamw: {step['muon-fp32'] / step['adamw']:.1f}x   "
        f"muon-bf16 / adamw: {step['muon-bf16'] / step['adamw']:.1f}x",
        flush=True,
    )
    from figures import figure, ratio

    figure(f"muon_cpu.{a.threads}_threads.step.bf16_over_fp32", ratio(step["muon-bf16"] / step["muon-fp32"], 1))
    figure(f"muon_cpu.{a.threads}_threads.step.muon_fp32_over_adamw", ratio(step["muon-fp32"] / step["adamw"], 1))
    if a.skip_pretrain:
        return
    with tempfile.TemporaryDirectory(prefix="bench-muon-cpu-") as tmp:
        work = Path(tmp)
        data = prepare_data(work, a.corpus)
        runs: dict[str, list[float]] = {v: [] for v in VARIANTS}
        for r in range(a.repeats):
            for v in list(VARIANTS) if r % 2 == 0 else list(reversed(VARIANTS)):
                runs[v].append(pretrain_tps(data, work / f"{v}-{r}", v, a.steps, a.threads))
    tps = {v: max(ts) for v, ts in runs.items()}
    print(
        f"\naura pretrain --model-preset tiny (batch 16 x 256, --precision auto), tokens/s over steps 3..{a.steps}"
        f" (best of {a.repeats} runs; each run's in brackets):"
    )
    for name, t in tps.items():
        print(f"  {name:<10} {t:9.0f} tokens/s   [{', '.join(f'{x:.0f}' for x in runs[name])}]")
    print(
        f"  muon-fp32 / muon-bf16: {tps['muon-fp32'] / tps['muon-bf16']:.1f}x   "
        f"muon-fp32 / adamw: {tps['muon-fp32'] / tps['adamw']:.2f}x   "
        f"muon-bf16 / adamw: {tps['muon-bf16'] / tps['adamw']:.2f}x"
    )
    figure(f"muon_cpu.{a.threads}_threads.pretrain.fp32_over_bf16", ratio(tps["muon-fp32"] / tps["muon-bf16"]))
    figure(f"muon_cpu.{a.threads}_threads.pretrain.muon_fp32_over_adamw", ratio(tps["muon-fp32"] / tps["adamw"]))
    print(time.strftime("%H:%M UTC", time.gmtime()), "load average %.1f %.1f %.1f" % os.getloadavg())


# reproduce:
# reproduce: --threads 2
# reproduce-quick: --steps 4 --rounds 1 --repeats 1


if __name__ == "__main__":
    main()
