"""Preference pairs packed several to a row (``aura.data.preference.pack_batch``) against one pair per row, in
LoRA DPO's step on the CPU.

Both layouts are DPO's shared-prompt rows (``[prompt | chosen | rejected]``, the prompt once); packing puts short
pairs beside a long one, in rows that compute fewer tokens and no more attention. The step is the whole of a
micro-batch's work: the reference pass (adapter off), the policy's forward and the backward (``DPO.loss``).

The model is a random Llama (hidden 512, ``--layers`` layers, 8 heads, vocabulary 8,000) with LoRA r 16 on every
projection, fp32. The pairs are random tokens with lengths drawn from log-normal laws (prompt median 120 tokens,
each answer median 150, sigma 0.7; prompt + answer cut at 512), a spread like that of public preference sets,
not a measured one: the gain follows the spread, and pairs of equal lengths gain nothing. Each micro-batch size
runs ``--batches`` micro-batches both ways, alternated ``--repeats`` times; medians of the summed wall times.
The losses of the two layouts must agree.

    python bench/bench_pair_packing.py
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def policy(layers: int):
    import torch
    import transformers
    from peft import LoraConfig, get_peft_model

    from aura.train.adapters import resolve_target_modules

    cfg = transformers.LlamaConfig(
        vocab_size=8000,
        hidden_size=512,
        num_hidden_layers=layers,
        num_attention_heads=8,
        num_key_value_heads=8,
        intermediate_size=1408,
        max_position_embeddings=1024,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    base = transformers.LlamaForCausalLM(cfg)
    lora = LoraConfig(
        task_type="CAUSAL_LM", r=16, lora_alpha=32, lora_dropout=0.0, target_modules=resolve_target_modules(base, None)
    )
    model = get_peft_model(base, lora)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # a trained adapter: the policy differs from the reference
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.02, generator=g)
    return model.train()


def pairs(n: int, seed: int, vocab: int = 8000) -> list:
    """``n`` pairs of random tokens below ``vocab``, their lengths drawn as the module docstring says."""
    import random

    from aura.data.preference import EncodedPair
    from aura.data.sft_batches import Encoded

    r = random.Random(seed)

    def draw(median: float) -> int:
        return max(4, int(r.lognormvariate(0, 0.7) * median))

    out = []
    for _ in range(n):
        prompt = min(draw(120), 400)
        p = [r.randrange(3, vocab) for _ in range(prompt)]
        a, b = ([r.randrange(3, vocab) for _ in range(min(draw(150), 512 - prompt))] for _ in range(2))
        out.append(EncodedPair(Encoded(p + a, [-100] * prompt + a), Encoded(p + b, [-100] * prompt + b)))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--sizes", default="2,8", help="pairs per micro-batch, comma-separated")
    p.add_argument("--batches", type=int, default=4)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    from unittest import mock

    import torch
    from figures import figure, ratio

    from aura.data.preference import collate_pairs
    from aura.train.objectives.preference import DPO

    model, dpo = policy(a.layers), DPO()

    def one_per_row(lengths, fit, limit=None):
        return [[i] for i in range(len(lengths))]

    print(f"{a.layers}-layer Llama (hidden 512) + LoRA r 16, fp32, {torch.get_num_threads()} threads; DPO step")
    for size in (int(s) for s in a.sizes.split(",")):
        data = [pairs(size, seed=1000 * size + i) for i in range(a.batches)]
        with mock.patch("aura.data.preference.pack_batch", one_per_row):
            unpacked = [collate_pairs(d, pad_id=0, shared=True) for d in data]
        layouts = {"one pair per row": unpacked, "packed": [collate_pairs(d, pad_id=0, shared=True) for d in data]}

        def step(batch) -> float:
            loss, _ = dpo.loss(model, batch)
            loss.backward()
            model.zero_grad(set_to_none=True)
            return loss.item()

        losses = {k: [step(b) for b in v] for k, v in layouts.items()}  # also a warm-up
        for x, y in zip(*losses.values()):
            assert abs(x - y) <= 1e-4 * max(1.0, abs(x)), f"the two layouts must give the same loss: {x} != {y}"
        seconds: dict[str, list[float]] = {k: [] for k in layouts}
        for _ in range(a.repeats):
            for name, batches in layouts.items():
                t = time.perf_counter()
                for b in batches:
                    step(b)
                seconds[name].append(time.perf_counter() - t)
        med = {k: statistics.median(v) for k, v in seconds.items()}
        tokens = {k: sum(b["input_ids"].numel() for b in v) for k, v in layouts.items()}
        rows = {k: sum(b["input_ids"].shape[0] for b in v) for k, v in layouts.items()}
        real = sum(int(b["attention_mask"].sum()) for b in layouts["packed"])
        print(f"  {size} pairs per micro-batch, {a.batches} micro-batches ({real} real tokens):")
        for name in layouts:
            print(
                f"    {name:18s} {rows[name]:3d} rows, {tokens[name]:6d} tokens computed, "
                f"{med[name]:7.2f} s (median of {a.repeats})"
            )
        speed, computed = med["one pair per row"] / med["packed"], tokens["packed"] / tokens["one pair per row"]
        print(f"    packed: x{speed:.2f} pairs/s, x{computed:.2f} the tokens computed")
        figure(f"pair_packing.b{size}.tokens", ratio(computed))
        if rows["packed"] < rows["one pair per row"]:  # else the same work twice: the ratio is the timer's noise
            figure(f"pair_packing.b{size}.speed", ratio(speed))
        else:
            print("    (no micro-batch packed: the same work both ways, so no speed figure)")


# reproduce:
# reproduce-quick: --layers 1 --sizes 8 --batches 2 --repeats 1

if __name__ == "__main__":
    main()
