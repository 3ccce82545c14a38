"""Bytes per document of ``aura data prepare``'s exact deduplication: ``aura.data.dedup.DigestSet``
(sorted uint64 runs) against the Python ``set`` of 64-bit ints it replaced, fed the same digests in the
same batches (half of them repeats), measured with tracemalloc in the same run; also the time per batch.

    .venv/bin/python bench/bench_dedup.py --docs 2000000
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np


def run_set(batches: list[np.ndarray]) -> tuple[int, int, float, int]:
    seen: set[int] = set()
    t0 = time.perf_counter()
    tracemalloc.start()
    for part in batches:
        keep = np.ones(len(part), bool)
        for i, k in enumerate(part.tolist()):  # the loop aura/data/prepare.py ran before
            if k in seen:
                keep[i] = False
            else:
                seen.add(k)
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return current, peak, time.perf_counter() - t0, len(seen)


def run_digest_set(batches: list[np.ndarray]) -> tuple[int, int, float, int]:
    from aura.data.dedup import DigestSet

    seen = DigestSet()
    t0 = time.perf_counter()
    tracemalloc.start()
    for part in batches:
        seen.add(part)
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return current, peak, time.perf_counter() - t0, len(seen)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=2_000_000, help="documents fed (half of them repeats)")
    ap.add_argument("--batch", type=int, default=2000, help="documents per batch (data prepare: ~1 MB of text)")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    distinct = rng.integers(0, 1 << 63, args.docs // 2, dtype=np.uint64)
    stream = np.concatenate([distinct, distinct[rng.integers(0, len(distinct), args.docs - len(distinct))]])
    rng.shuffle(stream)
    batches = [stream[i : i + args.batch] for i in range(0, len(stream), args.batch)]
    rows = []
    for name, fn in (("python set of int", run_set), ("DigestSet (aura)", run_digest_set)):
        current, peak, seconds, n = fn(batches)
        rows.append((name, current / n, peak / n, seconds))
        print(
            f"{name:20s} distinct={n:,} held={current / n:6.1f} B/doc peak={peak / n:6.1f} B/doc time={seconds:6.2f} s",
            flush=True,
        )
    (_, held_set, peak_set, t_set), (_, held_ds, peak_ds, t_ds) = rows
    print(
        f"ratio set/DigestSet: held x{held_set / held_ds:.1f}, peak x{peak_set / peak_ds:.1f}, time x{t_set / t_ds:.2f}"
    )
    from figures import figure

    figure("dedup.bytes_per_doc_held", f"{held_ds:.1f} B")
    figure("dedup.held_set_over_digestset", f"×{held_set / held_ds:.1f}")
    figure("dedup.peak_set_over_digestset", f"×{peak_set / peak_ds:.1f}")


# reproduce: --docs 2000000
# reproduce-quick: --docs 20000

if __name__ == "__main__":
    main()
