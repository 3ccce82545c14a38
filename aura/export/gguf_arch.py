"""Hugging Face config + safetensors -> GGUF hyperparameters and tensors, as llama.cpp's converter does.

Supported (HF architecture -> GGUF arch), with what each needs that llama.cpp's converter
(``convert_hf_to_gguf.py``) also does; tensor names come from the ``gguf`` package's own
``TensorNameMap`` for the GGUF arch, never from a table of ours:

* ``LlamaForCausalLM``, ``MistralForCausalLM`` -> ``llama``: q/k rows permuted for llama.cpp's RoPE layout
  (k with the KV head count); ``llama3`` and ``linear`` RoPE scaling.
* ``SmolLM3ForCausalLM`` -> ``smollm3``: as Llama (q/k permuted); llama.cpp leaves RoPE out of every 4th
  layer, so the model's ``no_rope_layers`` must be that pattern.
* ``Qwen2ForCausalLM`` (Qwen2, Qwen2.5) -> ``qwen2``: RoPE on halves as transformers does (nothing
  permuted), q/k/v biases, YaRN scaling (Qwen2.5's long-context setting) with llama.cpp's fixed betas,
  tied embeddings (no ``output`` tensor: llama.cpp reuses ``token_embd``).
* ``Qwen3ForCausalLM`` -> ``qwen3``: as Qwen2, plus the per-head q/k RMSNorm gains.
* ``Gemma2ForCausalLM`` -> ``gemma2`` and ``Gemma3ForCausalLM`` -> ``gemma3`` (also the language model of
  the image-text ``Gemma3ForConditionalGeneration``, Gemma 3 4B/12B/27B; its vision tower is left out): Gemma's RMSNorm
  multiplies by ``1 + weight``, llama.cpp by the stored weight, so every ``*norm.weight`` is written + 1;
  the embedding scaling by sqrt(hidden) is llama.cpp's own; attention/final logit soft-capping (Gemma 2),
  the sliding window and its layer pattern (every 2nd layer global in Gemma 2, every 6th in Gemma 3, the
  local layers' RoPE base) are written as hyperparameters; ``lm_head`` is the tied embedding.
* ``Phi3ForCausalLM`` (Phi-3, Phi-3.5, Phi-4) -> ``phi3``: the fused ``qkv_proj`` and ``gate_up_proj``
  are kept fused, as llama.cpp splits them; partial rotary dimensions and the sliding window; LongRoPE
  (Phi-3-128k, Phi-3.5, Phi-4-mini) as ``rope_factors_long/short`` tensors and its attention factor (llama.cpp
  chooses long or short by the loaded context, transformers by the text's length: a warning says so).
* ``Olmo2ForCausalLM`` -> ``olmo2``: RoPE on halves (nothing permuted), q/k RMSNorm over the whole
  projection, norms after attention and MLP instead of before.
* ``GPT2LMHeadModel`` -> ``gpt2``: Conv1D weights transposed.

Whatever llama.cpp would compute differently (a layer pattern it does not assume, RoPE scaling it does
not apply here, a query scale it does not use) is refused before anything is written. Tensors are
streamed from the safetensors files one at a time, so exporting never holds two copies of the model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

from aura.core.errors import AuraError
from aura.core.i18n import Messages

M = Messages(
    "gguf_arch",
    {
        "unsupported": (
            "La arquitectura {arch} de {path} no se puede exportar a GGUF con Aura. Compatibles: {supported}.",
            "Architecture {arch} of {path} cannot be exported to GGUF by Aura. Supported: {supported}.",
        ),
        "rope": (
            "El escalado RoPE '{kind}' de {path} no es compatible con {arch} (compatibles: {supported}).",
            "RoPE scaling '{kind}' of {path} is not supported for {arch} (supported: {supported}).",
        ),
        "unmapped": (
            "El tensor '{name}' de {path} no tiene equivalente en GGUF ({arch}); ¿es un modelo modificado?",
            "Tensor '{name}' of {path} has no GGUF counterpart ({arch}); is it a modified model?",
        ),
        "layers": (
            "El campo '{field}' de {path}/config.json es {got}, pero llama.cpp ejecuta {arch} con {expected}: "
            "el GGUF calcularía otra cosa. Exporta un modelo con la configuración estándar de {arch}.",
            "Field '{field}' of {path}/config.json is {got}, but llama.cpp runs {arch} with {expected}: the "
            "GGUF would compute something else. Export a model with {arch}'s standard configuration.",
        ),
        "phi3_swa": (
            "{path} usa ventana deslizante de {window:token|tokens}, que llama.cpp no aplica a phi3: con textos "
            "de más de {window:token|tokens} el GGUF atiende a todo el contexto y difiere del modelo (la verificación "
            "usa "
            "textos cortos).",
            "{path} uses a sliding window of {window:token|tokens}, which llama.cpp does not apply to phi3: past "
            "{window:token|tokens} the GGUF attends to the whole context and differs from the model (the "
            "verification uses short texts).",
        ),
        "longrope": (
            "{path} usa LongRoPE: transformers elige los factores largos según la longitud del texto (más de "
            "{orig:token|tokens}) y llama.cpp según el contexto con que se carga (--n-ctx, redondeado a un "
            "múltiplo de 256, mayor que {orig}), también para textos cortos. Con --n-ctx {orig} o menos, "
            "ambos coinciden.",
            "{path} uses LongRoPE: transformers picks the long factors by the text's length (over "
            "{orig:token|tokens}) and llama.cpp by the context it is loaded with (--n-ctx, rounded up to a "
            "multiple of 256, over {orig}), for short texts too. With --n-ctx {orig} or less, both agree.",
        ),
    },
)

# HF architecture -> GGUF architecture (a gguf.MODEL_ARCH name, lower case)
SUPPORTED = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "llama",
    "SmolLM3ForCausalLM": "smollm3",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "Gemma2ForCausalLM": "gemma2",
    "Gemma3ForCausalLM": "gemma3",
    "Gemma3ForConditionalGeneration": "gemma3",
    "Phi3ForCausalLM": "phi3",
    "Olmo2ForCausalLM": "olmo2",
    "GPT2LMHeadModel": "gpt2",
}
PERMUTED = ("llama", "smollm3")  # llama.cpp rotates interleaved pairs: q/k rows reordered
GEMMA = ("gemma2", "gemma3")
# llama.cpp's fixed sliding-window layer period (a layer il is local unless (il + 1) % period == 0)
SWA_PERIOD = {"gemma2": 2, "gemma3": 6}
# llama.cpp scales Gemma's queries by 1/sqrt(hidden/heads) only for its 27B models (this layer count)
GEMMA_27B_LAYERS = {"gemma2": 46, "gemma3": 62}
NO_ROPE_INTERVAL = 4  # llama.cpp's smollm3: no RoPE in layers (il + 1) % 4 == 0
# image-text checkpoints whose text half is exported (the vision tower goes to llama.cpp's mmproj, not here):
# their language model's tensor prefixes, as transformers 4/5 save them
MULTIMODAL = {"Gemma3ForConditionalGeneration": ("language_model.model.", "model.language_model.")}


@dataclass
class ArchPlan:
    """What to write: GGUF arch, hyperparameters (name -> value) and where the tensors come from."""

    hf_arch: str
    gguf_arch: str
    config: dict
    n_vocab: int
    n_layers: int
    hparams: dict = field(default_factory=dict)


def _rope_params(config: dict, layer_type: str = "full_attention") -> dict:
    """The RoPE parameters of ``layer_type`` layers (transformers 5 ``rope_parameters``, per layer type for
    Gemma 3; transformers 4 ``rope_scaling`` + ``rope_theta``)."""
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    if isinstance(rope.get(layer_type), dict):
        return rope[layer_type]
    if any(isinstance(v, dict) for v in rope.values()) or layer_type != "full_attention":
        return {}  # transformers 4's Gemma 3: rope_scaling is the global layers'; local ones have none
    return rope


def _check(model_dir: Path, arch: str, name: str, got, expected, shown=None) -> None:
    if got != expected:
        raise AuraError(M("layers", field=name, path=model_dir, got=got, expected=shown or expected, arch=arch))


def plan_arch(model_dir: Path, config: dict) -> ArchPlan:
    """Check the architecture and compute the GGUF hyperparameters; raise before anything is written."""
    arch = (config.get("architectures") or ["?"])[0]
    if arch not in SUPPORTED:
        raise AuraError(M("unsupported", arch=arch, path=model_dir, supported=", ".join(SUPPORTED)))
    gg = SUPPORTED[arch]
    if arch in MULTIMODAL:  # the language model of an image-text checkpoint (Gemma 3 4B/12B/27B)
        config = {**config["text_config"], "architectures": [arch]}
    if gg == "gpt2":
        hp = {
            "context_length": config.get("n_positions") or config.get("n_ctx"),
            "embedding_length": config["n_embd"],
            "feed_forward_length": config.get("n_inner") or 4 * config["n_embd"],
            "head_count": config["n_head"],
            "layer_norm_eps": float(config.get("layer_norm_epsilon", 1e-5)),
        }
        return ArchPlan(arch, gg, config, config["vocab_size"], config["n_layer"], hp)
    n_layers = config["num_hidden_layers"]
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    rope = _rope_params(config)
    theta = rope.get("rope_theta", config.get("rope_theta", 1_000_000.0 if gg == "gemma3" else 10000.0))
    partial = rope.get("partial_rotary_factor", config.get("partial_rotary_factor")) or 1.0
    hp = {
        "context_length": config["max_position_embeddings"],
        "embedding_length": config["hidden_size"],
        "feed_forward_length": config["intermediate_size"],
        "head_count": heads,
        "head_count_kv": config.get("num_key_value_heads") or heads,
        # Phi-3's converter: int(partial * hidden) // heads
        "rope_dimension_count": int(partial * config["hidden_size"]) // heads if gg == "phi3" else head_dim,
        "key_length": head_dim,
        "value_length": head_dim,
        "rope_freq_base": float(theta),
        "layer_norm_rms_eps": float(config.get("rms_norm_eps", 1e-6)),
    }
    kind = rope.get("rope_type", rope.get("type", "default"))
    allowed = {
        "llama": ("default", "linear", "llama3"),
        "gemma3": ("default", "linear"),
        "phi3": ("default", "longrope"),
        "qwen2": ("default", "yarn"),
    }.get(gg, ("default",))
    if kind not in allowed:
        raise AuraError(M("rope", kind=kind, path=model_dir, arch=arch, supported=", ".join(allowed)))
    if kind == "linear":
        hp["rope_scaling_linear"] = float(rope["factor"])
    elif kind in ("longrope", "yarn"):
        _scaled_rope(model_dir, config, rope, kind, hp)
    _plan_layers(model_dir, arch, gg, config, hp, n_layers=n_layers, heads=heads, head_dim=head_dim)
    return ArchPlan(arch, gg, config, config["vocab_size"], n_layers, hp)


def _plan_layers(
    model_dir: Path, arch: str, gg: str, config: dict, hp: dict, *, n_layers: int, heads: int, head_dim: int
) -> None:
    """The layers' attention pattern: checked to be the one llama.cpp's architecture assumes (Gemma's sliding
    and global layers, Phi-3's window, every layer global elsewhere, SmolLM3's layers without RoPE), and its
    hyperparameters added to ``hp``."""
    layer_types = config.get("layer_types")
    if gg in GEMMA:
        _plan_gemma_layers(model_dir, arch, gg, config, hp, n_layers=n_layers, heads=heads, head_dim=head_dim)
    elif gg == "phi3":
        hp["sliding_window"] = int(config.get("sliding_window") or 0)  # 0: none (Phi-4)
        if 0 < hp["sliding_window"] < hp["context_length"]:  # Phi-3-mini-4k: 2047 of 4096
            from aura.core import console

            console.warn(M("phi3_swa", path=model_dir, window=hp["sliding_window"]))
        hp.setdefault(
            "rope_scaling_orig_ctx_len",
            int(config.get("original_max_position_embeddings") or config["max_position_embeddings"]),
        )
    elif layer_types is not None:  # Llama, Qwen2/3, SmolLM3: every layer global in llama.cpp
        _check(
            model_dir, arch, "layer_types", layer_types, ["full_attention"] * n_layers, "full_attention in every layer"
        )
    if gg in ("qwen2", "qwen3") and config.get("use_sliding_window"):
        _check(model_dir, arch, "use_sliding_window", True, False)
    if gg == "smollm3":
        expected = [int((i + 1) % NO_ROPE_INTERVAL != 0) for i in range(n_layers)]
        _check(
            model_dir,
            arch,
            "no_rope_layers",
            config.get("no_rope_layers", expected),
            expected,
            f"no RoPE every {NO_ROPE_INTERVAL} layers",
        )


def _plan_gemma_layers(
    model_dir: Path, arch: str, gg: str, config: dict, hp: dict, *, n_layers: int, heads: int, head_dim: int
) -> None:
    """Gemma 2/3: a global layer every SWA_PERIOD (the rest sliding), the attention scale, the logit
    soft-capping and (Gemma 3) the sliding layers' own RoPE base."""
    layer_types = config.get("layer_types")
    period = SWA_PERIOD[gg]
    expected = ["full_attention" if (i + 1) % period == 0 else "sliding_attention" for i in range(n_layers)]
    if layer_types is not None:
        _check(
            model_dir,
            arch,
            "layer_types",
            layer_types,
            expected,
            f"a global layer every {period} (the rest sliding_attention)",
        )
    elif config.get("sliding_window_pattern") is not None:  # transformers 4's Gemma 3 configs
        _check(model_dir, arch, "sliding_window_pattern", config["sliding_window_pattern"], period)
    scalar = config.get("query_pre_attn_scalar", head_dim)
    scale_dim = config["hidden_size"] // heads if n_layers == GEMMA_27B_LAYERS[gg] else head_dim
    _check(model_dir, arch, "query_pre_attn_scalar", scalar, scale_dim)
    if config.get("sliding_window"):
        hp["sliding_window"] = int(config["sliding_window"])
    if gg == "gemma2":
        hp["attn_logit_softcapping"] = float(config.get("attn_logit_softcapping") or 0.0)
        hp["final_logit_softcapping"] = float(config.get("final_logit_softcapping") or 0.0)
    else:
        _check(model_dir, arch, "attn_logit_softcapping", config.get("attn_logit_softcapping"), None)
        if config.get("final_logit_softcapping"):
            hp["final_logit_softcapping"] = float(config["final_logit_softcapping"])
        local = _rope_params(config, "sliding_attention")
        _check(
            model_dir, arch, "rope_parameters.sliding_attention.rope_type", local.get("rope_type", "default"), "default"
        )
        hp["rope_freq_base_swa"] = float(local.get("rope_theta", config.get("rope_local_base_freq", 10000.0)))


