"""A micro-batch's sequences packed several to a row (``aura.data.sft_batches.pack_batch``) against one per row, in
LoRA DPO's step and LoRA SFT's step on the CPU; and an optimizer step's micro-batches sorted by length against the
data order (``SFTDataSource(window=...)``).

* DPO: both layouts are the shared-prompt rows (``[prompt | chosen | rejected]``, the prompt once); packing puts
  short pairs beside a long one. The step is the whole of a micro-batch's work: the reference pass (adapter off),
  the policy's forward and the backward (``DPO.loss``).
* SFT: padded rows against ``SFTDataSource(padding_free=True)``'s; the step is the summed token loss and its
  backward (``token_loss_sum``).
* DPO in two rows per pair (``dpo_rows``: a model that cannot take a pair in one row, flash-attention or a
  sliding window): the 2B sequences padded against ``collate_pairs(padding_free=True)``'s; the step is DPO's.
* KTO: the answers and the KL answers padded against ``collate_unpaired(padding_free=True)``'s; the reference's
  shared-prompt rows are packed in both layouts (what this measures is the policy's two passes). The step is
  ``KTO.loss``: the reference pass (adapter off), the policy on the KL answers, on the answers, the backward.
* Sorted steps (``sft_sorted``: padded SFT rows; ``sft_free_sorted``: SFT's padding-free rows, what ``aura
  finetune`` uses where the model keeps packed examples apart; ``dpo_sorted``: DPO's shared-prompt rows): the
  ``--window`` micro-batches of each optimizer step hold the same examples, longest first, against the data order
  (shuffled as a run shuffles it). The check is the step's summed loss, as the loop sums it.

Packing keeps a layout only where it computes fewer tokens and no more attention, so the two layouts give the
same losses (checked here) from less work. The model is ``bench_rollout``'s random Llama at hidden 512
(``--layers`` layers, 8 heads, MLP 1,536, vocabulary 8,000) with LoRA r 16 on every projection, fp32. The
sequences are random tokens with lengths drawn from log-normal laws (prompt median 120 tokens, each answer median
150, sigma 0.7; prompt + answer cut at 512), a spread like that of public preference and instruction sets, not a
measured one: the gain follows the spread, and sequences of equal lengths gain nothing. Each micro-batch size
runs ``--batches`` micro-batches both ways, alternated ``--repeats`` times; medians of the summed wall times. A
speed is published only where some micro-batch packed (else both ways are the same work and the ratio is the
timer's noise).

    python bench/bench_batch_packing.py                                   # DPO, SFT
    python bench/bench_batch_packing.py --runs kto:2,kto:8                # KTO
    python bench/bench_batch_packing.py --runs dpo_rows:2,dpo_rows:8      # pairs in two rows
    python bench/bench_batch_packing.py --runs sft_sorted:2,sft_sorted:8,dpo_sorted:2,dpo_sorted:8 --batches 8
    python bench/bench_batch_packing.py --runs sft_free_sorted:2,sft_free_sorted:8 --batches 8
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _draws(r: random.Random, vocab: int) -> tuple[list[int], list[int], list[int]]:
    """A prompt and two answers of random tokens, their lengths drawn as the module docstring says."""

    def draw(median: float) -> int:
        return max(4, int(r.lognormvariate(0, 0.7) * median))

    prompt = min(draw(120), 400)
    p = [r.randrange(3, vocab) for _ in range(prompt)]
    a, b = ([r.randrange(3, vocab) for _ in range(min(draw(150), 512 - prompt))] for _ in range(2))
    return p, a, b


def pairs(n: int, seed: int, vocab: int = 8000) -> list:
    """``n`` preference pairs (``EncodedPair``) of random tokens below ``vocab``."""
    from aura.data.preference import EncodedPair
    from aura.data.sft_batches import Encoded

    r, out = random.Random(seed), []
    for _ in range(n):
        p, a, b = _draws(r, vocab)
        out.append(EncodedPair(Encoded(p + a, [-100] * len(p) + a), Encoded(p + b, [-100] * len(p) + b)))
    return out


def examples(n: int, seed: int, vocab: int = 8000) -> list:
    """``n`` SFT examples (``Encoded``: a prompt and one answer, labelled) of random tokens below ``vocab``."""
    from aura.data.sft_batches import Encoded

    r, out = random.Random(seed), []
    for _ in range(n):
        p, a, _ = _draws(r, vocab)
        out.append(Encoded(p + a, [-100] * len(p) + a))
    return out


def rated(n: int, seed: int, vocab: int = 8000) -> list:
    """``n`` KTO examples (``EncodedUnpaired``: a prompt, its answer and, for the KL estimate, the previous
    example's answer after it; rated good and bad in turn) of random tokens below ``vocab``."""
    from aura.data.kto import EncodedUnpaired
    from aura.data.sft_batches import Encoded

    r = random.Random(seed)
    drawn = [_draws(r, vocab)[:2] for _ in range(n)]

    def seq(prompt: list[int], answer: list[int]) -> Encoded:
        return Encoded(prompt + answer, [-100] * len(prompt) + answer)

    return [EncodedUnpaired(seq(p, a), seq(p, drawn[i - 1][1]), label=i % 2 == 0) for i, (p, a) in enumerate(drawn)]


def layouts(kind: str, size: int, batches: int, window: int) -> dict[str, list[dict]]:
    """The ``batches`` micro-batches of ``size`` sequences of ``kind`` (dpo, dpo_rows, sft, kto: one per row, then
    packed; sft_sorted, sft_free_sorted, dpo_sorted: in the data order, then each ``window``'s sorted by length)."""
    from unittest import mock

    from aura.data.kto import collate_unpaired
    from aura.data.preference import PairSource, collate_pairs
    from aura.data.sft_batches import SFTDataSource

    if kind.endswith("_sorted"):
        common = dict(batch_size=size, pad_id=0, max_length=1024, seed=0)
        if kind == "dpo_sorted":
            data, source = pairs(size * batches, seed=size), lambda **k: PairSource(data, shared=True, **common, **k)
        else:
            common["padding_free"] = kind == "sft_free_sorted"
            data, source = examples(size * batches, seed=size), lambda **k: SFTDataSource(data, **common, **k)
        plain, tidy = source(), source(window=window)
        return {
            "data order": [plain.batch(0, i) for i in range(batches)],
            "sorted": [tidy.batch(0, i) for i in range(batches)],
        }

    if kind == "dpo":
        data = [pairs(size, seed=1000 * size + i) for i in range(batches)]

        def alone(lengths, **shapes):
            return [[i] for i in range(len(lengths))]

        with mock.patch("aura.data.preference.batch_grouping", alone):
            apart = [collate_pairs(d, pad_id=0, shared=True) for d in data]
        return {"one per row": apart, "packed": [collate_pairs(d, pad_id=0, shared=True) for d in data]}
    if kind == "dpo_rows":
        data = [pairs(size, seed=1000 * size + i) for i in range(batches)]
        return {
            "one per row": [collate_pairs(d, pad_id=0) for d in data],
            "packed": [collate_pairs(d, pad_id=0, padding_free=True) for d in data],
        }
    if kind == "kto":
        data = [rated(size, seed=1000 * size + i) for i in range(batches)]
        return {
            "one per row": [collate_unpaired(d, pad_id=0, shared=True) for d in data],
            "packed": [collate_unpaired(d, pad_id=0, shared=True, padding_free=True) for d in data],
        }
    data = examples(size * batches, seed=size)
    common = dict(batch_size=size, pad_id=0, max_length=1024, shuffle=False)
    padded, free = SFTDataSource(data, **common), SFTDataSource(data, **common, padding_free=True)
    return {
        "one per row": [padded.batch(0, i) for i in range(batches)],
        "packed": [free.batch(0, i) for i in range(batches)],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--runs", default="dpo:2,dpo:8,sft:8", help="objective:micro-batch size, comma-separated")
    p.add_argument("--batches", type=int, default=4)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--window", type=int, default=4, help="micro-batches per optimizer step (the *_sorted runs)")
    a = p.parse_args()
    import torch
    from bench_rollout import policy
    from figures import figure, ratio

    from aura.train.objectives.kto import KTO
    from aura.train.objectives.objective import count_inputs, token_loss_sum
    from aura.train.objectives.preference import DPO

    model, dpo, kto = policy(a.layers, hidden=512, heads=8, kv_heads=8, vocab=8000).train(), DPO(), KTO()
    losses = {
        "dpo": lambda b: dpo.loss(model, b)[0],
        "dpo_rows": lambda b: dpo.loss(model, b)[0],
        "sft": lambda b: token_loss_sum(model, b),
        "kto": lambda b: kto.loss(model, b)[0],
    }
    losses.update(sft_sorted=losses["sft"], sft_free_sorted=losses["sft"], dpo_sorted=losses["dpo"])
    print(f"{a.layers}-layer Llama (hidden 512) + LoRA r 16, fp32, {torch.get_num_threads()} threads")
    for run in a.runs.split(","):
        kind, size = run.split(":")[0], int(run.split(":")[1])
        both = layouts(kind, size, a.batches, a.window)
        base, new = both

        def step(batch, kind=kind) -> float:
            loss = losses[kind](batch)
            loss.backward()
            model.zero_grad(set_to_none=True)
            return loss.item()

        first = {k: [step(b) for b in v] for k, v in both.items()}  # also a warm-up
        if kind.endswith("_sorted"):  # the same examples in other micro-batches: the same summed loss
            first = {k: [sum(v)] for k, v in first.items()}
        for x, y in zip(*first.values()):
            assert abs(x - y) <= 1e-4 * max(1.0, abs(x)), f"the two layouts must give the same loss: {x} != {y}"
        seconds: dict[str, list[float]] = {k: [] for k in both}
        for _ in range(a.repeats):
            for name, batches in both.items():
                t = time.perf_counter()
                for b in batches:
                    step(b)
                seconds[name].append(time.perf_counter() - t)
        med = {k: statistics.median(v) for k, v in seconds.items()}
        # every pass's rows (KTO: the answers, the KL answers and the reference's rows)
        passes = {k: [x for b in v for name, x in b.items() if name.endswith("input_ids")] for k, v in both.items()}
        tokens = {k: sum(x.numel() for x in v) for k, v in passes.items()}
        rows = {k: sum(x.shape[0] for x in v) for k, v in passes.items()}
        real = sum(count_inputs(b) for b in both[new])
        unit = "pairs" if kind.startswith("dpo") else "examples"
        print(f"  {kind.upper()}, {size} {unit} per micro-batch, {a.batches} micro-batches ({real} real tokens):")
        for name in both:
            print(
                f"    {name:12s} {rows[name]:3d} rows, {tokens[name]:6d} tokens computed, "
                f"{med[name]:7.2f} s (median of {a.repeats})"
            )
        speed, computed = med[base] / med[new], tokens[new] / tokens[base]
        print(f"    {new}: x{speed:.2f} {unit}/s, x{computed:.2f} the tokens computed")
        figure(f"batch_packing.{kind}_b{size}.tokens", ratio(computed))
        if tokens[new] < tokens[base]:
            figure(f"batch_packing.{kind}_b{size}.speed", ratio(speed))
        else:
            print("    (the same tokens both ways: the same work, so no speed figure)")


# reproduce:
# reproduce: --runs kto:2,kto:8
# reproduce: --runs dpo_rows:2,dpo_rows:8
# reproduce: --runs sft_sorted:2,sft_sorted:8,dpo_sorted:2,dpo_sorted:8 --batches 8
# reproduce: --runs sft_free_sorted:2,sft_free_sorted:8 --batches 8
# reproduce-quick: --layers 1 --runs dpo:8,dpo_rows:8,sft:8,kto:8,sft_sorted:4,sft_free_sorted:4,dpo_sorted:4 \
#   --batches 2 --window 2 --repeats 1

if __name__ == "__main__":
    main()
