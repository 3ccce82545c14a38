"""The one-token step of a Llama-family decoder without transformers' per-layer machinery, for the engine's decode loop.

A decode step of a small model is bound by host work, not by arithmetic: transformers' forward runs ~80 aten
ops and a stack of Python calls per layer (the mask functions, the cache's ``update``, ``repeat_kv``, the kwargs
plumbing of every module), while the layer itself needs about twenty. ``lean_step`` gives, for the models whose
layer is the plain pre-norm decoder (Llama, Mistral, Qwen2, Qwen3: RMSNorm, rotary q/k, grouped-query attention,
gated MLP, Qwen3's per-head q/k norms, biases where the checkpoint has them), a ``LeanStep`` that runs that layer
directly on the model's own modules and a KV cache of its own:

* the cache is preallocated once per rollout (or kept from one rollout to the next, for a CUDA graph): one
  tensor per layer for keys and one for values, (N, kv_heads, W + max_new, head_dim), filled from the prompt's
  prefill and written in place one column per step;
* each projection is the model's own module, called through its ``forward`` (so a merged LoRA copy, a layer
  packed for oneDNN or a quantised layer is used as it is): nothing of the weights is copied;
* the rotary cos/sin come from the model's own ``rotary_emb`` once per step (its scaling types included), as one
  (D, D) matrix per row (rotate-half is one ``matmul`` for q and one for k), the mask is one additive row per
  sequence shared by every layer, and attention is one ``scaled_dot_product_attention`` per layer (``enable_gqa``:
  no ``repeat_kv`` copy) over the filled columns (``upto=None``: over all of them, masked, so that every step has
  one shape for a CUDA graph);
* the computation is the model's, in its order; the products differ from transformers' by float rounding only.

It refuses (None) what it does not cover, and the engine then runs the model's own forward: another
architecture, a sliding window narrower than the rollout, tensor-parallel slicing, forward hooks (accelerate's
offloading, FSDP2), peft's LoRA wrappers (they run through the views of ``aura.train.lora_views`` first), weights
of several dtypes, and autocast (transformers' forward casts as its training forward does, which one matmul per
rotation under autocast would not; GRPO's rollouts of a full fine-tuning in bf16 reach the lean step through a
copy of the weights in bf16 with autocast off, ``aura.train.lora_views.cast_view``).
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

FAMILIES = ("llama", "mistral", "qwen2", "qwen3")


def _hooked(model: torch.nn.Module) -> bool:
    from torch.nn.modules import module as torch_module

    if torch_module._global_forward_hooks or torch_module._global_forward_pre_hooks:
        return True
    return any(
        m._forward_hooks or m._forward_pre_hooks or hasattr(m, "_hf_hook") or type(m).__name__.startswith("FSDP")
        for m in model.modules()
    )


def lean_step(causal_lm: torch.nn.Module, *, total: int) -> LeanStep | None:
    """A ``LeanStep`` for ``causal_lm`` (a transformers ``*ForCausalLM``, no wrapper) over ``total`` columns, or
    None where it does not apply (see the module docstring)."""
    if not covers(causal_lm, total=total):
        return None
    return LeanStep(causal_lm)


def covers(causal_lm: torch.nn.Module, *, total: int = 0) -> bool:
    """Whether ``lean_step`` runs ``causal_lm`` (over ``total`` columns)."""
    config = getattr(causal_lm, "config", None)
    body = getattr(causal_lm, "model", None)
    if config is None or getattr(config, "model_type", None) not in FAMILIES or body is None:
        return False
    if getattr(config, "pretraining_tp", 1) > 1 or not hasattr(body, "rotary_emb"):
        return False
    floats = [p for p in causal_lm.parameters() if p.is_floating_point()]
    if not floats or len({p.dtype for p in floats}) > 1 or torch.is_autocast_enabled(floats[0].device.type):
        return False  # mixed dtypes, or autocast (full fine-tuning in bf16): transformers' forward knows its casts
    tuners = sys.modules.get("peft.tuners.tuners_utils")
    for layer in body.layers:
        attn = getattr(layer, "self_attn", None)
        mlp = getattr(layer, "mlp", None)
        if attn is None or not all(hasattr(attn, p) for p in ("q_proj", "k_proj", "v_proj", "o_proj", "scaling")):
            return False
        if mlp is None or not all(hasattr(mlp, p) for p in ("gate_proj", "up_proj", "down_proj", "act_fn")):
            return False
        norms = [getattr(layer, "input_layernorm", None), getattr(layer, "post_attention_layernorm", None)]
        norms += [getattr(attn, "q_norm", None), getattr(attn, "k_norm", None)] if hasattr(attn, "q_norm") else []
        if not all(hasattr(n, "variance_epsilon") and hasattr(n, "weight") for n in norms):
            return False
        window = getattr(attn, "sliding_window", None)
        if window is None and getattr(config, "model_type", None) == "mistral":
            window = getattr(config, "sliding_window", None)
        if window is not None and window < total:
            return False
        if tuners is not None and any(isinstance(m, tuners.BaseTunerLayer) for m in layer.modules()):
            return False
    return not _hooked(causal_lm)


def _norm(module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """transformers' RMSNorm (Llama, Qwen): normalised in fp32, cast back, times the weight."""
    y = x.float()
    y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + module.variance_epsilon)
    return module.weight * y.to(x.dtype)


def _swap_halves(d: int, dtype: torch.dtype, device) -> torch.Tensor:
    """S (D, D) with ``x @ S == rotate_half(x) == cat(-x[D/2:], x[:D/2])``."""
    half = d // 2
    s = torch.zeros((d, d), dtype=dtype, device=device)
    j = torch.arange(half, device=device)
    s[j + half, j] = -1
    s[j, j + half] = 1
    return s


