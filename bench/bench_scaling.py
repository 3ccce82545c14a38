"""Data-parallel scaling of `aura pretrain` on this machine: 1 process vs 2 DDP ranks (gloo).

    .venv/bin/python bench/bench_scaling.py [--steps 30] [--batch-size 8] [--precision auto]
                                            [--corpus /tmp/bench_es.txt]

Model: the tiny Llama (`--model-preset tiny`: 4 layers, d 256, 4 heads, 2 KV heads, MLP
768, context 256), so compute dominates the gradient all-reduce. Every run goes through the real CLI
with the same per-rank micro-batch, so 2 ranks process twice the tokens per step:

* 1 rank, 1 thread   (OMP_NUM_THREADS=1): the per-core baseline;
* 1 rank, 2 threads  (OMP_NUM_THREADS=2): the whole machine used by one process's intra-op threads;
* 2 ranks x 1 thread (torchrun --nproc_per_node=2, OMP_NUM_THREADS=1): the whole machine used by DDP.

The machine has 2 cores, so 2 ranks must run one thread each; comparing them with "1 rank, 1 thread"
gives the classic scaling efficiency (tokens/s of N ranks / (N x tokens/s of 1)), and comparing them
with "1 rank, 2 threads" answers the practical question: on one CPU box, is DDP faster than letting
one process use every core? Tokens/s is the harmonic mean of the per-step rates logged after step 3
(the loop's meter excludes eval and checkpoint pauses).
"""

from __future__ import annotations

import argparse
import csv
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def prepare_data(work: Path, corpus: str | None) -> Path:
    from aura.data import EMBEDDED_CORPUS
    from aura.data.prepare import PrepareConfig, prepare
    from aura.tokenizer.train import train_bpe

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
                max_tokens=2_000_000,
                val_fraction=0.001,
            )
        )
    )


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(data: Path, out: Path, *, ranks: int, threads: int, steps: int, batch: int, precision: str) -> float:
    """tokens/s (all ranks) of one `aura pretrain` run."""
    args = [
        "-m",
        "aura",
        "pretrain",
        "--data",
        str(data),
        "--output-dir",
        str(out),
        "--model-preset",
        "tiny",
        "--batch-size",
        str(batch),
        "--gradient-accumulation-steps",
        "1",
        "--max-steps",
        str(steps),
        "--log-interval",
        "1",
        "--save-steps",
        "0",
        "--eval-batches",
        "1",
        "--sample-tokens",
        "0",
        "--precision",
        precision,
        "--strategy",
        "ddp" if ranks > 1 else "auto",
        "--backend",
        "gloo",
    ]
    launcher = (
        [sys.executable]
        if ranks == 1
        else [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={ranks}", f"--master_port={_port()}"]
    )
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), AURA_PLAIN="1", AURA_LANG="en", PYTHONPATH=str(ROOT))
    proc = subprocess.run([*launcher, *args], env=env, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        sys.exit(proc.stdout[-3000:] + proc.stderr[-3000:])
    rows = [r for r in csv.DictReader(open(out / "training_log.csv")) if r["kind"] == "step"]
    rates = [float(r["tokens_per_s"]) for r in rows if int(r["step"]) > 3]
    return len(rates) / sum(1 / r for r in rates)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=8, help="micro-batch per rank (sequences of 256)")
    p.add_argument("--precision", default="auto", choices=("auto", "fp32", "bf16"))
    p.add_argument("--corpus", default="/tmp/bench_es.txt", help="text file (falls back to the embedded corpus)")
    a = p.parse_args()
    import torch

    from aura.train.optim.step_engine import resolve_precision

    precision = resolve_precision(a.precision, torch.device("cpu"))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        data = prepare_data(work, a.corpus)
        common = dict(steps=a.steps, batch=a.batch_size, precision=precision)
        one_1 = run(data, work / "r1t1", ranks=1, threads=1, **common)
        one_2 = run(data, work / "r1t2", ranks=1, threads=2, **common)
        two_1 = run(data, work / "r2t1", ranks=2, threads=1, **common)
    print()
    print(
        f"tiny Llama (4 x d256, ctx 256), micro-batch {a.batch_size} per rank, {a.steps} steps, precision "
        f"{precision}, gloo, torch {torch.__version__}, {os.cpu_count()} CPU cores"
    )
    print(f"{'run':<26}{'tokens/s':>10}")
    print(f"{'1 rank x 1 thread':<26}{one_1:>10,.0f}")
    print(f"{'1 rank x 2 threads':<26}{one_2:>10,.0f}")
    print(f"{'2 ranks x 1 thread (DDP)':<26}{two_1:>10,.0f}")
    print(
        f"scaling efficiency, 2 ranks vs 2 x (1 rank, 1 thread): {two_1 / (2 * one_1):.2f} "
        f"(speed-up {two_1 / one_1:.2f}x)"
    )
    print(f"ratio 2 ranks x 1 thread / 1 rank x 2 threads: {two_1 / one_2:.2f}x")
    from figures import figure, ratio

    figure("scaling.efficiency_2_ranks", f"{two_1 / (2 * one_1):.2f}")
    figure("scaling.ddp_vs_2_threads", ratio(two_1 / one_2))


# reproduce: --steps 20
# reproduce-quick: --steps 5 --batch-size 2

if __name__ == "__main__":
    main()
