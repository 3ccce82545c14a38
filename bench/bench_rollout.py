"""GRPO's rollout engines on the CPU, each against its peers in the same run: completion tokens/s and aten ops
per decode step.

The policy: a random Llama of 24 layers at a tiny width (hidden 128, vocab 2,000) with a LoRA adapter (r 16 on
every projection, non-zero B); ``--prompts`` prompts of ~20 tokens x G (``--g``) sampled rows, ``--new`` new
tokens each (no stop id: every row runs to the end), keyed draws, temperature 1, one CPU thread.

* ``previous engine, peft wrappers``: the engine before issue 46 (``sample_batch_reference``: DynamicCache grown by
  ``cat``, one host sync per token, finished rows compacted) on the peft model, what a CUDA or bf16 run sampled from;
* ``previous engine, merged + packed``: the same engine with the fp32 CPU views of then (``merged_view`` +
  ``packed_view``), what a CPU fp32 run sampled from;
* ``new engine, model's forward``: ``aura.inference.decode`` (fixed shape, static cache) running transformers'
  forward, the lean step turned off, on the merged weights;
* ``new engine, lean step``: the same engine with the lean step (``aura.inference.lean``), called as GRPO calls it
  (``sample_completions``: the merged view, its plain layers);
* ``new engine, lean step + packed``: the same with the merged layers packed for oneDNN as well (what the
  previous fp32 CPU path added; ``sample_completions`` leaves it out for the models the lean step runs);
* ``transformers generate, merged``: ``generate(do_sample=True)`` on the same policy merged (``merge_and_unload``
  of a copy), the same rows and length;
* ``full bf16, autocast's forward`` and ``full bf16, bf16 copy + lean step``: a full fine-tuning's rollouts in bf16
  (the merged model as a fully fine-tuned policy: fp32 weights under bf16 autocast), before and after
  ``cast_view``: the engine on transformers' forward under autocast (the lean step declines autocast), against
  ``sample_completions`` casting the weights to bf16 for the call so that the lean step runs without autocast.
  Their draws are bf16's, not the fp32 stream's. Measured on a CPU with bf16 instructions only (a CPU without
  them runs bf16 only when asked: ``auto`` picks fp32 there, and GRPO then samples through the fp32 path).

Tokens/s are completion tokens per second of this process's CPU time (one thread): the machine these figures
come from is shared, and wall time there is mostly waiting for a core. Every engine draws from the same keyed
stream: the script counts the rows equal to the previous engine's (a row can part at a near tie, where another
summation order flips a token; the rest of that row then differs).

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


def policy(layers: int, *, hidden: int = 128, heads: int = 4, kv_heads: int = 2, vocab: int = 2000):
    """A random Llama of ``layers`` layers (``hidden`` wide, MLP 3x) with LoRA r 16 on every projection, its
    adapter's B drawn (the policy differs from the base), in eval mode."""
    import torch
    import transformers
    from peft import LoraConfig, get_peft_model

    from aura.train.adapters import resolve_target_modules

    cfg = transformers.LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        intermediate_size=3 * hidden,
        max_position_embeddings=1024,
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
    from unittest import mock

    import torch
    from figures import figure, ratio

    from aura.inference.decode import decode_batch
    from aura.inference.packed import packed_view
    from aura.inference.sampling import SamplingParams, sample_batch_reference
    from aura.train.lora_views import merged_view
    from aura.train.objectives.rollout import sample_completions

    print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
    torch.set_num_threads(1)
    cpu = torch.device("cpu")
    model = policy(a.layers)
    merged_model = copy.deepcopy(model).merge_and_unload().eval()
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, 2000, (18 + 3 * i,), generator=g).tolist() for i in range(a.prompts)]
    rows = [p for p in prompts for _ in range(a.g)]
    keys = list(range(len(rows)))

    class Tokenizer:
        pad_token_id = 0

    def previous(packed: bool):
        def run(new: int = a.new):
            params = SamplingParams(max_new_tokens=new, temperature=1.0)
            with contextlib.ExitStack() as stack:
                if packed:
                    stack.enter_context(merged_view(model, precision="fp32", device=cpu))
                    stack.enter_context(packed_view(model, precision="fp32", device=cpu))
                return sample_batch_reference(model, rows, params, pad_id=0, device=cpu, keys=keys)

        return run

    def forward(new: int = a.new):
        params = SamplingParams(max_new_tokens=new, temperature=1.0)
        with merged_view(model, precision="fp32", device=cpu), mock.patch("aura.inference.lean.lean_step") as off:
            off.return_value = None
            return decode_batch(model, rows, params, pad_id=0, device=cpu, keys=keys)

    def lean_packed(new: int = a.new):
        params = SamplingParams(max_new_tokens=new, temperature=1.0)
        with merged_view(model, precision="fp32", device=cpu), packed_view(model, precision="fp32", device=cpu):
            return decode_batch(model, rows, params, pad_id=0, device=cpu, keys=keys)

    def lean(new: int = a.new):
        params = SamplingParams(max_new_tokens=new, temperature=1.0)
        return sample_completions(
            model, rows, keys, sampling=params, tokenizer=Tokenizer(), precision="fp32", device=cpu
        )

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

    def full_autocast(new: int = a.new):
        params = SamplingParams(max_new_tokens=new, temperature=1.0)
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            return decode_batch(merged_model, rows, params, pad_id=0, device=cpu, keys=keys)

    def full_cast(new: int = a.new):
        params = SamplingParams(max_new_tokens=new, temperature=1.0)
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            return sample_completions(
                merged_model, rows, keys, sampling=params, tokenizer=Tokenizer(), precision="bf16", device=cpu
            )[0]

    runs = {
        "previous engine, peft wrappers": previous(packed=False),
        "previous engine, merged + packed": previous(packed=True),
        "new engine, model's forward": forward,
        "new engine, lean step": lean,
        "new engine, lean step + packed": lean_packed,
        "transformers generate, merged": hf,
        "full bf16, autocast's forward": full_autocast,
        "full bf16, bf16 copy + lean step": full_cast,
    }
    want = runs["previous engine, peft wrappers"]()
    same_stream = ["previous engine, merged + packed", "new engine, model's forward", "new engine, lean step"]
    same_stream.append("new engine, lean step + packed")  # the bf16 rows draw bf16's stream, not this one
    for name in same_stream:
        same = sum(x == y for x, y in zip(runs[name](), want))
        print(f"  {name}: {same} of {len(rows)} rows equal to the previous engine's (same keys)")
        assert same >= len(rows) // 2, f"{name} does not draw the previous engine's keyed stream"
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
            f"  {name:34s} {tps[name]:8.0f} completion tokens per CPU second  {ops[name]:7.0f} aten ops per decode step"
        )
    now, wrappers = tps["new engine, lean step"], tps["previous engine, peft wrappers"]
    ops_ratio = ops["new engine, lean step"] / ops["previous engine, peft wrappers"]
    pairs = {
        "lean step vs the model's forward (same engine, same merged weights)": (
            "rollout.lean_vs_forward.tokens_per_s",
            now / tps["new engine, model's forward"],
        ),
        "as GRPO samples on a CPU in fp32, now vs before (merged + packed, previous engine)": (
            "rollout.cpu_fp32_path.tokens_per_s",
            now / tps["previous engine, merged + packed"],
        ),
        "now vs the previous engine on peft's wrappers (what bf16 and CUDA sampled)": (
            "rollout.merged_copy_vs_peft_wrappers.tokens_per_s",
            now / wrappers,
        ),
        "now vs transformers generate (merged)": (
            "rollout.decode_vs_hf_generate.tokens_per_s",
            now / tps["transformers generate, merged"],
        ),
        "full fine-tuning in bf16: a bf16 copy + lean step vs autocast's forward": (
            "rollout.full_bf16_cast_vs_autocast.tokens_per_s",
            tps["full bf16, bf16 copy + lean step"] / tps["full bf16, autocast's forward"],
        ),
    }
    for text, (_, value) in pairs.items():
        print(f"{text}: x{value:.2f} tokens/s")
    print(f"ops per decode step, now vs the previous engine on peft's wrappers: x{ops_ratio:.2f}")
    print(f"lean step, layers packed for oneDNN vs as they are: x{tps['new engine, lean step + packed'] / now:.2f}")
    for key, value in pairs.values():
        figure(key, ratio(value))
    figure("rollout.merged_copy_vs_peft_wrappers.ops_per_step", ratio(ops_ratio))
    print(f"load average after: {os.getloadavg()[0]:.2f}")


# reproduce:
# reproduce-quick: --layers 4 --new 16 --repeats 1

if __name__ == "__main__":
    main()
