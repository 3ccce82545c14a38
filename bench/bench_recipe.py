"""Pretraining recipes compared at the same tokens: tokens to reach today's loss, final loss, time, memory.

    .venv/bin/python bench/bench_recipe.py --corpus /tmp/bench_es.txt --out /tmp/recipe-bench   # the full grid
    .venv/bin/python bench/bench_recipe.py --sizes tiny --seeds 0 --steps 150 --out /tmp/recipe-bench  # a subset

The corpus is the project's Spanish bench corpus (``bash scripts/build_bench_corpus.sh /tmp/bench_es.txt``;
without it, the embedded corpus). Every run is ``aura pretrain`` itself (``PretrainConfig``), one process
per run (its peak resident memory is its own), fp32, one thread, the same data order per seed, the same
validation windows, validated every ``--eval-every`` steps.

Recipes (``--recipes``; OPTIMIZER-SCHEDULE/BLOCK): ``adamw-cosine/llama`` is today's default (the
baseline), then Muon + cosine, Muon + WSD, each with the Llama block of today's presets and the Qwen3 block
(QK-norm, zero-initialised output projections). Every recipe is run at every ``--lrs`` value and
judged at its best one (the lowest mean final validation loss over the seeds), so no recipe loses by a
bad learning rate. Sizes: ``tiny`` (the ``tiny`` preset's shape: d 256, 4 layers) and ``small`` (~20M
parameters with the 8k vocabulary: d 384, 8 layers), context ``--seq-length``.

Per recipe and size it prints (and writes as Markdown to ``--out``/table.md): the tokens needed to reach
the baseline's final validation loss and their ratio to the baseline's (the target is <= 0.7), the final
validation loss, the time per token relative to the baseline (Muon's orthogonalisation cost) and the peak
memory. ``--plot FILE.png`` draws the validation curves at each recipe's best learning rate. Finished runs
are kept in ``--out`` (one JSON each) and skipped when the command is repeated, so a grid can be run in
parts and summarised at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BASELINE = "adamw-cosine/llama"
RECIPES = [BASELINE, "muon-cosine/llama", "muon-wsd/llama", "adamw-cosine/qwen3", "muon-cosine/qwen3",
           "muon-wsd/qwen3"]
SIZES = {  # d_model, layers, heads, kv heads, MLP
    "tiny": (256, 4, 4, 2, 768),
    "small": (384, 8, 6, 2, 1024),
}


def prepare_data(work: Path, corpus: str | None) -> Path:
    """Tokenizer (byte-level BPE, vocab 8000) and prepared data, once per --out directory."""
    from aura.data import EMBEDDED_CORPUS
    from aura.data.prepare import PrepareConfig, prepare
    from aura.tokenizer.train import train_bpe

    if (work / "data" / "meta.json").is_file():
        return work / "data"
    inputs = [corpus] if corpus and Path(corpus).is_file() else \
        [str(p) for p in sorted(Path(EMBEDDED_CORPUS).glob("*.txt"))]
    tok = train_bpe(inputs=inputs, vocab_size=8000, output_dir=work / "tok")
    return Path(prepare(PrepareConfig(inputs=inputs, tokenizer=str(tok), output_dir=str(work / "data"),
                                      max_tokens=4_000_000, val_fraction=0.01)))


def run_one(job: dict) -> dict:
    """One training run in this process (the child): its curves, throughput and peak memory."""
    import csv
    import shutil

    import torch

    torch.set_num_threads(1)
    from aura.train.pretrain import PretrainConfig, pretrain

    opt_sched, block = job["recipe"].split("/")
    optimizer, schedule = opt_sched.split("-")
    d, layers, heads, kv, mlp = SIZES[job["size"]]
    out = Path(job["run_dir"])
    code = pretrain(PretrainConfig(
        data=[job["data"]], output_dir=out, overwrite=True, model_preset="manual", arch=block, embed_size=d,
        num_layers=layers, num_heads=heads, num_kv_heads=kv, intermediate_size=mlp, seq_length=job["seq"],
        batch_size=job["batch"], max_steps=job["steps"], learning_rate=job["lr"], optimizer=optimizer,
        lr_schedule=schedule, seed=job["seed"], eval_interval=job["eval_every"], eval_batches=job["eval_batches"],
        log_interval=job["eval_every"], save_steps=0, keep_last=1, sample_tokens=0, precision="fp32",
        device="cpu", time_budget=0))
    rows = list(csv.DictReader(open(out / "training_log.csv")))
    steps = [r for r in rows if r["kind"] == "step"]
    curve = [(int(r["tokens"]), float(r["val_loss"])) for r in rows if r["kind"] == "eval" and r["val_loss"]]
    tps = [float(r["tokens_per_s"]) for r in steps[1:]]  # the first interval includes start-up
    shutil.rmtree(out, ignore_errors=True)
    return {**job, "exit": code, "curve": curve, "tokens_per_s": statistics.median(tps) if tps else None,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def tokens_to_reach(curve: list[tuple[int, float]], target: float) -> float | None:
    """The first token count where the validation curve reaches ``target`` (linear between evaluations)."""
    prev = None
    for tokens, loss in curve:
        if loss <= target:
            if prev is None:
                return float(tokens)
            (t0, l0) = prev
            return t0 + (tokens - t0) * (l0 - target) / (l0 - loss) if l0 > loss else float(tokens)
        prev = (tokens, loss)
    return None


def summarise(results: list[dict], sizes: list[str], recipes: list[str]) -> tuple[str, dict]:
    """The Markdown table (per size, per recipe at its best LR) and the best runs for the plot.

    Tokens to the baseline's loss are paired by seed: a recipe's run with seed s against the baseline's
    final validation loss with seed s (both at their best learning rates). Time per token compares the
    median tokens/s of all of a recipe's runs with the baseline's (on a shared machine one run's speed is
    mostly its neighbours' load)."""
    lines, best_runs = [], {}
    for size in sizes:
        by_recipe, speed = {}, {}
        for recipe in recipes:
            runs = [r for r in results if r["size"] == size and r["recipe"] == recipe and r["curve"]]
            by_lr: dict[float, list[dict]] = {}
            for r in runs:
                by_lr.setdefault(r["lr"], []).append(r)
            if by_lr:
                lr = min(by_lr, key=lambda v: statistics.mean(x["curve"][-1][1] for x in by_lr[v]))
                by_recipe[recipe] = (lr, by_lr[lr], {v: statistics.mean(x["curve"][-1][1] for x in rs)
                                                     for v, rs in sorted(by_lr.items())})
                speed[recipe] = statistics.median(r["tokens_per_s"] for r in runs)
        if BASELINE not in by_recipe:
            continue
        base = {r["seed"]: r for r in by_recipe[BASELINE][1]}
        target = statistics.mean(r["curve"][-1][1] for r in base.values())
        lines += [f"\n**{size}** ({SIZES[size][0]}d × {SIZES[size][1]} layers), baseline final val loss "
                  f"{target:.4f}\n",
                  "| recipe | best LR (final val per LR) | seeds | final val loss | tokens to baseline's loss "
                  "| ratio | time/token vs baseline | peak RSS MB |",
                  "|---|---|---|---|---|---|---|---|"]
        for recipe, (lr, runs, per_lr) in by_recipe.items():
            finals = [r["curve"][-1][1] for r in runs]
            paired = [(tokens_to_reach(r["curve"], base[r["seed"]]["curve"][-1][1]), base[r["seed"]]["curve"][-1][0])
                      for r in runs if r["seed"] in base]
            reached = [(t, n) for t, n in paired if t is not None]
            if paired and len(reached) == len(paired):
                tok = f"{statistics.mean(t for t, _ in reached):,.0f}"
                ratio = f"{statistics.mean(t / n for t, n in reached):.2f}"
            else:
                tok, ratio = f"not reached ({len(reached)}/{len(paired)})", "-"
            spread = f" ± {statistics.pstdev(finals):.4f}" if len(finals) > 1 else ""
            lrs = ", ".join(f"{v:g}: {x:.3f}" for v, x in per_lr.items())
            lines.append(f"| {recipe} | {lr:g} ({lrs}) | {len(runs)} | {statistics.mean(finals):.4f}{spread} | "
                         f"{tok} | {ratio} | {speed[BASELINE] / speed[recipe]:.2f}× | "
                         f"{max(r['peak_rss_mb'] for r in runs):,.0f} |")
            best_runs[(size, recipe)] = runs
    return "\n".join(lines), best_runs


def plot(best_runs: dict, path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    sizes = sorted({s for s, _ in best_runs})
    fig = Figure(figsize=(6 * len(sizes), 4.2))
    FigureCanvasAgg(fig)
    for i, size in enumerate(sizes):
        ax = fig.add_subplot(1, len(sizes), i + 1)
        for (s, recipe), runs in best_runs.items():
            if s != size:
                continue
            tokens = [t for t, _ in runs[0]["curve"]]
            mean = [statistics.mean(r["curve"][k][1] for r in runs) for k in range(len(tokens))]
            ax.plot(tokens, mean, label=f"{recipe} (lr {runs[0]['lr']:g})",
                    linestyle="-" if "qwen3" in recipe else "--")
        ax.set_title(f"{size}: validation loss")
        ax.set_xlabel("tokens")
        ax.set_ylabel("val loss")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(str(path), dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--corpus", default="/tmp/bench_es.txt", help="text file (falls back to the embedded corpus)")
    p.add_argument("--out", default="/tmp/recipe-bench", help="results directory (runs are resumable)")
    p.add_argument("--sizes", default="tiny,small")
    p.add_argument("--recipes", default=",".join(RECIPES))
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--lrs", default="1e-3,2e-3,4e-3")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq-length", type=int, default=128)
    p.add_argument("--eval-every", type=int, default=15)
    p.add_argument("--eval-batches", type=int, default=16)
    p.add_argument("--jobs", type=int, default=1, help="runs at once (one thread each)")
    p.add_argument("--plot", default="", help="PNG of the validation curves at each recipe's best LR")
    p.add_argument("--summary-only", action="store_true", help="run nothing: summarise the finished runs")
    p.add_argument("--child", default="", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        print("RESULT " + json.dumps(run_one(json.loads(a.child))))
        return
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    data = prepare_data(out, a.corpus)
    sizes, recipes = a.sizes.split(","), a.recipes.split(",")
    jobs = []
    for size in sizes:
        for seed in (int(s) for s in a.seeds.split(",")):
            for lr in (float(v) for v in a.lrs.split(",")):
                for recipe in recipes:
                    name = f"{size}_{recipe.replace('/', '_')}_lr{lr:g}_s{seed}_{a.steps}x{a.batch}x{a.seq_length}"
                    jobs.append({"name": name, "size": size, "recipe": recipe, "lr": lr, "seed": seed,
                                 "steps": a.steps, "batch": a.batch, "seq": a.seq_length, "eval_every": a.eval_every,
                                 "eval_batches": a.eval_batches, "data": str(data), "run_dir": str(out / "runs" / name)})
    todo = [] if a.summary_only else [j for j in jobs if not (out / f"{j['name']}.json").is_file()]
    print(f"{len(jobs)} runs, {len(jobs) - len(todo)} already done", flush=True)
    running: list[tuple[dict, subprocess.Popen, float]] = []
    env = dict(os.environ, OMP_NUM_THREADS="1", AURA_LANG="en", AURA_PLAIN="1")
    while todo or running:
        while todo and len(running) < a.jobs:
            job = todo.pop(0)
            proc = subprocess.Popen([sys.executable, __file__, "--child", json.dumps(job)], stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, env=env)
            running.append((job, proc, time.time()))
        job, proc, t0 = running.pop(0)
        text = proc.communicate()[0]
        result = next((json.loads(line[7:]) for line in text.splitlines() if line.startswith("RESULT ")), None)
        if result is None:
            print(f"FAILED {job['name']}:\n{text[-3000:]}", flush=True)
            continue
        (out / f"{job['name']}.json").write_text(json.dumps(result))
        final = result["curve"][-1][1] if result["curve"] else float("nan")
        print(f"{job['name']}: final val {final:.4f}, {result['tokens_per_s']:,.0f} tok/s, "
              f"{time.time() - t0:.0f} s", flush=True)
    results = [json.loads((out / f"{j['name']}.json").read_text()) for j in jobs
               if (out / f"{j['name']}.json").is_file()]
    table, best = summarise(results, sizes, recipes)
    (out / "table.md").write_text(table + "\n")
    print(table)
    if a.plot:
        plot(best, Path(a.plot))
        print(f"plot: {a.plot}")


if __name__ == "__main__":
    main()
