"""GRPO's rollout engines on the CPU, each against its peers in the same run: completion tokens/s and aten ops
per decode step.

The policy: a random Llama of 24 layers at a tiny width (hidden 128, vocab 2,000) with a LoRA adapter (r 16 on
every projection, non-zero B); ``--prompts`` prompts of ~20 tokens x G (``--g``) sampled rows, ``--new`` new
tokens each (no stop id: every row runs to the end), keyed draws, temperature 1, one CPU thread.

* ``reference, peft wrappers``: the previous engine (``sample_batch_reference``: DynamicCache grown by ``cat``,
  one host sync per token, finished rows compacted) on the peft model, what a CUDA or bf16 run sampled from;
* ``reference, merged``: the previous engine on the merged weights (``compute_view``, fp32), not packed;
* ``reference, merged + packed``: the previous engine with today's fp32 CPU views (``merged_view`` +
  ``packed_view``), what a CPU fp32 run sampled from;
* ``decode, merged + packed``: the new engine (``aura.inference.decode``) with the same views, what
  ``RolloutSource._sample`` now runs on a CPU in fp32;
* ``decode, compute view``: the new engine on the compute-dtype merged copy (``compute_view``, here fp32), what
  it runs off fp32/CPU;
* ``transformers generate, merged``: ``generate(do_sample=True)`` on the same policy merged
  (``merge_and_unload`` of a copy), the same rows and length.

Tokens/s are completion tokens per second of this process's CPU time (one thread): the machine these figures
come from is shared, and wall time there is mostly waiting for a core.

Ops per decode step: aten ops seen by a ``TorchDispatchMode`` over a rollout of ``--new`` tokens minus one of
``--new // 2`` tokens, divided by the difference (the prefill cancels out).

    python bench/bench_rollout.py                    # 2 prompts x G 8, 64 tokens, 5 alternations
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import os
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
        vocab_size=2000,
        hidden_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=384,
        max_position_embeddings=512,
        initializer_range=0.1,
    )
    torch.manual_seed(0)
    base = transformers.LlamaForCausalLM(cfg).eval()
    model = get_peft_model(
        base,
        LoraConfig(
            task_type="CAUSAL_LM",
            r=16,
            lora_alpha=32,
            lora_dropout=0.0,
            target_modules=resolve_target_modules(base, None),
        ),
    )
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.02, generator=g)
    return model.eval()


def count_ops(fn) -> int:
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.n += 1
            return func(*args, **(kwargs or {}))

    with Count():
        fn()
    return Count.n


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--prompts", type=int, default=2)
    p.add_argument("--g", type=int, default=8)
    p.add_argument("--new", type=int, default=64)
    p.add_argument("--repeats", type=int, default=5, help="alternations")
    a = p.parse_args()
    import torch
    from figures import figure, ratio

    from aura.inference.decode import decode_batch
    from aura.inference.packed import packed_view
    from aura.inference.sampling import SamplingParams, sample_batch_reference
    from aura.train.lora_views import compute_view, merged_view

    print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
    torch.set_num_threads(1)
    cpu = torch.device("cpu")
    model = policy(a.layers)
    merged_model = copy.deepcopy(model).merge_and_unload().eval()
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, 2000, (18 + 3 * i,), generator=g).tolist() for i in range(a.prompts)]
    rows = [p for p in prompts for _ in range(a.g)]
    keys = list(range(len(rows)))

    def views(kind: str):
        stack = contextlib.ExitStack()
        if kind == "packed":
            stack.enter_context(merged_view(model, precision="fp32", device=cpu))
            stack.enter_context(packed_view(model, precision="fp32", device=cpu))
        elif kind == "compute":
            stack.enter_context(compute_view(model, dtype=torch.float32))
        return stack

    def engine(fn, kind: str):
        def run(new: int = a.new):
            params = SamplingParams(max_new_tokens=new, temperature=1.0)
            with views(kind):
                return fn(model, rows, params, pad_id=0, device=cpu, keys=keys)

        return run

    def hf(new: int = a.new):
        width = max(map(len, rows))
        ids = torch.tensor([[0] * (width - len(r)) + r for r in rows])
        mask = (torch.arange(width)[None] >= torch.tensor([width - len(r) for r in rows])[:, None]).long()
        torch.manual_seed(0)
        with torch.no_grad():
            out = merged_model.generate(
                input_ids=ids,
                attention_mask=mask,
                do_sample=True,
                temperature=1.0,
                top_k=0,
                top_p=1.0,
                max_new_tokens=new,
                min_new_tokens=new,
                pad_token_id=0,
                eos_token_id=None,
            )
        return out[:, width:].tolist()

    runs = {
        "reference, peft wrappers": engine(sample_batch_reference, "peft"),
        "reference, merged": engine(sample_batch_reference, "compute"),
        "reference, merged + packed": engine(sample_batch_reference, "packed"),
        "decode, merged + packed": engine(decode_batch, "packed"),
        "decode, compute view": engine(decode_batch, "compute"),
        "transformers generate, merged": hf,
    }
    want = runs["reference, merged + packed"]()
    assert runs["decode, merged + packed"]() == want, "the new engine sampled other tokens than the previous one"
    assert runs["reference, peft wrappers"]() == runs["decode, compute view"]() == runs["reference, merged"]() == want
    tokens = len(rows) * a.new
    seconds: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(a.repeats):
        for name, fn in runs.items():
            t = time.process_time()  # this process's CPU time: on a loaded machine wall time is mostly waiting
            fn()
            seconds[name].append(time.process_time() - t)
    ops = {
        name: (count_ops(fn) - count_ops(lambda: fn(a.new // 2))) / (a.new - a.new // 2) for name, fn in runs.items()
    }
    tps = {name: tokens / statistics.median(s) for name, s in seconds.items()}
    print(
        f"{a.layers}-layer Llama (hidden 128) + LoRA r 16, {a.prompts} prompts x G {a.g} = {len(rows)} rows, "
        f"{a.new} new tokens; median CPU seconds of {a.repeats} alternations, 1 thread"
    )
    for name in runs:
        print(
            f"  {name:32s} {tps[name]:8.0f} completion tokens per CPU second  {ops[name]:7.0f} aten ops per decode step"
        )
    new, today = tps["decode, merged + packed"], tps["reference, merged + packed"]
    wrappers = tps["reference, peft wrappers"]
    plain = tps["decode, compute view"]
    print(
        f"engine alone (the same merged fp32 weights): x{plain / tps['reference, merged']:.2f} tokens/s, "
        f"x{ops['decode, compute view'] / ops['reference, merged']:.2f} ops per step"
    )
    print(
        f"as GRPO samples on a CPU in fp32 (merged + packed), new vs previous engine: x{new / today:.2f} "
        f"tokens/s, x{ops['decode, merged + packed'] / ops['reference, merged + packed']:.2f} ops per step"
    )
    print(
        f"new engine on the merged copy vs the previous one on peft's wrappers (what bf16 and CUDA sampled): "
        f"x{plain / wrappers:.2f} tokens/s, x{ops['decode, compute view'] / ops['reference, peft wrappers']:.2f} "
        f"ops per step"
    )
    print(
        f"new engine on the merged copy vs transformers generate (merged): "
        f"x{plain / tps['transformers generate, merged']:.2f}"
    )
    figure("rollout.engine_alone.tokens_per_s", ratio(plain / tps["reference, merged"]))
    figure("rollout.cpu_fp32_path.tokens_per_s", ratio(new / today))
    figure("rollout.merged_copy_vs_peft_wrappers.tokens_per_s", ratio(plain / wrappers))
    figure(
        "rollout.merged_copy_vs_peft_wrappers.ops_per_step",
        ratio(ops["decode, compute view"] / ops["reference, peft wrappers"]),
    )
    figure("rollout.decode_vs_hf_generate.tokens_per_s", ratio(plain / tps["transformers generate, merged"]))
    print(f"load average after: {os.getloadavg()[0]:.2f}")


# reproduce:
# reproduce-quick: --layers 4 --new 16 --repeats 1

if __name__ == "__main__":
    main()
