"""Hugging Face config + safetensors -> GGUF hyperparameters and tensors, as llama.cpp's converter does.

Supported: ``LlamaForCausalLM`` and ``MistralForCausalLM`` (GGUF arch ``llama``; q/k rows permuted
for llama.cpp's RoPE layout, k with the KV head count; ``llama3`` and ``linear`` RoPE scaling),
``Qwen3ForCausalLM`` (GGUF arch ``qwen3``: llama.cpp applies its RoPE to halves as transformers does, so
nothing is permuted; the per-head q/k RMSNorm gains are ``attn_q_norm``/``attn_k_norm``) and
``GPT2LMHeadModel`` (GGUF arch ``gpt2``; Conv1D weights transposed). Tensors are streamed from the
safetensors files one at a time, so exporting never holds two copies of the model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

from aura.core.errors import AuraError
from aura.core.i18n import Messages

M = Messages("gguf_arch", {
    "unsupported": ("La arquitectura {arch} de {path} no se puede exportar a GGUF con Aura. Compatibles: "
                    "{supported}.",
                    "Architecture {arch} of {path} cannot be exported to GGUF by Aura. Supported: "
                    "{supported}."),
    "rope": ("El escalado RoPE '{kind}' de {path} no es compatible (compatibles: linear, llama3).",
             "RoPE scaling '{kind}' of {path} is not supported (supported: linear, llama3)."),
    "unmapped": ("El tensor '{name}' de {path} no tiene equivalente en GGUF ({arch}); ¿es un modelo "
                 "modificado?",
                 "Tensor '{name}' of {path} has no GGUF counterpart ({arch}); is it a modified model?"),
})

LLAMA_LIKE = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "llama", "Qwen3ForCausalLM": "qwen3"}
GPT2_LIKE = {"GPT2LMHeadModel": "gpt2"}
SUPPORTED = {**LLAMA_LIKE, **GPT2_LIKE}


@dataclass
class ArchPlan:
    """What to write: GGUF arch, hyperparameters (name -> value) and where the tensors come from."""

    hf_arch: str
    gguf_arch: str
    config: dict
    n_vocab: int
    n_layers: int
    hparams: dict = field(default_factory=dict)


def plan_arch(model_dir: Path, config: dict) -> ArchPlan:
    """Check the architecture and compute the GGUF hyperparameters; raise before anything is written."""
    arch = (config.get("architectures") or ["?"])[0]
    if arch not in SUPPORTED:
        raise AuraError(M("unsupported", arch=arch, path=model_dir, supported=", ".join(SUPPORTED)))
    if arch in LLAMA_LIKE:
        n_layers = config["num_hidden_layers"]
        heads = config["num_attention_heads"]
        head_dim = config.get("head_dim") or config["hidden_size"] // heads
        rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
        theta = rope.get("rope_theta", config.get("rope_theta", 10000.0))
        hp = {
            "context_length": config["max_position_embeddings"],
            "embedding_length": config["hidden_size"],
            "feed_forward_length": config["intermediate_size"],
            "head_count": heads,
            "head_count_kv": config.get("num_key_value_heads") or heads,
            "rope_dimension_count": head_dim,
            "key_length": head_dim,
            "value_length": head_dim,
            "rope_freq_base": float(theta),
            "layer_norm_rms_eps": float(config.get("rms_norm_eps", 1e-6)),
        }
        kind = rope.get("rope_type", rope.get("type", "default"))
        if kind not in ("default", "linear", "llama3"):
            raise AuraError(M("rope", kind=kind, path=model_dir))
        if kind == "linear":
            hp["rope_scaling_linear"] = float(rope["factor"])
        if LLAMA_LIKE[arch] == "qwen3" and kind != "default":
            raise AuraError(M("rope", kind=kind, path=model_dir))
        return ArchPlan(arch, LLAMA_LIKE[arch], config, config["vocab_size"], n_layers, hp)
    n_layers = config["n_layer"]
    hp = {
        "context_length": config.get("n_positions") or config.get("n_ctx"),
        "embedding_length": config["n_embd"],
        "feed_forward_length": config.get("n_inner") or 4 * config["n_embd"],
        "head_count": config["n_head"],
        "layer_norm_eps": float(config.get("layer_norm_epsilon", 1e-5)),
    }
    return ArchPlan(arch, "gpt2", config, config["vocab_size"], n_layers, hp)


def write_hparams(writer, plan: ArchPlan) -> None:
    import gguf

    hp = plan.hparams
    writer.add_context_length(int(hp["context_length"]))
    writer.add_embedding_length(int(hp["embedding_length"]))
    writer.add_block_count(plan.n_layers)
    writer.add_feed_forward_length(int(hp["feed_forward_length"]))
    writer.add_head_count(int(hp["head_count"]))
    writer.add_vocab_size(plan.n_vocab)
    if plan.gguf_arch in ("llama", "qwen3"):
        writer.add_head_count_kv(int(hp["head_count_kv"]))
        writer.add_rope_dimension_count(int(hp["rope_dimension_count"]))
        writer.add_key_length(int(hp["key_length"]))
        writer.add_value_length(int(hp["value_length"]))
        writer.add_rope_freq_base(hp["rope_freq_base"])
        writer.add_layer_norm_rms_eps(hp["layer_norm_rms_eps"])
        if "rope_scaling_linear" in hp:
            writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
            writer.add_rope_scaling_factor(hp["rope_scaling_linear"])
    else:
        writer.add_layer_norm_eps(hp["layer_norm_eps"])


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """HF rotates halves of each head; llama.cpp rotates interleaved pairs: reorder q/k rows."""
    # (n_head * 2 * half, ...) -> (n_head, 2, half, ...) -> (n_head, half, 2, ...) -> original shape
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def _llama3_rope_factors(config: dict) -> np.ndarray:
    """The ``rope_freqs`` tensor llama.cpp needs for Llama 3.x RoPE scaling (same formula as its converter)."""
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    base = rope.get("rope_theta", config.get("rope_theta", 10000.0))
    dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    factor = rope.get("factor", 8.0)
    low, high = rope.get("low_freq_factor", 1.0), rope.get("high_freq_factor", 4.0)
    old_ctx = rope.get("original_max_position_embeddings", 8192)
    low_wavelen, high_wavelen = old_ctx / low, old_ctx / high
    factors = []
    for i in range(0, dim, 2):
        wavelen = 2 * math.pi / (1.0 / base ** (i / dim))
        if wavelen < high_wavelen:
            factors.append(1.0)
        elif wavelen > low_wavelen:
            factors.append(factor)
        else:
            smooth = (old_ctx / wavelen - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return np.asarray(factors, dtype=np.float32)  # (head_dim / 2,)


def iter_tensors(model_dir: Path, plan: ArchPlan, files: list[Path]) -> Iterator[tuple[str, np.ndarray]]:
    """(GGUF name, float32 array) for every tensor, transformed for llama.cpp."""
    import gguf
    import torch
    from safetensors import safe_open

    arch = {"llama": gguf.MODEL_ARCH.LLAMA, "qwen3": gguf.MODEL_ARCH.QWEN3}.get(plan.gguf_arch, gguf.MODEL_ARCH.GPT2)
    names = gguf.get_tensor_name_map(arch, plan.n_layers)
    heads, kv_heads = plan.hparams["head_count"], plan.hparams.get("head_count_kv")
    rope = plan.config.get("rope_parameters") or plan.config.get("rope_scaling") or {}
    if plan.gguf_arch == "llama" and rope.get("rope_type") == "llama3":
        yield gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FREQS] + ".weight", _llama3_rope_factors(plan.config)
    for f in files:
        with safe_open(str(f), framework="pt") as sf:
            for key in sf.keys():
                if key.endswith((".attn.bias", ".attn.masked_bias", "rotary_emb.inv_freq")):
                    continue  # GPT-2's causal-mask buffers and RoPE caches are not weights
                t = sf.get_tensor(key).to(torch.float32)
                if plan.gguf_arch == "gpt2" and key.endswith(("c_attn.weight", "c_proj.weight",
                                                              "c_fc.weight")):
                    t = t.T.contiguous()  # Conv1D (in, out) -> (out, in)
                arr = t.numpy()
                if plan.gguf_arch == "llama":
                    if key.endswith(("q_proj.weight", "q_proj.bias")):
                        arr = _permute(arr, heads)
                    elif key.endswith(("k_proj.weight", "k_proj.bias")):
                        arr = _permute(arr, kv_heads)
                name = names.get_name(key, try_suffixes=(".weight", ".bias"))
                if name is None:
                    raise AuraError(M("unmapped", name=key, path=f, arch=plan.gguf_arch))
                yield name, arr