class _Layer:
    """One decoder layer's parts, as the step reads them."""

    def __init__(self, layer: torch.nn.Module):
        a, m = layer.self_attn, layer.mlp
        self.ln1, self.ln2, self.scale = layer.input_layernorm, layer.post_attention_layernorm, a.scaling
        self.q, self.k, self.v, self.o = a.q_proj.forward, a.k_proj.forward, a.v_proj.forward, a.o_proj.forward
        self.q_norm, self.k_norm = getattr(a, "q_norm", None), getattr(a, "k_norm", None)
        self.gate, self.up, self.down, self.act = m.gate_proj.forward, m.up_proj.forward, m.down_proj.forward, m.act_fn


class LeanStep:
    """The one-token forward of a Llama-family model over a cache of its own (see the module docstring).

    ``prime(prefill, expand, width, total)`` writes the prompts' keys and values into the cache (kept from one
    call to the next while the shape stays); ``__call__(tokens, positions, attn, column)`` runs one step and
    returns the next logits (N, V)."""

    def __init__(self, causal_lm: torch.nn.Module):
        body, config = causal_lm.model, causal_lm.config
        self.embed, self.rotary, self.final_norm = body.embed_tokens, body.rotary_emb, body.norm
        self.head = causal_lm.lm_head.forward
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = getattr(body.layers[0].self_attn, "head_dim", None) or config.hidden_size // self.heads
        self.layers = [_Layer(layer) for layer in body.layers]
        self.swap: torch.Tensor | None = None  # rotate_half as a (D, D) matrix, in the compute dtype
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []

    def adopt(self, other: LeanStep) -> LeanStep:
        """This step (its cache tensors kept) running ``other``'s modules: the model's layers as they are now."""
        self.__dict__.update({k: v for k, v in other.__dict__.items() if k not in ("keys", "values")})
        return self

    def prime(self, prefill, expand: torch.Tensor, *, width: int, total: int) -> None:
        """The cache (N rows of ``total`` columns, N = ``len(expand)``) holding each row's prompt: row r gets the
        prefill's row ``expand[r]`` in its first ``width`` columns; the rest is zeros. Kept tensors are reused."""
        n = int(expand.numel())
        k0 = prefill.layers[0].keys
        shape = (n, k0.shape[1], total, k0.shape[3])
        if not self.keys or self.keys[0].shape != shape or self.keys[0].dtype != k0.dtype:
            self.keys = [torch.zeros(shape, dtype=k0.dtype, device=k0.device) for _ in self.layers]
            self.values = [torch.zeros(shape, dtype=k0.dtype, device=k0.device) for _ in self.layers]
            for t in self.keys + self.values:  # written in place by a CUDA graph: its address is part of the graph
                torch._dynamo.mark_static_address(t)
        for i, layer in enumerate(prefill.layers):
            for cache, got in ((self.keys[i], layer.keys), (self.values[i], layer.values)):
                cache[:, :, :width].copy_(got[expand])
                cache[:, :, width:].zero_()

    def _rope(self, h: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """(N, D, D) per row: ``x @ R == x cos + rotate_half(x) sin``, the model's own cos/sin at ``positions``."""
        cos, sin = self.rotary(h[:, None], positions[:, None])  # (N, 1, D) each
        cos, sin = cos[:, 0], sin[:, 0]
        if self.swap is None or self.swap.dtype != cos.dtype or self.swap.device != cos.device:
            self.swap = _swap_halves(self.head_dim, cos.dtype, cos.device)
        return torch.diag_embed(cos) + self.swap * sin[:, None, :]

    def _attention_inputs(self, layer: _Layer, x: torch.Tensor, rope: torch.Tensor):
        """q (N, heads, D), k and v (N, kv_heads, D) of the normed hidden state ``x`` (N, hidden), q and k rotated."""
        n, d = x.shape[0], self.head_dim
        q, k, v = layer.q(x).view(n, -1, d), layer.k(x).view(n, -1, d), layer.v(x).view(n, -1, d)
        if layer.q_norm is not None:
            q, k = _norm(layer.q_norm, q), _norm(layer.k_norm, k)
        return torch.matmul(q, rope), torch.matmul(k, rope), v

    def __call__(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        attn: torch.Tensor,
        column: torch.Tensor,
        *,
        upto: int | None = None,
    ) -> torch.Tensor:
        """Next logits (N, V) of ``tokens`` (N,) at ``positions`` (N,), written to cache ``column`` (a 1-element
        long tensor), attending to the columns ``attn`` (N, total) marks; ``upto``: only the first ``upto``
        columns are read (None: all of them, one shape for every step, for a CUDA graph)."""
        n = tokens.shape[0]
        h = self.embed(tokens)  # (N, hidden)
        rope = self._rope(h, positions)
        seen = attn[:, None, None, :upto]  # (N, 1, 1, C)
        mask = torch.zeros(seen.shape, dtype=h.dtype, device=h.device).masked_fill_(seen == 0, float("-inf"))
        for i, layer in enumerate(self.layers):
            q, k, v = self._attention_inputs(layer, _norm(layer.ln1, h), rope)
            keys, values = self.keys[i], self.values[i]
            keys.index_copy_(2, column, k[:, :, None])
            values.index_copy_(2, column, v[:, :, None])
            if upto is not None:
                keys, values = keys[:, :, :upto], values[:, :, :upto]
            o = F.scaled_dot_product_attention(
                q[:, :, None], keys, values, attn_mask=mask, scale=layer.scale, enable_gqa=True
            )
            h = h + layer.o(o.reshape(n, -1))
            x = _norm(layer.ln2, h)
            h = h + layer.down(layer.act(layer.gate(x)) * layer.up(x))
        return self.head(_norm(self.final_norm, h))
