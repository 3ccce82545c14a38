"""``aura.inference.packed``: fp32 linear layers with oneDNN-packed weights give the unpacked logits (float
rounding) and the same sampled tokens, restore the model exactly, compose with GRPO's merged LoRA view, and
refuse what they do not cover."""

from __future__ import annotations

import pytest
import torch

from aura.inference.packed import PackedLinear, packable, packed_view
from aura.inference.sampling import SamplingParams, sample_batch
from tests.evidence import require_or_skip

if not packable():
    require_or_skip("torch-cpu-kernels", "this torch has no oneDNN packed linear")
CPU = torch.device("cpu")


def _model(path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


@pytest.mark.parametrize("arch", ["llama", "gpt2"])  # GPT-2: Conv1D, weights stored transposed
def test_packed_layers_give_the_same_logits_and_tokens_and_restore_the_model(tiny_zoo, arch):
    model = _model(tiny_zoo[arch])
    before = {k: v.clone() for k, v in model.state_dict().items()}
    modules_before = dict(model.named_modules())
    ids = torch.tensor([[5, 17, 42, 9, 100, 7], [3, 8, 11, 250, 31, 64]])
    prompts, keys = [[5, 17, 42, 9], [3, 8, 11, 250, 31, 64]] * 2, [11, 12, 13, 14]
    params = SamplingParams(max_new_tokens=12, temperature=1.0, top_p=0.95)
    with torch.no_grad():
        plain = model(input_ids=ids).logits
        tokens = sample_batch(model, prompts, params, pad_id=0, device=CPU, keys=keys)
        view = packed_view(model, precision="fp32", device=CPU)
        assert view is not None
        with view:
            linear = [m for m in model.modules() if type(m).__name__ in ("Linear", "Conv1D")]
            assert not linear and any(isinstance(m, PackedLinear) for m in model.modules())
            packed = model(input_ids=ids).logits
            packed_tokens = sample_batch(model, prompts, params, pad_id=0, device=CPU, keys=keys)
    torch.testing.assert_close(packed, plain, rtol=0, atol=1e-4)
    assert packed_tokens == tokens
    assert dict(model.named_modules()).keys() == modules_before.keys()
    assert all(model.get_submodule(n) is m for n, m in modules_before.items() if n)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_packed_inside_the_merged_lora_view(tiny_zoo):
    from peft import LoraConfig, get_peft_model

    from aura.train.lora_views import merged_view

    model = get_peft_model(
        _model(tiny_zoo["llama"]),
        LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj", "up_proj"]),
    )
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.05, generator=g)
    model.eval()
    assert packed_view(model, precision="fp32", device=CPU) is None  # peft's wrappers read their base weight
    prompts, keys = [[5, 17, 42, 9]] * 4, [1, 2, 3, 4]
    params = SamplingParams(max_new_tokens=12, temperature=1.0)
    unmerged = sample_batch(model, prompts, params, pad_id=0, device=CPU, keys=keys)
    with merged_view(model, precision="fp32", device=CPU):
        view = packed_view(model, precision="fp32", device=CPU)
        assert view is not None
        with view:
            assert sample_batch(model, prompts, params, pad_id=0, device=CPU, keys=keys) == unmerged


def test_packed_view_refuses_what_it_does_not_cover(tiny_zoo):
    model = _model(tiny_zoo["llama"])
    assert packed_view(model, precision="bf16", device=CPU) is None
    assert packed_view(model, precision="fp32", device=torch.device("cuda")) is None
    assert packed_view(model.to(torch.bfloat16), precision="fp32", device=CPU) is None
