"""Hardware detection and the memory model behind `--model-preset auto`."""

from __future__ import annotations

import pytest

from aura.models.hardware import (
    _CANDIDATES,
    GIB,
    HardwareInfo,
    auto_tiers,
    choose_auto,
    cpu_fast_bf16,
    default_precision,
    detect,
    estimate_memory,
    nominal_gpu,
)
from aura.models.presets import PRESETS, hidden_matrix_parameters, preset_training, spec_parameters


def test_detect_is_sane_and_side_effect_free(capsys):
    info = detect()
    assert info.device_type in ("cpu", "cuda", "mps") and info.count >= 1 and info.memory_bytes > 2**28
    assert capsys.readouterr().out == ""
    choice = choose_auto(info)
    assert choice.reason and capsys.readouterr().out == ""
    if info.device_type == "cpu":
        assert choice.preset == "qwen3-tiny" and info.peak_flops("fp32") is None


def test_cpu_bf16_from_flags():
    assert cpu_fast_bf16(("sse", "amx_bf16")) is True
    assert cpu_fast_bf16(("sse", "avx512_bf16")) is True
    cpu = HardwareInfo("cpu", "x", 1, 8 * GIB, bf16=False, fp16=False)
    assert default_precision(cpu) == "fp32"
    assert default_precision(HardwareInfo("cuda", "T4", 1, 16 * GIB, bf16=False, fp16=True)) == "fp16"


def test_80gb_is_the_72_hour_guide_with_the_modern_recipe():
    c = choose_auto(nominal_gpu(80, name="NVIDIA A100-SXM4-80GB"))
    assert (
        c.preset,
        c.batch_size,
        c.gradient_accumulation_steps,
        c.learning_rate,
        c.save_steps,
        c.gradient_checkpointing,
        c.precision,
    ) == ("qwen3-72h", 8, 4, 3e-4, 500, False, "bf16")
    assert "qwen3-72h" in c.reason
    trained = preset_training(c.preset)
    assert (trained.optimizer, trained.lr_schedule) == ("muon", "wsd")


@pytest.mark.parametrize(
    "gb,preset",
    [(40, "qwen3-72h"), (24, "qwen3-medium"), (16, "qwen3-medium"), (12, "qwen3-medium"), (8, "qwen3-small")],
)
def test_tiers_fit_and_are_the_largest_that_fit(gb, preset):
    info = nominal_gpu(gb)
    c = choose_auto(info)
    assert c.preset == preset
    assert c.estimated_bytes <= 0.9 * info.memory_bytes
    # every more preferred candidate does not fit
    for p, batch, ckpt in _CANDIDATES[: _CANDIDATES.index((c.preset, c.batch_size, c.gradient_checkpointing))]:
        est = estimate_memory(
            PRESETS[p],
            vocab_size=32000,
            batch_size=batch,
            precision="bf16",
            gradient_checkpointing=ckpt,
            optimizer="muon",
        )
        assert est.total > 0.9 * info.memory_bytes, (p, batch, ckpt)
    assert c.batch_size * c.gradient_accumulation_steps * PRESETS[preset].seq_len == 65536


def test_memory_model_terms():
    spec = PRESETS["gpt2-medium"]
    kw = dict(vocab_size=32000, precision="bf16")
    full = estimate_memory(spec, batch_size=8, gradient_checkpointing=False, **kw)
    ckpt = estimate_memory(spec, batch_size=8, gradient_checkpointing=True, **kw)
    assert ckpt.activations < full.activations / 5
    assert ckpt.weights == full.weights and full.optimizer == 2 * full.gradients
    fp32 = estimate_memory(spec, batch_size=8, gradient_checkpointing=False, vocab_size=32000, precision="fp32")
    assert fp32.activations > full.activations and fp32.weights < full.weights  # no 16-bit weight copies
    twice = estimate_memory(spec, batch_size=16, gradient_checkpointing=False, **kw)
    assert twice.activations == pytest.approx(2 * full.activations, rel=0.01)
    assert len(auto_tiers()) == 6


def test_muon_keeps_one_momentum_for_hidden_matrices_only():
    """Muon's state is one fp32 buffer per hidden-matrix parameter; embeddings, head and norms keep AdamW's two,
    and the count of hidden matrices is the model's own (built by transformers)."""
    from aura.models.presets import build_model

    spec = PRESETS["qwen3-tiny"]
    model = build_model(spec, vocab_size=512)
    hidden = sum(
        p.numel() for n, p in model.named_parameters() if p.ndim == 2 and "embed" not in n and "lm_head" not in n
    )
    assert hidden_matrix_parameters(spec) == hidden
    assert spec_parameters(spec, 512) == sum(p.numel() for p in model.parameters())
    kw = dict(vocab_size=512, batch_size=4, precision="fp32", gradient_checkpointing=False)
    adamw, muon = estimate_memory(spec, **kw), estimate_memory(spec, optimizer="muon", **kw)
    assert adamw.optimizer - muon.optimizer == 4 * hidden
    assert muon.activations == adamw.activations and muon.weights == adamw.weights


def test_the_docs_tier_table_is_what_auto_picks():
    """docs/presets.md's `auto` table, row by row, against choose_auto on the same nominal GPUs."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "presets.md").read_text(encoding="utf-8")
    rows = re.findall(
        r"^\| (\d+) GB \| `([\w-]+)` \| (\d+) \| (\d+) \| (no|sí / yes) \| ([\d.e-]+) \| ([\d.]+) GiB \|$", text, re.M
    )
    assert len(rows) == len(auto_tiers())
    for (gb, c), (doc_gb, preset, batch, accum, ckpt, lr, mem) in zip(auto_tiers(), rows):
        assert (int(doc_gb), preset, int(batch), int(accum), ckpt != "no", float(lr)) == (
            gb,
            c.preset,
            c.batch_size,
            c.gradient_accumulation_steps,
            c.gradient_checkpointing,
            c.learning_rate,
        )
        assert float(mem) == pytest.approx(c.estimated_bytes / GIB, abs=0.06)
