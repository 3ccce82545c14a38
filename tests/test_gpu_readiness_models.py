"""GPU readiness (issue 10), the tables and formulas: the peak-FLOP/s table matched by exact names (MIG,
NVL/PCIe, consumer cards, TF32 for fp32 runs), MFU's FLOPs for a frozen base, padding not counted, and the
fine-tuning memory model behind `auto` (micro-batch and gradient checkpointing)."""

from __future__ import annotations

import pytest
import torch

from aura.models.hardware import GIB, assumed_hardware, gpu_peak, nominal_gpu

TF = 1e12


@pytest.mark.parametrize(
    "name,p16,tf32,p32",
    [
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
    ],
)
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

    c = LlamaConfig(
        vocab_size=1000,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    n = matmul_parameters(c)
    attention = 12 * 2 * 4 * 16 * 32
    assert flops_per_token(c, 32) == pytest.approx(6 * n + attention)
    assert flops_per_token(c, 32, trainable_parameters=1000) == pytest.approx(4 * n + 6 * 1000 + attention)
    padded = {
        "input_ids": torch.zeros(2, 8, dtype=torch.long),
        "attention_mask": torch.tensor([[1] * 8, [1] * 3 + [0] * 5]),
    }
    assert count_inputs(padded) == 11
    assert count_inputs({"input_ids": torch.zeros(2, 8, dtype=torch.long)}) == 16


# ---- the fine-tuning memory model ---------------------------------------------------------------------


def _llama_1b():
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=128256,
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=64,
        tie_word_embeddings=True,
    )


def _mistral_7b():
    from transformers import MistralConfig

    return MistralConfig(
        vocab_size=32768,
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        tie_word_embeddings=False,
    )


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
    assert q.logits < plain.logits / 3  # CUDA chunks of 2,048 tokens: 4 for the 8,192 tokens here


def test_auto_fits_the_guides_and_turns_checkpointing_on_only_when_needed():
    from aura.train.run.memory import plan_finetune

    kw = dict(max_length=2048, precision="bf16")
    # the 12 GB QLoRA guide: Llama-3.2-1B (vocab 128k) on an RTX 3060
    batch, ckpt, est, fits = plan_finetune(
        _llama_1b(), info=assumed_hardware("RTX 3060 12GB"), method="qlora", lora_r=16, **kw
    )
    assert fits and est.total <= 0.9 * 12e9
    # the frida guide: batch 8 x 2048 on Mistral-7B, LoRA r64: only with checkpointing on a 24 GB card
    b, c, est, fits = plan_finetune(
        _mistral_7b(), info=assumed_hardware("RTX 4090 24GB"), method="qlora", lora_r=64, batch_size=8, **kw
    )
    assert fits and c is True
    # what the user fixes is kept
    b, c, est, fits = plan_finetune(
        _mistral_7b(), info=nominal_gpu(80), method="lora", lora_r=64, checkpointing=True, **kw
    )
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
    assert choose_auto(nominal_gpu(12)).gradient_checkpointing is True
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


# ---- found by the first GPU run (H200, 2026-11-28; docs/benchmarks.md) ---------------------------------------


