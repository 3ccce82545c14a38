"""GPU readiness (issue 10), the tables and formulas: the peak-FLOP/s table matched by exact names (MIG,
NVL/PCIe, consumer cards, TF32 for fp32 runs), MFU's FLOPs for a frozen base, padding not counted, and the
fine-tuning memory model behind `auto` (micro-batch and gradient checkpointing)."""

from __future__ import annotations

import pytest
import torch

from aura.models.hardware import GIB, assumed_hardware, gpu_peak, nominal_gpu

TF = 1e12


@pytest.mark.parametrize("name,p16,tf32,p32", [
    ("NVIDIA H100 80GB HBM3", 989.4, 494.7, 66.9),  # SXM
    ("NVIDIA H100 PCIe", 756.5, 378, 51.2),
    ("NVIDIA H100 NVL", 835.5, 417.5, 60),
    ("NVIDIA H200", 989.4, 494.7, 66.9),
    ("NVIDIA A100-SXM4-80GB", 312, 156, 19.5),
    ("NVIDIA A100 80GB PCIe", 312, 156, 19.5),
    ("NVIDIA A10", 125, 62.5, 31.2),  # not the A100
    ("NVIDIA A10G", 70, 35, 31.2),
    ("NVIDIA L4", 121, 60, 30.3),  # not the L40 / L40S
    ("NVIDIA L40S", 362.05, 183, 91.6),
    ("NVIDIA GeForce RTX 3060", 25.6, 12.8, 12.7),
    ("NVIDIA GeForce RTX 3060 Ti", 32.4, 16.2, 16.2),
    ("NVIDIA GeForce RTX 3090", 71, 35.6, 35.6),
    ("NVIDIA GeForce RTX 4090", 165.2, 82.6, 82.6),
    ("Tesla T4", 65, None, 8.1),
    ("Tesla V100-SXM2-16GB", 125, None, 15.7),
    ("Tesla V100-PCIE-32GB", 112, None, 14),
])
def test_peak_table_matches_exact_device_names(name, p16, tf32, p32):
    peak = gpu_peak(name)
    assert peak is not None, name
    assert peak[0] == pytest.approx(p16 * TF) and peak[2] == pytest.approx(p32 * TF)
    assert (peak[1] is None) if tf32 is None else peak[1] == pytest.approx(tf32 * TF)


def test_unknown_devices_have_no_peak_and_mig_slices_get_their_share():
    assert gpu_peak("NVIDIA Quadro P1000") is None and gpu_peak("A1000") is None
    mig = gpu_peak("NVIDIA H100 80GB HBM3 MIG 3g.40gb")
    assert mig[0] == pytest.approx(989.4 * TF * 3 / 7) and "MIG 3/7" in mig[3]
    assert gpu_peak("NVIDIA A100-SXM4-40GB MIG 1g.5gb")[0] == pytest.approx(312 * TF / 7)


def test_fp32_runs_are_measured_against_the_tf32_peak_where_it_exists():
    a100 = assumed_hardware("A100 80GB")
    assert a100.peak_flops("bf16") == pytest.approx(312 * TF)
    assert a100.peak_flops("fp32") == pytest.approx(156 * TF)  # Aura enables TF32 on CUDA
    t4 = assumed_hardware("T4 16GB")
    assert t4.capability == (7, 5) and not t4.bf16
    assert t4.peak_flops("fp32") == pytest.approx(8.1 * TF) and t4.peak_flops("fp16") == pytest.approx(65 * TF)


def test_frozen_base_counts_4n_flops_and_padding_is_not_a_trained_token():
    from transformers import LlamaConfig

    from aura.models.presets import flops_per_token, matmul_parameters
    from aura.train.objectives.objective import count_inputs

    c = LlamaConfig(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2)
    n = matmul_parameters(c)
    attention = 12 * 2 * 4 * 16 * 32
    assert flops_per_token(c, 32) == pytest.approx(6 * n + attention)
    assert flops_per_token(c, 32, trainable_parameters=1000) == pytest.approx(4 * n + 6 * 1000 + attention)
    padded = {"input_ids": torch.zeros(2, 8, dtype=torch.long),
              "attention_mask": torch.tensor([[1] * 8, [1] * 3 + [0] * 5])}
    assert count_inputs(padded) == 11
    assert count_inputs({"input_ids": torch.zeros(2, 8, dtype=torch.long)}) == 16


# ---- the fine-tuning memory model ---------------------------------------------------------------------

