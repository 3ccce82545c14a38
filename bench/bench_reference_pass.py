"""The reference pass of LoRA DPO, KTO and GRPO: peft's ``disable_adapter()`` against Aura's ``adapters_off``
(``aura.train.lora_views``: the LoRA layers swapped for their bases, found once per model), on the CPU.

The policy is ``bench_rollout``'s (a random Llama of ``--layers`` layers at a tiny width, hidden 128, LoRA r 16 on
every projection); the batch is DPO's shared-prompt rows of ``--pairs`` pairs (prompt ~96 tokens, answers ~48).
Two figures, medians of ``--repeats`` alternations, wall time, one thread:

* the switch alone (entering and leaving the context, no forward): the host time peft spends checking every
  layer's status and flipping each layer's flag, twice per call, against a swap of the layers kept from the
  first call;
* DPO's whole reference pass (``DPO.reference_logps``: the switch and the no-grad forward);
* and the base view with its LoRA layers found afresh at every call (one walk of the model), as before they were
  kept from one call to the next.

On a GPU the forward is short and the host time is what is left: there the switch's share is larger than here.

    python bench/bench_reference_pass.py
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--pairs", type=int, default=2)
    p.add_argument("--repeats", type=int, default=20)
    a = p.parse_args()
    from unittest import mock

    import torch
    from bench_rollout import policy
    from figures import figure, ratio

    from aura.data.preference import EncodedPair, collate_pairs
    from aura.data.sft_batches import Encoded
    from aura.train import lora_views
    from aura.train.lora_views import adapters_off
    from aura.train.objectives.preference import DPO

    torch.set_num_threads(1)
    model = policy(a.layers).train()
    g = torch.Generator().manual_seed(0)

    def part(n: int) -> list[int]:
        return torch.randint(3, 2000, (n,), generator=g).tolist()

    pairs = []
    for i in range(a.pairs):
        prompt, x, y = part(96 - 8 * i), part(48), part(40 + 4 * i)
        pairs.append(
            EncodedPair(Encoded(prompt + x, [-100] * len(prompt) + x), Encoded(prompt + y, [-100] * len(prompt) + y))
        )
    batch = collate_pairs(pairs, pad_id=0, shared=True)
    dpo = DPO()

    def peft_switch():
        with model.disable_adapter():
            pass

    def aura_switch():
        with adapters_off(model):
            pass

    def aura_switch_afresh():  # the base view as it was before the layers were kept: one walk of the model a call
        lora_views._LAYERS.clear()
        with adapters_off(model):
            pass

    def peft_pass():
        with mock.patch("aura.train.objectives.preference.adapters_off", lambda m: m.disable_adapter()):
            return dpo.reference_logps(model, batch)

    def aura_pass():
        return dpo.reference_logps(model, batch)

    assert torch.equal(peft_pass(), aura_pass()), "the two reference passes must give the same log-probs"
    runs = {
        "switch, peft": peft_switch,
        "switch, Aura": aura_switch,
        "switch, Aura, layers found afresh": aura_switch_afresh,
        "pass, peft": peft_pass,
        "pass, Aura": aura_pass,
    }
    seconds: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(a.repeats):
        for name, fn in runs.items():
            t = time.perf_counter()
            fn()
            seconds[name].append(time.perf_counter() - t)
    ms = {k: 1e3 * statistics.median(v) for k, v in seconds.items()}
    print(f"{a.layers}-layer Llama (hidden 128) + LoRA r 16, {a.pairs} DPO pairs in shared-prompt rows, 1 thread")
    for name, value in ms.items():
        print(f"  {name:34s} {value:8.2f} ms (median of {a.repeats})")
    switch, whole = ms["switch, Aura"] / ms["switch, peft"], ms["pass, Aura"] / ms["pass, peft"]
    kept = ms["switch, Aura"] / ms["switch, Aura, layers found afresh"]
    print(f"the switch alone, Aura / peft: x{switch:.3f}; DPO's whole reference pass, Aura / peft: x{whole:.2f}")
    print(f"the switch, layers kept / found afresh at every call: x{kept:.2f}")
    figure("reference_pass.switch.aura_over_peft", ratio(switch, 3))
    figure("reference_pass.whole.aura_over_peft", ratio(whole))
    figure("reference_pass.switch.kept_over_afresh", ratio(kept))


# reproduce:
# reproduce-quick: --layers 4 --repeats 3

if __name__ == "__main__":
    main()