def _scaled_rope(model_dir: Path, config: dict, rope: dict, kind: str, hp: dict) -> None:
    """Phi-3's LongRoPE (per-dimension long/short factors, written as the ``rope_factors_long/short`` tensors) and
    Qwen2.5's YaRN, with the attention factor transformers computes, as llama.cpp's converter writes them."""
    orig = int(
        rope.get("original_max_position_embeddings")
        or config.get("original_max_position_embeddings")
        or config["max_position_embeddings"]
    )
    hp["rope_scaling_orig_ctx_len"] = orig
    if kind == "yarn":
        factor = float(rope["factor"])
        hp["rope_scaling_yarn"] = factor
        # transformers: attention_factor, else 0.1 ln(factor) + 1 (llama.cpp's own YaRN magnitude scaling)
        if rope.get("attention_factor") not in (None, 0.1 * math.log(factor) + 1.0):
            _check(
                model_dir,
                "qwen2",
                "rope_parameters.attention_factor",
                rope["attention_factor"],
                None,
                "0.1 ln(factor) + 1 (llama.cpp's)",
            )
        for name, default in (("beta_fast", 32.0), ("beta_slow", 1.0)):  # llama.cpp's fixed values
            _check(model_dir, "qwen2", f"rope_parameters.{name}", float(rope.get(name, default)), default)
        return
    scale = config["max_position_embeddings"] / orig
    hp["rope_scaling_attn_factor"] = float(
        rope.get("attention_factor") or (math.sqrt(1 + math.log(scale) / math.log(orig)) if scale > 1.0 else 1.0)
    )
    hp["rope_factors"] = (
        np.asarray(rope["long_factor"], dtype=np.float32),
        np.asarray(rope["short_factor"], dtype=np.float32),
    )
    from aura.core import console

    console.warn(M("longrope", path=model_dir, orig=orig))


