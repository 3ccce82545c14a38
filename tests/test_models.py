"""Model presets: shapes, parameter counts, FLOPs per token, validation, the gpt2-medium log line."""

from __future__ import annotations

import pytest

from aura.core.errors import AuraError
from aura.models.presets import (
    PRESETS,
    build_model,
    count_parameters,
    flops_per_token,
    hf_config,
    matmul_parameters,
    resolve_spec,
    spec_parameters,
)


@pytest.mark.parametrize("name", ["tiny", "gpt2-small"])
def test_spec_parameters_match_the_built_model(name):
    spec = PRESETS[name]
    model = build_model(spec, 4096)
    assert count_parameters(model) == spec_parameters(spec, 4096)
    assert type(model).__name__ == ("LlamaForCausalLM" if spec.arch == "llama" else "GPT2LMHeadModel")
    assert model.config._attn_implementation == "sdpa"


def test_preset_sizes_without_building():
    # the sizes the guides promise, counted from the transformers configs (vocab 32000)
    assert 120e6 < spec_parameters(PRESETS["gpt2-small"], 50257) < 130e6  # GPT-2's 124M
    assert 340e6 < spec_parameters(PRESETS["gpt2-medium"], 50257) < 365e6  # GPT-2 medium's 355M
    assert 1.2e9 < spec_parameters(PRESETS["aura-72h-extended"], 32000) < 1.4e9
    assert 2.3e9 < spec_parameters(PRESETS["aura-72h-max"], 32000) < 2.6e9
    assert 1e6 < spec_parameters(PRESETS["tiny"], 4096) < 10e6
    for spec in PRESETS.values():
        if spec.arch == "llama":
            assert spec.intermediate_size % 256 == 0 and spec.d_model % 32 == 0  # Q8_0 GGUF rows
    big = PRESETS["aura-72h-max"]
    assert big.seq_len == 2048 and PRESETS["aura-72h-extended"].seq_len == 2048


def test_flops_per_token_counts_matmuls_and_attention():
    spec = resolve_spec(
        "manual",
        arch="llama",
        embed_size=64,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        seq_length=32,
        intermediate_size=256,
    )
    cfg = hf_config(spec, 1000)
    model = build_model(spec, 1000)
    linear = sum(m.weight.numel() for m in model.modules() if m.__class__.__name__ == "Linear")
    assert matmul_parameters(cfg) == linear  # every Linear, LM head included; no embedding lookup
    assert flops_per_token(cfg, 32) == 6 * linear + 12 * 2 * 64 * 32


def test_manual_and_overrides_validate():
    spec = resolve_spec("manual", arch="llama", embed_size=512, num_layers=8, num_heads=8, seq_length=1024)
    assert spec.intermediate_size % 256 == 0 and spec.n_kv_heads == 8
    assert resolve_spec("tiny", seq_length=128).seq_len == 128
    with pytest.raises(AuraError, match="--embed-size"):
        resolve_spec("manual", num_layers=2, num_heads=2, seq_length=32)
    with pytest.raises(AuraError, match="multiple"):
        resolve_spec("manual", embed_size=100, num_layers=2, num_heads=3, seq_length=32)
    with pytest.raises(AuraError, match="GQA"):
        resolve_spec("manual", arch="gpt2", embed_size=64, num_layers=2, num_heads=4, num_kv_heads=2, seq_length=32)
    with pytest.raises(AuraError, match="Unknown model preset"):
        resolve_spec("gpt5")


def test_gpt2_medium_log_line_in_both_languages(monkeypatch):
    from aura.core.i18n import set_lang

    spec = resolve_spec("gpt2-medium")
    set_lang("es")
    assert spec.describe() == "Config personalizada 'gpt2-medium': d_model=1024, layers=24, heads=16, seq_len=1024"
    set_lang("en")
    assert spec.describe() == "Custom config 'gpt2-medium': d_model=1024, layers=24, heads=16, seq_len=1024"
