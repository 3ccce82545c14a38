"""The harness shared by the benchmarks that race Aura against TRL (bench_finetune.py, bench_dpo.py): one
tiny Llama built here, each side in its own subprocess (``--child aura|trl``), tokens/s and the child's
peak resident set size, printed side by side with the Aura/TRL ratios."""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def build_model(root: Path) -> Path:
    """A 4-layer Llama (hidden 256, vocab 2000) with its own byte-level BPE, as a Hugging Face directory."""
    from tests.tiny_models import build_llama, train_tokenizer

    tok = train_tokenizer(root / "tok", vocab_size=2000)
    return build_llama(root / "llama", tok, hidden=256, layers=4, heads=4, kv_heads=2, intermediate=768, ctx=512)


def train_aura(out: str, **flags) -> dict:
    """The Aura side: ``aura finetune`` with ``flags`` (FinetuneConfig fields) into ``out``; wall seconds of
    the whole command and the padded tokens of the steps it took (its training_log.csv)."""
    import csv
    import time

    from aura.train.finetune_config import FinetuneConfig
    from aura.train.finetune import finetune

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


def main(script: str, children: dict[str, Callable[[argparse.Namespace], dict]], *, steps: int,
         name: str = "") -> None:
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
        result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print("RESULT " + json.dumps(result), flush=True)
        return
    from figures import figure, ratio

    sides = list(children)
    print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
    runs: dict[str, list[dict]] = {side: [] for side in sides}
    with tempfile.TemporaryDirectory() as tmp:
        model = build_model(Path(tmp))
        for repeat in range(a.repeats):
            for side in (sides if repeat % 2 == 0 else sides[::-1]):
                env = dict(os.environ, AURA_PLAIN="1", AURA_LANG="en", TOKENIZERS_PARALLELISM="false")
                out = Path(tmp) / f"{side}-{repeat}"
                r = subprocess.run([sys.executable, script, "--child", side, "--model", str(model), "--out",
                                    str(out), "--steps", str(a.steps), "--max-length", str(a.max_length)],
                                   capture_output=True, text=True, env=env)
                line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
                if r.returncode != 0 or not line:
                    sys.exit(f"{side} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
                run = json.loads(line[-1][7:])
                runs[side].append(run)
                print(f"run {repeat + 1} {side:5s} {run['seconds']:7.1f} s  {run['tokens']:>8,} tokens "
                      f"(own count {run['own_tokens']:,})  {run['tokens'] / run['seconds']:8.1f} tok/s  "
                      f"{a.steps / run['seconds']:.3f} steps/s  peak RSS {run['peak_rss_mb']:7.0f} MB", flush=True)
    best = {side: min(runs[side], key=lambda r: r["seconds"]) for side in sides}
    for side, r in best.items():
        print(f"fastest {side:5s} {r['tokens']:>8,} tokens  {r['seconds']:7.1f} s  "
              f"{r['tokens'] / r['seconds']:8.1f} tok/s  peak RSS {max(x['peak_rss_mb'] for x in runs[side]):7.0f} MB")
    a_, t_ = best["aura"], best["trl"]
    steps_ratio = t_["seconds"] / a_["seconds"]
    tokens_ratio = (a_["tokens"] / a_["seconds"]) / (t_["tokens"] / t_["seconds"])
    memory = max(x["peak_rss_mb"] for x in runs["aura"]) / max(x["peak_rss_mb"] for x in runs["trl"])
    print(f"fastest of {a.repeats}, aura/trl: steps/s x{steps_ratio:.2f} (same steps, same examples), "
          f"tokens/s x{tokens_ratio:.2f} (tokens counted the same way: {a_['tokens']:,} vs {t_['tokens']:,}), "
          f"peak RSS x{memory:.2f} (each side's largest)")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    prefix = name or Path(script).stem
    figure(f"{prefix}.steps_per_s", ratio(steps_ratio))
    figure(f"{prefix}.tokens_per_s", ratio(tokens_ratio))
    figure(f"{prefix}.peak_rss", ratio(memory))