def _llama_1b():
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                       num_attention_heads=32, num_key_value_heads=8, head_dim=64, tie_word_embeddings=True)


def _mistral_7b():
    from transformers import MistralConfig

    return MistralConfig(vocab_size=32768, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                         num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=False)


def test_finetune_memory_terms():
    from aura.train.run.memory import finetune_estimate, lora_parameters

    c = _llama_1b()
    kw = dict(lora_r=16, max_length=2048, precision="bf16")
    q = finetune_estimate(c, method="qlora", batch_size=4, checkpointing=False, **kw)
    lora = finetune_estimate(c, method="lora", batch_size=4, checkpointing=False, **kw)
    full = finetune_estimate(c, method="full", batch_size=4, checkpointing=False, **kw)
    assert q.base_weights < lora.base_weights < full.base_weights  # 4-bit < bf16 < fp32 + 16-bit copies
    assert q.trainable_states == lora.trainable_states == 16 * lora_parameters(c, 16)
    assert lora_parameters(c, 16) == 16 * 16 * (4 * 2048 + 2 * 512 + 2048 + 2048 + 3 * (2048 + 8192))
    ckpt = finetune_estimate(c, method="qlora", batch_size=4, checkpointing=True, **kw)
    assert ckpt.activations < q.activations / 5
    plain = finetune_estimate(c, method="qlora", batch_size=4, checkpointing=False, chunked_loss=False, **kw)
    assert plain.logits == 4 * 2048 * 128256 * (2 + 4 + 4)  # B T V: 16-bit logits, fp32 copy, its gradient
    assert q.logits < plain.logits / 5


def test_auto_fits_the_guides_and_turns_checkpointing_on_only_when_needed():
    from aura.train.run.memory import plan_finetune

    kw = dict(max_length=2048, precision="bf16")
    # the 12 GB QLoRA guide: Llama-3.2-1B (vocab 128k) on an RTX 3060
    batch, ckpt, est, fits = plan_finetune(_llama_1b(), info=assumed_hardware("RTX 3060 12GB"), method="qlora",
                                           lora_r=16, **kw)
    assert fits and est.total <= 0.9 * 12e9
    # the frida guide: batch 8 x 2048 on Mistral-7B, LoRA r64: only with checkpointing on a 24 GB card
    b, c, est, fits = plan_finetune(_mistral_7b(), info=assumed_hardware("RTX 4090 24GB"), method="qlora",
                                    lora_r=64, batch_size=8, **kw)
    assert fits and c is True
    # what the user fixes is kept
    b, c, est, fits = plan_finetune(_mistral_7b(), info=nominal_gpu(80), method="lora", lora_r=64,
                                    checkpointing=True, **kw)
    assert c is True and b == 8 and fits
    b, c, _, fits = plan_finetune(_mistral_7b(), info=nominal_gpu(8), method="lora", lora_r=64, **kw)
    assert not fits and (b, c) == (1, True)  # the smallest candidate, reported as not fitting


def test_72_hour_presets_decide_checkpointing_from_the_model():
    from aura.models.hardware import choose_auto, needs_checkpointing
    from aura.models.presets import PRESETS, preset_training

    assert preset_training("aura-72h-max").gradient_checkpointing is None  # no longer forced on
    big, small = nominal_gpu(80), nominal_gpu(40)
    assert needs_checkpointing(PRESETS["aura-72h-max"], big, batch_size=2) is False
    assert needs_checkpointing(PRESETS["aura-72h-extended"], small, batch_size=2) is True
    assert choose_auto(big).gradient_checkpointing is False
    assert choose_auto(small).gradient_checkpointing is True
    assert choose_auto(big).estimated_bytes < 0.9 * big.memory_bytes
    assert big.memory_bytes / GIB > 70


def test_pretrain_with_a_72_hour_preset_takes_checkpointing_from_the_device():
    from aura.train.pretrain import PretrainConfig, _resolve

    def resolved(gpu: str, *flags) -> bool | None:
        cfg = PretrainConfig(data=["unused"], output_dir="unused", model_preset="aura-72h-max", **dict(flags))
        return _resolve(cfg, assumed_hardware(gpu))[0].gradient_checkpointing

    assert resolved("H100 80GB") is False  # fits without recomputation: 25-30 % faster
    assert resolved("A100 40GB") is True
    assert resolved("H100 80GB", ("gradient_checkpointing", True)) is True  # the flag wins
    assert resolved("A100 40GB", ("batch_size", 1), ("gradient_checkpointing", False)) is False