def write_hparams(writer, plan: ArchPlan) -> None:
    import gguf

    hp = plan.hparams
    writer.add_context_length(int(hp["context_length"]))
    writer.add_embedding_length(int(hp["embedding_length"]))
    writer.add_block_count(plan.n_layers)
    writer.add_feed_forward_length(int(hp["feed_forward_length"]))
    writer.add_head_count(int(hp["head_count"]))
    writer.add_vocab_size(plan.n_vocab)
    if plan.gguf_arch == "gpt2":
        writer.add_layer_norm_eps(hp["layer_norm_eps"])
        return
    writer.add_head_count_kv(int(hp["head_count_kv"]))
    writer.add_rope_dimension_count(int(hp["rope_dimension_count"]))
    writer.add_key_length(int(hp["key_length"]))
    writer.add_value_length(int(hp["value_length"]))
    writer.add_rope_freq_base(hp["rope_freq_base"])
    writer.add_layer_norm_rms_eps(hp["layer_norm_rms_eps"])
    if "rope_scaling_linear" in hp:
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(hp["rope_scaling_linear"])
    if "sliding_window" in hp:
        writer.add_sliding_window(hp["sliding_window"])
    if plan.gguf_arch in SWA_PERIOD and "sliding_window" in hp:
        writer.add_sliding_window_pattern(SWA_PERIOD[plan.gguf_arch])
    if "rope_freq_base_swa" in hp:
        writer.add_rope_freq_base_swa(hp["rope_freq_base_swa"])
    if "attn_logit_softcapping" in hp:
        writer.add_attn_logit_softcapping(hp["attn_logit_softcapping"])
    if "final_logit_softcapping" in hp:
        writer.add_final_logit_softcapping(hp["final_logit_softcapping"])
    if "rope_scaling_orig_ctx_len" in hp:
        writer.add_rope_scaling_orig_ctx_len(hp["rope_scaling_orig_ctx_len"])
    if "rope_scaling_attn_factor" in hp:
        writer.add_rope_scaling_attn_factors(hp["rope_scaling_attn_factor"])
    if "rope_scaling_yarn" in hp:
        writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        writer.add_rope_scaling_factor(hp["rope_scaling_yarn"])


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """HF rotates halves of each head; llama.cpp rotates interleaved pairs: reorder q/k rows."""
    # (n_head * 2 * half, ...) -> (n_head, 2, half, ...) -> (n_head, half, 2, ...) -> original shape
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _llama3_rope_factors(config: dict) -> np.ndarray:
    """The ``rope_freqs`` tensor llama.cpp needs for Llama 3.x RoPE scaling (same formula as its converter)."""
    rope = _rope_params(config)
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

    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH[plan.gguf_arch.upper()], plan.n_layers)
    heads, kv_heads = plan.hparams["head_count"], plan.hparams.get("head_count_kv")
    rope = _rope_params(plan.config)
    if plan.gguf_arch == "llama" and rope.get("rope_type") == "llama3":
        yield gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FREQS] + ".weight", _llama3_rope_factors(plan.config)
    if "rope_factors" in plan.hparams:  # Phi-3's LongRoPE
        long, short = plan.hparams["rope_factors"]
        yield gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FACTORS_LONG] + ".weight", long
        yield gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FACTORS_SHORT] + ".weight", short
    for f in files:
        with safe_open(str(f), framework="pt") as sf:
            for key in sf.keys():
                if key.endswith((".attn.bias", ".attn.masked_bias", "rotary_emb.inv_freq")):
                    continue  # GPT-2's causal-mask buffers and RoPE caches are not weights
                src = key
                if plan.hf_arch in MULTIMODAL:
                    prefix = next((p for p in MULTIMODAL[plan.hf_arch] if key.startswith(p)), None)
                    if prefix is None:
                        continue  # vision tower, projector, the head (tied)
                    key = "model." + key[len(prefix) :]
                if plan.gguf_arch in GEMMA and key.endswith("lm_head.weight"):
                    continue  # Gemma ties its head to the embedding; llama.cpp reads token_embd
                t = sf.get_tensor(src).to(torch.float32)
                if plan.gguf_arch == "gpt2" and key.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight")):
                    t = t.T.contiguous()  # Conv1D (in, out) -> (out, in)
                if plan.gguf_arch in GEMMA and key.endswith("norm.weight"):
                    t = t + 1.0  # Gemma's RMSNorm scales by (1 + w); llama.cpp by the stored gain
                arr = t.numpy()
                if plan.gguf_arch in PERMUTED:
                    if key.endswith(("q_proj.weight", "q_proj.bias")):
                        arr = _permute(arr, heads)
                    elif key.endswith(("k_proj.weight", "k_proj.bias")):
                        arr = _permute(arr, kv_heads)
                name = names.get_name(key, try_suffixes=(".weight", ".bias"))
                if name is None:
                    raise AuraError(M("unmapped", name=key, path=f, arch=plan.gguf_arch))
                yield name, arr
