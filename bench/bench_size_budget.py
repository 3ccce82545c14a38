"""The model size a time budget can train, on this CPU: `auto`'s size rule checked by training.

    .venv/bin/python bench/bench_size_budget.py --corpus /tmp/bench_es.txt --budget 150 --out /tmp/size-budget

``--model-preset auto --time-budget`` picks the size whose tokens in the budget are about 20 per parameter (the
Chinchilla rule, ``aura.models.size_budget``). This bench applies the same ``pick_size`` to tiny sizes at the
throughput measured on this CPU, then trains the size it picks and two neighbours ~2-4x larger and ~2-4x smaller
for the same time, and compares their validation losses (the rule's claim: the chosen size is lowest).

1. Data: a byte-level BPE of ``--vocab`` tokens (512: at these sizes a 32k vocabulary would be nearly all
   embedding) and the corpus prepared with it (2 % held out for validation), like ``bench_recipe.py``.
2. A ladder of tiny Qwen3 shapes (``LADDER``), each ~2x the parameters of the one below.
3. Throughput: each rung's tokens/s in a short ``aura pretrain`` (``--probe-steps`` steps, the median of the
   logged rates after the first), one process running them one after another, one thread.
4. The rule: tokens in the budget = tokens/s x ``--budget`` seconds per rung; ``pick_size`` chooses; the
   neighbours are the rungs nearest 3x the chosen size's parameters above and below (within 2-4.5x).
5. Three runs of the real CLI, ``python -m aura pretrain --max-tokens T`` with T = that size's tokens in the
   budget: the same time at the measured throughput (what a --time-budget run gets, without the other jobs on
   this shared machine changing it mid-run), Muon + WSD at one learning rate, the same seed and data order, the
   final validation loss on the same validation windows (``--eval-batches``).

Prints the ladder (parameters, tokens/s, tokens per parameter in the budget), each run's final validation loss and
wall time, and FIGURE lines: the chosen size's loss and the neighbours' differences from it (positive: the
neighbour is worse).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

LADDER = {  # name: (d_model, layers, heads, kv heads, MLP); parameters at vocab 512 in the printed table
    "q32": (32, 2, 2, 1, 96),
    "q48": (48, 2, 3, 1, 128),
    "q64": (64, 3, 4, 2, 192),
    "q96": (96, 3, 6, 2, 256),
    "q128": (128, 4, 4, 2, 384),
    "q192": (192, 4, 6, 2, 512),
    "q256": (256, 6, 8, 2, 768),
    "q384": (384, 6, 6, 2, 1024),
}


def prepare_data(work: Path, corpus: str | None, vocab: int) -> Path:
    """Tokenizer and prepared data, once per --out directory."""
    from aura.data import EMBEDDED_CORPUS
    from aura.data.prepare import PrepareConfig, prepare
    from aura.tokenizer.train import train_bpe

    data = work / f"data{vocab}"
    if (data / "meta.json").is_file():
        return data
    inputs = (
        [corpus] if corpus and Path(corpus).is_file() else [str(p) for p in sorted(Path(EMBEDDED_CORPUS).glob("*.txt"))]
    )
    tok = train_bpe(inputs=inputs, vocab_size=vocab, output_dir=work / f"tok{vocab}")
    return Path(prepare(PrepareConfig(inputs=inputs, tokenizer=str(tok), output_dir=str(data), val_fraction=0.02)))


def shape_args(name: str, a) -> list[str]:
    d, layers, heads, kv, mlp = LADDER[name]
    return [
        *("--model-preset", "manual", "--arch", "qwen3", "--embed-size", d, "--num-layers", layers),
        *("--num-heads", heads, "--num-kv-heads", kv, "--intermediate-size", mlp, "--seq-length", a.seq_length),
        *("--batch-size", a.batch, "--gradient-accumulation-steps", 1, "--learning-rate", a.lr),
        *("--optimizer", "muon", "--lr-schedule", "wsd", "--seed", 0, "--precision", "fp32", "--device", "cpu"),
        *("--save-steps", 0, "--sample-tokens", 0, "--eval-batches", a.eval_batches, "--overwrite"),
    ]


def pretrain(data: Path, out: Path, name: str, a, *extra) -> Path:
    """One ``python -m aura pretrain`` run (one thread); its run directory."""
    args = [sys.executable, "-m", "aura", "pretrain", "--data", data, "--output-dir", out, *shape_args(name, a)]
    env = dict(os.environ, OMP_NUM_THREADS="1", AURA_LANG="en", AURA_PLAIN="1", PYTHONPATH=str(ROOT))
    proc = subprocess.run([str(x) for x in [*args, *extra]], env=env, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        sys.exit(f"aura pretrain failed ({name}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return out


def log_rows(run: Path, kind: str) -> list[dict]:
    with open(run / "training_log.csv", newline="") as f:
        return [r for r in csv.DictReader(f) if r["kind"] == kind]


def probe(data: Path, work: Path, names: list[str], a) -> dict[str, float]:
    """tokens/s of each rung: the median of its logged rates after the first (start-up, first-touch)."""
    rates = {}
    for name in names:
        run = pretrain(data, work / "probe" / name, name, a, "--max-steps", a.probe_steps, "--log-interval", 1)
        tps = [float(r["tokens_per_s"]) for r in log_rows(run, "step")[1:] if r["tokens_per_s"]]
        rates[name] = statistics.median(tps)
        print(f"probe {name}: {rates[name]:,.0f} tokens/s", flush=True)
    return rates


def neighbours(chosen: str, params: dict[str, int]) -> tuple[str | None, str | None]:
    """The rungs nearest 3x the chosen size's parameters above and below it (2-4.5x away), or None."""
    import math

    def near(side: int) -> str | None:
        fits = [n for n, p in params.items() if 2 <= (p / params[chosen]) ** side <= 4.5]
        return min(fits, key=lambda n: abs(math.log((params[n] / params[chosen]) ** side / 3)), default=None)

    return near(1), near(-1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--corpus", default="/tmp/bench_es.txt", help="text file (falls back to the embedded corpus)")
    p.add_argument("--out", default="/tmp/size-budget", help="work directory (data, runs, results.json)")
    p.add_argument("--budget", type=float, default=150, help="seconds of training per size")
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--seq-length", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--lr", type=float, default=3e-3, help="one learning rate for every size (Muon + WSD)")
    p.add_argument("--eval-batches", type=int, default=40, help="validation batches (the same windows per run)")
    p.add_argument("--probe-steps", type=int, default=12)
    p.add_argument("--rungs", default=",".join(LADDER), help="the ladder's sizes to consider (LADDER's names)")
    a = p.parse_args()
    from aura.models.presets import ModelSpec, spec_parameters
    from aura.models.size_budget import SizeOption, pick_size

    work = Path(a.out)
    work.mkdir(parents=True, exist_ok=True)
    data = prepare_data(work, a.corpus, a.vocab)
    vocab = json.loads((data / "meta.json").read_text())["tokenizer"]["vocab_size"]
    names = a.rungs.split(",")
    params = {
        n: spec_parameters(ModelSpec(n, "qwen3", *LADDER[n][:4], a.seq_length, LADDER[n][4]), vocab) for n in names
    }
    rates = probe(data, work, names, a)
    options = [SizeOption(n, params[n], int(rates[n] * a.budget)) for n in names]
    size = pick_size(options, a.budget)
    print(f"\nbudget {a.budget:g} s per size; vocab {vocab}; context {a.seq_length}; batch {a.batch}; lr {a.lr:g}")
    print(f"{'size':<6}{'params':>10}{'tokens/s':>10}{'tokens':>12}{'tokens/param':>14}")
    for o in size.options:
        mark = "  <- the rule's choice" if o == size.chosen else ""
        print(f"{o.preset:<6}{o.params:>10,}{rates[o.preset]:>10,.0f}{o.tokens:>12,}{o.tokens_per_param:>14.1f}{mark}")
    if not size.sensible:
        print("warning: no size reaches 10 tokens per parameter in this budget; the smallest is taken")
    larger, smaller = neighbours(size.chosen.preset, params)
    results = {}
    for name in [n for n in (larger, size.chosen.preset, smaller) if n]:
        tokens = next(o.tokens for o in options if o.preset == name)
        steps = max(1, tokens // (a.batch * a.seq_length))
        t0 = time.time()
        run = pretrain(
            data, work / "runs" / name, name, a, "--max-tokens", tokens, "--eval-interval", max(1, steps // 4)
        )
        evals = [r for r in log_rows(run, "eval") if r["val_loss"]]
        results[name] = {"params": params[name], "tokens": tokens, "val_loss": float(evals[-1]["val_loss"])}
        results[name]["wall_s"] = time.time() - t0
        print(f"{name}: {tokens:,} tokens, val loss {results[name]['val_loss']:.4f}, {results[name]['wall_s']:.0f} s")
    (work / "results.json").write_text(json.dumps({"chosen": size.chosen.preset, "runs": results}, indent=1))
    report(results, size.chosen.preset, larger, smaller)


def report(results: dict, chosen: str, larger: str | None, smaller: str | None) -> None:
    from figures import figure

    best = min(results, key=lambda n: results[n]["val_loss"])
    loss = results[chosen]["val_loss"]
    print(f"\nlowest validation loss: {best} ({'the rule' if best == chosen else 'NOT the rule'}'s choice: {chosen})")
    figure("size_budget.chosen_val_loss", f"{loss:.3f} ({chosen})")
    for key, name in (("larger", larger), ("smaller", smaller)):
        if name:
            ratio = results[name]["params"] / results[chosen]["params"]
            diff = results[name]["val_loss"] - loss
            print(f"{key} ({name}, {ratio:.2f}x the parameters): val loss {diff:+.3f} against the chosen size")
            figure(f"size_budget.{key}_minus_chosen", f"{diff:+.3f} ({name}, {ratio:.1f}× params)")
    figure("size_budget.chosen_is_lowest", "yes" if best == chosen else "no")


# reproduce: --corpus /tmp/bench_es.txt --budget 150 --out /tmp/size-budget
# reproduce-needs: file:/tmp/bench_es.txt
# reproduce-quick: --corpus aura/resources/corpus_es/enciclopedia.txt --out {tmp} --budget 4 --probe-steps 3 \
#     --rungs q32,q48,q64,q96,q128 --eval-batches 2 --vocab 300

if __name__ == "__main__":
    main()
