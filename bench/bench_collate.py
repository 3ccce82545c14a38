"""The host's part of a fine-tuning step: the batches of an epoch from ``SFTDataSource``/``PairSource`` with
``aura.data.sft_batches.collate`` (one flat list per tensor, one numpy conversion, positions and mask computed
whole) against the same sources with a per-example collate (each example's ids and labels written into the
batch's tensors by ``torch.tensor``, what ``collate`` did before).

On a GPU the loop syncs once per optimizer step and then builds the next step's micro-batches, so this time is
time the GPU waits. The kinds are what ``aura finetune`` builds: ``sft`` (padded rows), ``sft_free`` (the
padding-free rows that packed-capable models get), ``packed`` (``--packing``: rows of ``--max-length`` tokens)
and ``dpo`` (the shared-prompt rows ``[prompt | chosen | rejected]``). The examples are ``bench_batch_packing``'s
(random tokens, log-normal prompt and answer lengths up to 512 tokens). Each kind runs a whole epoch both ways,
``--repeats`` times alternated; the medians give the ratio, and every batch is checked equal both ways.

    python bench/bench_collate.py [--examples 512] [--batch-size 16] [--repeats 15]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def per_example_collate(rows, *, pad_id, packing=False, pad_to_multiple_of=1, buckets=()):
    """The peer: ``collate``'s tensors, each example written into them by ``torch.tensor`` and slicing."""
    import torch

    from aura.data.sft_batches import IGNORE_INDEX, padded_width

    lengths = [sum(len(e.input_ids) for e in row) for row in rows]
    T = padded_width(max(lengths), pad_to_multiple_of=pad_to_multiple_of, buckets=buckets)
    B = len(rows)
    input_ids = torch.full((B, T), pad_id, dtype=torch.long)  # (B, T)
    labels = torch.full((B, T), IGNORE_INDEX, dtype=torch.long)  # (B, T)
    position_ids = torch.zeros((B, T), dtype=torch.long)  # (B, T)
    attention_mask = torch.zeros((B, T), dtype=torch.long)  # (B, T)
    for b, row in enumerate(rows):
        pos = 0
        for ex in row:
            n = len(ex.input_ids)
            input_ids[b, pos : pos + n] = torch.tensor(ex.input_ids)
            labels[b, pos : pos + n] = torch.tensor(ex.labels)
            position_ids[b, pos : pos + n] = torch.arange(n)
            pos += n
        attention_mask[b, :pos] = 1
        position_ids[b, pos:] = torch.arange(T - pos)
    if packing:
        tokens = torch.tensor(sum(lengths))
        return {"input_ids": input_ids, "labels": labels, "position_ids": position_ids, "input_tokens": tokens}
    return {"input_ids": input_ids, "labels": labels, "attention_mask": attention_mask}


@contextmanager
def collating_with(fn):
    """Every source's collate replaced by ``fn`` (``collate_padding_free`` and the pairs' rows call it too)."""
    from aura.data import preference, sft_batches

    saved = sft_batches.collate, preference.collate
    sft_batches.collate = preference.collate = fn
    try:
        yield
    finally:
        sft_batches.collate, preference.collate = saved


def source(kind: str, n: int, batch_size: int):
    from bench_batch_packing import examples, pairs

    from aura.data.preference import PairSource
    from aura.data.sft_batches import SFTDataSource, length_buckets

    shapes = {"batch_size": batch_size, "pad_id": 0, "seed": 0, "buckets": length_buckets(2048)}
    if kind == "dpo":
        return PairSource(pairs(n, seed=1), shared=True, **shapes)
    if kind == "packed":
        return SFTDataSource(examples(n, seed=1), packing=True, max_length=2048, **shapes)
    return SFTDataSource(examples(n, seed=1), padding_free=kind == "sft_free", **shapes)


def epoch(src) -> list[dict]:
    src.start_epoch(0)
    out = []
    while (batch := src.next_batch()) is not None:
        out.append(batch)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--examples", type=int, default=512, help="examples (DPO: pairs) in the epoch")
    p.add_argument("--batch-size", type=int, default=16, help="examples per micro-batch (packed: rows)")
    p.add_argument("--kinds", default="sft,sft_free,packed,dpo")
    p.add_argument("--repeats", type=int, default=15)
    a = p.parse_args()
    import torch
    from figures import figure, ratio

    from aura.data.sft_batches import collate

    print(f"{a.examples} examples, micro-batches of {a.batch_size}, {torch.get_num_threads()} threads")
    for kind in a.kinds.split(","):
        src = source(kind, a.examples, a.batch_size)
        ways = {"per-example": per_example_collate, "flat": collate}
        seconds: dict[str, list[float]] = {k: [] for k in ways}
        batches: dict[str, list[dict]] = {}
        for _ in range(a.repeats):
            for name, fn in ways.items():
                with collating_with(fn):
                    t = time.perf_counter()
                    batches[name] = epoch(src)
                    seconds[name].append(time.perf_counter() - t)
        old, new = batches.values()
        assert len(old) == len(new) and all(
            b.keys() == c.keys() and all(torch.equal(b[k], c[k]) for k in b) for b, c in zip(old, new)
        ), "the two collates must give the same batches"
        med = {k: statistics.median(v) for k, v in seconds.items()}
        tokens = sum(b["input_ids"].numel() for b in new)
        print(f"  {kind}: {len(new)} micro-batches, {tokens} tokens laid out")
        for name in ways:
            each = med[name] / len(new) * 1e3
            per = med[name] / tokens * 1e9
            print(f"    {name:12s} {each:6.2f} ms per micro-batch, {per:5.0f} ns per token (median of {a.repeats})")
        speed = med["per-example"] / med["flat"]
        print(f"    flat: x{speed:.2f} micro-batches/s")
        figure(f"collate.{kind}.speed", ratio(speed))


# reproduce:
# reproduce-quick: --examples 64 --repeats 1

if __name__ == "__main__":
    main()
