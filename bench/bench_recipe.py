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
parts (other seeds, an extra learning rate past the edge of a sweep) and summarised at the end:
``--summary-only`` tables every finished run in ``--out``.

The grid's steps are small (512 tokens), where Newton-Schulz costs as much as the model's forward and
backward passes, and its runs meet whatever load the machine has. ``--time-per-token`` is the separate,
quiet measurement of Muon's cost at the batch ``aura pretrain`` uses (4,096 tokens per step):

    .venv/bin/python bench/bench_recipe.py --time-per-token --sizes tiny,small --tpt-precisions fp32,auto
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
RECIPES = [BASELINE, "muon-cosine/llama", "muon-wsd/llama", "adamw-cosine/qwen3", "muon-cosine/qwen3", "muon-wsd/qwen3"]
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
    inputs = (
        [corpus] if corpus and Path(corpus).is_file() else [str(p) for p in sorted(Path(EMBEDDED_CORPUS).glob("*.txt"))]
    )
    tok = train_bpe(inputs=inputs, vocab_size=8000, output_dir=work / "tok")
    return Path(
        prepare(
            PrepareConfig(
                inputs=inputs,
                tokenizer=str(tok),
                output_dir=str(work / "data"),
                max_tokens=4_000_000,
                val_fraction=0.01,
            )
        )
    )


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
    code = pretrain(
        PretrainConfig(
            data=[job["data"]],
            output_dir=out,
            overwrite=True,
            model_preset="manual",
            arch=block,
            embed_size=d,
            num_layers=layers,
            num_heads=heads,
            num_kv_heads=kv,
            intermediate_size=mlp,
            seq_length=job["seq"],
            batch_size=job["batch"],
            max_steps=job["steps"],
            learning_rate=job["lr"],
            optimizer=optimizer,
            lr_schedule=schedule,
            seed=job["seed"],
            eval_interval=job["eval_every"],
            eval_batches=job["eval_batches"],
            log_interval=job["eval_every"],
            save_steps=0,
            keep_last=1,
            sample_tokens=0,
            precision="fp32",
            device="cpu",
            time_budget=0,
        )
    )
    rows = list(csv.DictReader(open(out / "training_log.csv")))
    steps = [r for r in rows if r["kind"] == "step"]
    curve = [(int(r["tokens"]), float(r["val_loss"])) for r in rows if r["kind"] == "eval" and r["val_loss"]]
    tps = [float(r["tokens_per_s"]) for r in steps[1:]]  # the first interval includes start-up
    shutil.rmtree(out, ignore_errors=True)
    return {
        **job,
        "exit": code,
        "curve": curve,
        "tokens_per_s": statistics.median(tps) if tps else None,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


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


def finished(out: Path, sizes: list[str], recipes: list[str]) -> list[dict]:
    """Every finished run in ``out`` of these sizes and recipes, whatever command ran it (any seed or
    learning rate: an extra rate past the edge of a sweep counts). Per size, only the runs of its most
    common length (steps x batch x context), so a short trial never mixes into the table."""
    runs = [
        r
        for f in sorted(out.glob("*.json"))
        if (r := json.loads(f.read_text())).get("size") in sizes and r.get("recipe") in recipes
    ]
    kept = []
    for size in sizes:
        mine = [r for r in runs if r["size"] == size]
        shapes = [(r["steps"], r["batch"], r["seq"]) for r in mine]
        if shapes:
            shape = max(set(shapes), key=shapes.count)
            kept += [r for r in mine if (r["steps"], r["batch"], r["seq"]) == shape]
    return kept


def summarise(results: list[dict], sizes: list[str], recipes: list[str]) -> tuple[str, dict]:
    """The Markdown table (per size, per recipe at its best LR) and the best runs for the plot.

    Tokens to the baseline's loss are paired by seed: a recipe's run with seed s against the baseline's
    final validation loss with seed s (both at their best learning rates). The best learning rate is the
    one with the lowest final validation loss on seed 0 (the sweep's seed; the mean over the seeds where
    seed 0 did not run); the row's figures (final loss, tokens, ratio) come from the other seeds wherever
    they ran, so the rate is chosen on one set of runs and the ratio measured on another (seed 0's luck at
    the chosen rate does not flatter the ratio). A best rate at an edge of its sweep is marked. Time per token compares
    the median tokens/s of all of a recipe's runs with the
    baseline's (on a shared machine one run's speed is mostly its neighbours' load)."""
    from figures import figure

    lines, best_runs = [], {}
    for size in sizes:
        by_recipe, speed = {}, {}
        for recipe in recipes:
            runs = [r for r in results if r["size"] == size and r["recipe"] == recipe and r["curve"]]
            by_lr: dict[float, list[dict]] = {}
            for r in runs:
                by_lr.setdefault(r["lr"], []).append(r)
            if by_lr:
                sweep = {
                    v: statistics.mean(x["curve"][-1][1] for x in ([x for x in rs if x["seed"] == 0] or rs))
                    for v, rs in sorted(by_lr.items())
                }
                lr = min(sweep, key=sweep.get)
                by_recipe[recipe] = (lr, by_lr[lr], sweep)
                speed[recipe] = statistics.median(r["tokens_per_s"] for r in runs)
        if BASELINE not in by_recipe:
            continue
        held_out = {r: [x for x in v[1] if x["seed"] != 0] for r, v in by_recipe.items()}
        if all(held_out.values()):  # measured on the seeds that did not choose the rate (the baseline's too)
            by_recipe = {r: (v[0], held_out[r], v[2]) for r, v in by_recipe.items()}
        base = {r["seed"]: r for r in by_recipe[BASELINE][1]}
        target = statistics.mean(r["curve"][-1][1] for r in base.values())
        r0 = by_recipe[BASELINE][1][0]
        lines += [
            (
                f"\n**{size}** ({SIZES[size][0]}d × {SIZES[size][1]} layers; {r0['steps']} steps × "
                f"{r0['batch']} × {r0['seq']} = {r0['steps'] * r0['batch'] * r0['seq']:,} tokens), baseline final "
                f"val loss {target:.4f}\n"
            ),
            "| recipe | best LR (final val per LR) | seeds | final val loss | tokens to baseline's loss "
            "| ratio | time/token vs baseline in the grid¹ | peak RSS MB |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for recipe, (lr, runs, per_lr) in by_recipe.items():
            finals = [r["curve"][-1][1] for r in runs]
            paired = [
                (tokens_to_reach(r["curve"], base[r["seed"]]["curve"][-1][1]), base[r["seed"]]["curve"][-1][0])
                for r in runs
                if r["seed"] in base
            ]
            reached = [(t, n) for t, n in paired if t is not None]
            if paired and len(reached) == len(paired):
                tok = f"{statistics.mean(t for t, _ in reached):,.0f}"
                ratio = f"{statistics.mean(t / n for t, n in reached):.2f}"
            else:
                tok, ratio = f"not reached ({len(reached)}/{len(paired)})", "-"
            spread = f" ± {statistics.stdev(finals):.4f}" if len(finals) > 1 else ""  # sample std over seeds
            lrs = ", ".join(f"{v:g}: {x:.3f}" for v, x in per_lr.items())
            if len(per_lr) > 1 and lr in (min(per_lr), max(per_lr)):
                lrs += "; best at the edge of the sweep"
            figure(f"recipe.{size}.{recipe}.tokens_ratio", ratio)
            lines.append(
                f"| {recipe} | {lr:g} ({lrs}) | {len(runs)} | {statistics.mean(finals):.4f}{spread} | "
                f"{tok} | {ratio} | {speed[BASELINE] / speed[recipe]:.2f}× | "
                f"{max(r['peak_rss_mb'] for r in runs):,.0f} |"
            )
            best_runs[(size, recipe)] = runs
    if lines:
        lines.append(
            "\n¹ the median tokens/s of all of a recipe's runs against the baseline's, at the grid's small "
            "steps and under whatever load each run met; `--time-per-token` measures it properly."
        )
    return "\n".join(lines), best_runs


def plot(best_runs: dict, path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    sizes = [s for s in SIZES if any(k[0] == s for k in best_runs)]
    fig = Figure(figsize=(6 * len(sizes), 4.2))
    FigureCanvasAgg(fig)
    for i, size in enumerate(sizes):
        ax = fig.add_subplot(1, len(sizes), i + 1)
        for (s, recipe), runs in best_runs.items():
            if s != size:
                continue
            tokens = [t for t, _ in runs[0]["curve"]]
            mean = [statistics.mean(r["curve"][k][1] for r in runs) for k in range(len(tokens))]
            colour = {"adamw-cosine": "C0", "muon-cosine": "C1", "muon-wsd": "C2"}.get(recipe.split("/")[0])
            ax.plot(
                tokens,
                mean,
                label=f"{recipe} (lr {runs[0]['lr']:g}, {len(runs)} seeds)",
                color=colour,
                linestyle="-" if "qwen3" in recipe else "--",
            )
        if (size, BASELINE) in best_runs:  # the loss the other recipes must reach
            base = best_runs[(size, BASELINE)]
            ax.axhline(statistics.mean(r["curve"][-1][1] for r in base), color="grey", linewidth=0.8, linestyle=":")
        ax.set_title(f"{size}: validation loss (mean over seeds, best LR)")
        ax.set_xlabel("tokens")
        ax.set_ylabel("val loss")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(str(path), dpi=110)


def time_per_token(sizes: list[str], precisions: list[str], rounds: int) -> str:
    """Muon's cost per token at the batch ``aura pretrain`` uses for these shapes (the ``tiny`` preset's
    16 sequences of 256 tokens, 4,096 tokens per step), apart from the grid's small steps.

    One process, one thread, the Llama block; per size two copies of the same model, one with AdamW and
    one with Muon (``build_optimizer``, ``TorchEngine``: the loop's own optimizer step, clipping included),
    their steps alternated (the order swapped every round) on the same random batch, so a neighbour's load
    falls on both alike. The ratio is the median of the per-round Muon/AdamW step-time ratios."""
    import dataclasses
    from types import SimpleNamespace

    import torch

    torch.set_num_threads(1)
    from aura.distributed import DistInfo
    from aura.models.presets import PRESET_TRAINING, PRESETS, build_model, resolve_spec
    from aura.train.args import TrainArgs
    from aura.train.objectives.objective import CausalLM
    from aura.train.optim.step_engine import TorchEngine, build_optimizer, resolve_precision

    defaults = {f.name: f.default for f in dataclasses.fields(TrainArgs) if f.default is not dataclasses.MISSING}
    batch, seq, vocab = PRESET_TRAINING["tiny"].batch_size, PRESETS["tiny"].seq_len, 8000
    dist = DistInfo(device=torch.device("cpu"))
    lines = [
        (
            f"\n**Time per token** at {batch} × {seq} = {batch * seq:,} tokens per step (one thread, Llama "
            f"block, {rounds} alternated rounds)\n"
        ),
        "| size | precision | AdamW s/step | Muon s/step | of which optimizer (AdamW / Muon) | Muon / AdamW |",
        "|---|---|---|---|---|---|",
    ]
    ids = torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(0))
    data = {"input_ids": ids, "labels": ids}

    def step(model, engine, times: dict) -> None:  # the loop's optimizer step, timed
        t0 = time.perf_counter()
        engine.set_lr(1e-3)
        with engine.autocast():
            loss = CausalLM().loss(model, data)[0] / (batch * (seq - 1))
        engine.backward(loss)
        t1 = time.perf_counter()
        engine.finish(loss.detach())
        t2 = time.perf_counter()
        times["step"].append(t2 - t0)
        times["opt"].append(t2 - t1)

    for size in sizes:
        d, layers, heads, kv, mlp = SIZES[size]
        spec = resolve_spec(
            "tiny", embed_size=d, num_layers=layers, num_heads=heads, num_kv_heads=kv, intermediate_size=mlp
        )
        for precision in precisions:
            precision = resolve_precision(precision, dist.device)
            runs = {}
            for name in ("adamw", "muon"):
                torch.manual_seed(0)
                model = build_model(spec, vocab)
                args = SimpleNamespace(**{**defaults, "optimizer": name, "learning_rate": 1e-3})
                engine = TorchEngine(
                    build_optimizer(model, args, dist.device),
                    precision=precision,
                    dist=dist,
                    max_grad_norm=args.max_grad_norm,
                )
                runs[name] = (model, engine, {"step": [], "opt": []})

            for run in runs.values():  # warm-up: first-touch allocations, oneDNN kernels
                step(*run)
                run[2]["step"].clear()
                run[2]["opt"].clear()
            for r in range(rounds):
                for name in ("adamw", "muon") if r % 2 == 0 else ("muon", "adamw"):
                    step(*runs[name])
            (a, b) = (runs["adamw"][2], runs["muon"][2])
            ratio = statistics.median(m / x for m, x in zip(b["step"], a["step"]))
            med = statistics.median
            lines.append(
                f"| {size} | {precision} | {med(a['step']):.2f} | {med(b['step']):.2f} | "
                f"{med(a['opt']) * 1e3:.0f} ms / {med(b['opt']) * 1e3:.0f} ms | {ratio:.2f}× |"
            )
            print(lines[-1], flush=True)
            from figures import figure

            figure(f"recipe.time_per_token.{size}.{precision}.muon_over_adamw", f"{ratio:.2f}×")
    return "\n".join(lines)


def run_jobs(jobs: list[dict], out: Path, parallel: int, *, dry: bool = False) -> None:
    """Each job not already finished in ``out``, ``parallel`` at a time, each in its own process."""
    if dry:
        return
    todo = [j for j in jobs if not (out / f"{j['name']}.json").is_file()]
    print(f"{len(jobs)} runs, {len(jobs) - len(todo)} already done", flush=True)
    running: list[tuple[dict, subprocess.Popen, float]] = []
    env = dict(os.environ, OMP_NUM_THREADS="1", AURA_LANG="en", AURA_PLAIN="1")
    while todo or running:
        while todo and len(running) < parallel:
            job = todo.pop(0)
            proc = subprocess.Popen(
                [sys.executable, __file__, "--child", json.dumps(job)],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env=env,
            )
            running.append((job, proc, time.time()))
        job, proc, t0 = running.pop(0)
        text = proc.communicate()[0]
        result = next((json.loads(line[7:]) for line in text.splitlines() if line.startswith("RESULT ")), None)
        if result is None:
            print(f"FAILED {job['name']}:\n{text[-3000:]}", flush=True)
            continue
        (out / f"{job['name']}.json").write_text(json.dumps(result))
        final = result["curve"][-1][1] if result["curve"] else float("nan")
        print(
            f"{job['name']}: final val {final:.4f}, {result['tokens_per_s']:,.0f} tok/s, {time.time() - t0:.0f} s",
            flush=True,
        )


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
    p.add_argument(
        "--seeds-at-best",
        default="",
        help="the protocol in one command: sweep --lrs on --seeds (0), a factor 2 past the edge "
        "while seed 0 is best at an edge, then these seeds (e.g. 1,2) at each recipe's best rate "
        "(the table's figures come from them)",
    )
    p.add_argument("--plot", default="", help="PNG of the validation curves at each recipe's best LR")
    p.add_argument("--summary-only", action="store_true", help="run nothing: summarise the finished runs")
    p.add_argument(
        "--time-per-token",
        action="store_true",
        help="run only the time-per-token measurement (AdamW vs Muon steps alternated, 4,096 tokens)",
    )
    p.add_argument("--tpt-precisions", default="fp32,auto", help="precisions of --time-per-token")
    p.add_argument("--tpt-rounds", type=int, default=6, help="alternated rounds of --time-per-token")
    p.add_argument("--child", default="", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        print("RESULT " + json.dumps(run_one(json.loads(a.child))))
        return
    if a.time_per_token:
        table = time_per_token(a.sizes.split(","), a.tpt_precisions.split(","), a.tpt_rounds)
        Path(a.out).mkdir(parents=True, exist_ok=True)
        (Path(a.out) / "time_per_token.md").write_text(table + "\n")
        print(table)
        return
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    data = prepare_data(out, a.corpus)
    sizes, recipes, lrs = a.sizes.split(","), a.recipes.split(","), [float(v) for v in a.lrs.split(",")]

    def job(size: str, recipe: str, lr: float, seed: int) -> dict:
        name = f"{size}_{recipe.replace('/', '_')}_lr{lr:g}_s{seed}_{a.steps}x{a.batch}x{a.seq_length}"
        return {
            "name": name,
            "size": size,
            "recipe": recipe,
            "lr": lr,
            "seed": seed,
            "steps": a.steps,
            "batch": a.batch,
            "seq": a.seq_length,
            "eval_every": a.eval_every,
            "eval_batches": a.eval_batches,
            "data": str(data),
            "run_dir": str(out / "runs" / name),
        }

    def seed0(size: str, recipe: str) -> dict[float, float]:  # lr -> final val loss of seed 0, this shape
        return {
            r["lr"]: r["curve"][-1][1]
            for r in finished(out, [size], [recipe])
            if r["seed"] == 0 and (r["steps"], r["batch"], r["seq"]) == (a.steps, a.batch, a.seq_length)
        }

    run_jobs(
        [job(z, r, lr, int(s)) for z in sizes for s in a.seeds.split(",") for lr in lrs for r in recipes],
        out,
        a.jobs,
        dry=a.summary_only,
    )
    if a.seeds_at_best and not a.summary_only:
        # a factor 2 past the edge wherever seed 0 is best at the edge of what it ran, again until no recipe's
        # best rate is at an edge of its sweep (at most 6 extensions), then the other seeds at the best rate
        for _ in range(6):
            edge = []
            for size in sizes:
                for recipe in recipes:
                    swept = seed0(size, recipe)
                    best = min(swept, key=swept.get) if swept else None
                    if best is not None and len(swept) > 1 and best in (min(swept), max(swept)):
                        edge.append(job(size, recipe, best * 2 if best == max(swept) else best / 2, 0))
            if not edge:
                break
            run_jobs(edge, out, a.jobs)
        seeds = []
        for size in sizes:
            for recipe in recipes:
                done = seed0(size, recipe)
                if done:
                    best = min(done, key=done.get)
                    seeds += [job(size, recipe, best, int(s)) for s in a.seeds_at_best.split(",")]
        run_jobs(seeds, out, a.jobs)
    table, best = summarise(finished(out, sizes, recipes), sizes, recipes)
    (out / "table.md").write_text(table + "\n")
    print(table)
    if a.plot:
        plot(best, Path(a.plot))
        print(f"plot: {a.plot}")


# The grid of docs/benchmarks.md: bench/recipe_grid.sh (hours, resumable) runs these, niced, and the plot.
# reproduce: --corpus /tmp/bench_es.txt --out /tmp/recipe-bench --seq-length 64 --eval-batches 4 --jobs 2 --seeds 0 \
#     --seeds-at-best 1,2 --sizes tiny --steps 80 --eval-every 10
# reproduce: --corpus /tmp/bench_es.txt --out /tmp/recipe-bench --seq-length 64 --eval-batches 4 --jobs 2 --seeds 0 \
#     --seeds-at-best 1,2 --sizes small --steps 50 --eval-every 5
# reproduce: --time-per-token --sizes tiny,small --tpt-precisions fp32,auto
# reproduce-needs: file:/tmp/bench_es.txt
# reproduce-quick: --out {tmp} --sizes tiny --recipes adamw-cosine/llama,muon-wsd/qwen3 --seeds 0 --seeds-at-best 1 \
#     --lrs 1e-3 --steps 2 --seq-length 32 --batch 2 --eval-every 1 --eval-batches 1 --jobs 2

if __name__ == "__main__":
    main()