def test_gpt2_presets_use_the_fused_tanh_gelu_with_the_same_numbers_as_gelu_new():
    """transformers' default ``gelu_new`` spells the tanh formula out in five element-wise kernels; the
    presets ask for torch's fused ``gelu(approximate='tanh')``: the same model up to float rounding."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from aura.models.presets import PRESETS, ModelSpec, hf_config

    assert hf_config(PRESETS["gpt2-small"], 1000).activation_function == "gelu_pytorch_tanh"
    spec = ModelSpec("t", "gpt2", 64, 2, 4, 4, 32, 256)
    fused = hf_config(spec, 300)
    torch.manual_seed(0)
    a = GPT2LMHeadModel(fused).eval()
    b = GPT2LMHeadModel(GPT2Config(**{**fused.to_dict(), "activation_function": "gelu_new"})).eval()
    b.load_state_dict(a.state_dict())
    ids = torch.randint(300, (2, 32))
    with torch.no_grad():
        la, lb = a(ids).logits, b(ids).logits
    assert torch.allclose(la, lb, atol=1e-5, rtol=1e-5) and not torch.equal(la, torch.zeros_like(la))


def test_models_are_built_and_initialised_on_the_device_they_train_on():
    """``build_model(device=...)`` makes the parameters there (the meta device stands for a GPU here): a
    2.4B model is not first written to host memory by a serial CPU initialisation on every rank."""
    from aura.models.presets import PRESETS, build_model

    model = build_model(PRESETS["aura-72h-max"], 32000, device="meta")
    assert {p.device.type for p in model.parameters()} == {"meta"}
    assert sum(p.numel() for p in model.parameters()) > 2e9
    cpu = build_model(PRESETS["tiny"], 300)
    assert {p.device.type for p in cpu.parameters()} == {"cpu"}


def test_chunked_loss_takes_larger_chunks_on_cuda_and_the_memory_model_counts_them():
    """On an H200 the chunked loss at vocab 128k ran 4x slower than the plain one with 64 MiB chunks (64
    chunks of 130 tokens); 4 chunks on CUDA ran it at 0.73x the plain speed with 0.36x its memory."""
    from aura.models.hardware import CUDA_CHUNK_ELEMENTS, chunk_tokens, estimate_memory
    from aura.models.presets import PRESETS

    cpu, cuda = chunk_tokens(8192, 128256, 2048), chunk_tokens(8192, 128256, 2048, device_type="cuda")
    assert -(-8192 // cpu) == 64 and -(-8192 // cuda) == 4
    assert cuda * 128256 <= CUDA_CHUNK_ELEMENTS
    assert chunk_tokens(8192, 32000, 2048, device_type="cuda") == 2048
    assert chunk_tokens(16384, 32768, 4096, device_type="cuda") == 2048  # already 2,048 by the CPU's rule
    assert chunk_tokens(512, 152064, 896, device_type="cuda") == 512  # never more than the tokens
    spec = PRESETS["aura-72h-extended"]
    kw = dict(vocab_size=128256, batch_size=4, precision="bf16", gradient_checkpointing=False)
    assert estimate_memory(spec, **kw).logits > estimate_memory(spec, **kw, device_type="cpu").logits


def test_the_lora_memory_model_counts_the_base_in_the_dtype_it_is_loaded_in():
    """A LoRA base on a GPU is loaded in bf16 for bf16 runs and in fp32 for fp16 runs (the GradScaler's
    path, aura.train.finetune): the memory model counted 2 bytes for both."""
    from transformers import LlamaConfig

    from aura.train.run.memory import finetune_estimate

    cfg = LlamaConfig(
        vocab_size=32000,
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=16,
        num_attention_heads=16,
        num_key_value_heads=8,
    )
    kw = dict(method="lora", lora_r=16, batch_size=2, max_length=1024, checkpointing=False)
    bf16, fp16 = finetune_estimate(cfg, precision="bf16", **kw), finetune_estimate(cfg, precision="fp16", **kw)
    assert fp16.base_weights == 2 * bf16.base_weights


def test_pretraining_compiles_by_default_on_cuda_only_and_the_flag_wins():
    """Measured on an H200: compiled blocks gave MFU 48.6 % against 33.0 % eager for the 1.3B preset. The CPU
    (and fine-tuning, whose compiled path has not run on a GPU) stay eager unless asked."""
    from aura.train.pretrain import PretrainConfig, _resolve

    def compiled(device_type: str, *flags) -> bool | None:
        cfg = PretrainConfig(data=["unused"], output_dir="unused", model_preset="tiny", **dict(flags))
        return _resolve(cfg, assumed_hardware("H100 80GB"), device_type=device_type)[0].compile

    assert compiled("cuda") is True and compiled("cpu") is False
    assert compiled("cuda", ("compile", False)) is False and compiled("cpu", ("compile", True)) is True
