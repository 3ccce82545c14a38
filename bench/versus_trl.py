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


def main(script: str, children: dict[str, Callable[[argparse.Namespace], dict]], *, steps: int) -> None:
    """``children[side](args)`` trains one side and returns {"seconds", "tokens"}; run as ``--child SIDE``
    it prints them with the peak RSS, run plainly it starts both sides and prints the comparison."""
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=steps)
    p.add_argument("--max-length", type=int, default=256)
    p.add_argument("--child", choices=list(children))
    p.add_argument("--model")
    p.add_argument("--out")
    a = p.parse_args()
    if a.child:
        result = children[a.child](a)
        result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print("RESULT " + json.dumps(result), flush=True)
        return
    with tempfile.TemporaryDirectory() as tmp:
        model = build_model(Path(tmp))
        results = {}
        for side in children:
            env = dict(os.environ, AURA_PLAIN="1", AURA_LANG="en", TOKENIZERS_PARALLELISM="false")
            r = subprocess.run([sys.executable, script, "--child", side, "--model", str(model), "--out",
                                str(Path(tmp) / side), "--steps", str(a.steps), "--max-length", str(a.max_length)],
                               capture_output=True, text=True, env=env)
            line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
            if r.returncode != 0 or not line:
                sys.exit(f"{side} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
            results[side] = json.loads(line[-1][7:])
            results[side]["tokens_per_s"] = results[side]["tokens"] / results[side]["seconds"]
    for side, r in results.items():
        print(f"{side:5s} {r['tokens']:>8,} tokens  {r['seconds']:7.1f} s  {r['tokens_per_s']:8.1f} tok/s  "
              f"peak RSS {r['peak_rss_mb']:7.0f} MB")
    a_, t_ = results["aura"], results["trl"]
    print(f"speed ratio aura/trl: {a_['tokens_per_s'] / t_['tokens_per_s']:.2f}x  "
          f"memory ratio aura/trl: {a_['peak_rss_mb'] / t_['peak_rss_mb']:.2f}")
