"""Hardware detection and the memory model behind `--model-preset auto`."""

from __future__ import annotations

import pytest

from aura.models.hardware import (GIB, HardwareInfo, _CANDIDATES, auto_tiers, choose_auto, cpu_fast_bf16, default_precision, detect, estimate_memory, nominal_gpu)
from aura.models.presets import PRESETS


def test_detect_is_sane_and_side_effect_free(capsys):
    info = detect()
    assert info.device_type in ("cpu", "cuda", "mps") and info.count >= 1 and info.memory_bytes > 2**28
    assert capsys.readouterr().out == ""
    choice = choose_auto(info)
    assert choice.reason and capsys.readouterr().out == ""
    if info.device_type == "cpu":
        assert choice.preset == "tiny" and info.peak_flops("fp32") is None


def test_cpu_bf16_from_flags():
    assert cpu_fast_bf16(("sse", "amx_bf16")) is True
    assert cpu_fast_bf16(("sse", "avx512_bf16")) is True
    cpu = HardwareInfo("cpu", "x", 1, 8 * GIB, bf16=False, fp16=False)
    assert default_precision(cpu) == "fp32"
    assert default_precision(HardwareInfo("cuda", "T4", 1, 16 * GIB, bf16=False, fp16=True)) == "fp16"


def test_80gb_is_the_72_hour_guide():
    c = choose_auto(nominal_gpu(80, name="NVIDIA A100-SXM4-80GB"))
    assert (c.preset, c.batch_size, c.gradient_accumulation_steps, c.learning_rate, c.save_steps,
            c.gradient_checkpointing, c.precision) == ("aura-72h-max", 2, 16, 2e-4, 500, False, "bf16")
    assert "aura-72h-max" in c.reason


@pytest.mark.parametrize("gb,preset", [(40, "aura-72h-extended"), (24, "gpt2-medium"), (16, "gpt2-medium"),
                                       (12, "gpt2-medium"), (8, "gpt2-small")])
def test_tiers_fit_and_are_the_largest_that_fit(gb, preset):
    info = nominal_gpu(gb)
    c = choose_auto(info)
    assert c.preset == preset
    assert c.estimated_bytes <= 0.9 * info.memory_bytes
    # every more preferred candidate does not fit
    for p, batch, ckpt in _CANDIDATES[:_CANDIDATES.index((c.preset, c.batch_size, c.gradient_checkpointing))]:
        est = estimate_memory(PRESETS[p], vocab_size=32000, batch_size=batch, precision="bf16",
                              gradient_checkpointing=ckpt)
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
