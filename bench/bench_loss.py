"""Chunked linear + cross entropy against the plain loss (full logits) at vocab 128k, on this machine.

Each variant runs in its own process: it builds the hidden states (tokens x d) and the head (V x d), records
its peak resident memory (``ru_maxrss``), runs one forward + backward of the loss (head included), and
records the peak again: the difference is what the loss itself needed at its peak. Then it times a few
more steps for tokens/s. Prints both variants and the ratios chunked / plain.

    python bench/bench_loss.py                       # vocab 128256, d 2048, 2048 tokens, fp32
    python bench/bench_loss.py --tokens 4096 --steps 3
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _peak_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def run_variant(
    variant: str, *, vocab: int, d: int, tokens: int, steps: int, threads: int, device: str = "cpu", dtype: str = "fp32"
) -> dict:
    import torch

    from aura.train.objectives.chunked_loss import linear_cross_entropy

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    dev = torch.device(device)
    hidden = (torch.randn(tokens, d, device=dev) * 0.5).requires_grad_(True)  # (N, d)
    weight = torch.nn.Parameter(torch.randn(vocab, d, device=dev) * 0.02)  # (V, d)
    targets = torch.randint(0, vocab, (tokens,), device=dev)
    targets[: tokens // 10] = -100  # a prompt

    cuda = dev.type == "cuda"
    autocast = torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dtype == "bf16")

    def step():
        hidden.grad, weight.grad = None, None
        with autocast:
            if variant == "plain":
                logits = torch.nn.functional.linear(hidden, weight)  # (N, V)
                loss = torch.nn.functional.cross_entropy(logits.float(), targets, ignore_index=-100, reduction="sum")
            else:
                loss = linear_cross_entropy(hidden, weight, None, targets)
        loss.backward()
        return float(loss)

    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.max_memory_allocated()
    else:
        before = _peak_bytes()
    loss = step()
    peak = (torch.cuda.max_memory_allocated() if cuda else _peak_bytes()) - before
    start = time.perf_counter()
    for _ in range(steps):
        step()
    if cuda:
        torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / steps
    return {"variant": variant, "loss": loss, "peak_bytes": peak, "tokens_per_s": tokens / seconds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", type=int, default=128256)
    ap.add_argument("--d-model", type=int, default=2048)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=min(4, os.cpu_count() or 1))
    ap.add_argument("--device", default="cpu", help="cpu or cuda (peak: max_memory_allocated)")
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32", help="bf16: under autocast")
    ap.add_argument("--json", action="store_true", help="print one JSON object (the GPU suite reads it)")
    ap.add_argument("--variant", choices=["plain", "chunked"], help=argparse.SUPPRESS)  # one child process
    a = ap.parse_args()
    shape = dict(
        vocab=a.vocab, d=a.d_model, tokens=a.tokens, steps=a.steps, threads=a.threads, device=a.device, dtype=a.dtype
    )
    if a.variant:
        print(json.dumps(run_variant(a.variant, **shape)))
        return
    results = {}
    for variant in ("plain", "chunked"):
        cmd = [
            sys.executable,
            __file__,
            "--variant",
            variant,
            "--vocab",
            str(a.vocab),
            "--d-model",
            str(a.d_model),
            "--tokens",
            str(a.tokens),
            "--steps",
            str(a.steps),
            "--threads",
            str(a.threads),
            "--device",
            a.device,
            "--dtype",
            a.dtype,
        ]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stdout
        results[variant] = json.loads(out.strip().splitlines()[-1])
    p, c = results["plain"], results["chunked"]
    ratios = {
        "memory": c["peak_bytes"] / p["peak_bytes"],
        "speed": c["tokens_per_s"] / p["tokens_per_s"],
        "loss_rel_diff": abs(c["loss"] - p["loss"]) / abs(p["loss"]),
    }
    if a.json:
        print(json.dumps({"plain": p, "chunked": c, **ratios}))
        return
    for v, r in results.items():
        print(
            f"{v:8s} loss {r['loss']:.4f}  peak {r['peak_bytes'] / 2**20:8.0f} MiB  {r['tokens_per_s']:8.0f} tokens/s"
        )
    print(f"vocab {a.vocab}, d {a.d_model}, {a.tokens} tokens, {a.dtype} on {a.device}, {a.threads} threads")
    print(
        f"chunked / plain: peak memory x{ratios['memory']:.3f}, tokens/s x{ratios['speed']:.2f}, "
        f"loss difference {ratios['loss_rel_diff']:.1e} (relative)"
    )
    from figures import figure

    figure("chunked_loss.peak_memory", f"×{ratios['memory']:.3f}")
    figure("chunked_loss.tokens_per_s", f"×{ratios['speed']:.2f}")


# reproduce: --tokens 1024 --d-model 1024 --steps 1 --threads 1
# reproduce-quick: --tokens 64 --d-model 64 --vocab 4096 --steps 1 --threads 1

if __name__ == "__main__":
    main()
