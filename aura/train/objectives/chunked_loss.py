"""Linear + cross entropy without the full (tokens x vocab) logits.

The plain loss computes ``lm_head(hidden)`` for every token at once: B x T x V logits, their fp32 upcast
and its gradient, about 7 GB at vocab 128k and 2048 tokens per row. Here the hidden states are captured at
the head's input (the model's own forward still runs, through any DDP / compile / peft wrapper, so their
hooks and gradient synchronisation work as usual), the head is skipped (it sees an empty sequence), and
``LinearCrossEntropy`` walks the tokens in chunks: each chunk's logits exist only while its loss and its
gradients (for the hidden states, the head's weight and bias) are computed, in the forward pass, as
Liger's fused kernel does. The backward only scales the stored gradients, so nothing is recomputed.
On CUDA with ``liger-kernel`` installed (the ``liger`` extra) its Triton kernel does the same work.

``head_for_chunked_loss`` says when this applies: a causal LM whose output is exactly ``lm_head(hidden)``
(GPT-2, Llama, Mistral, Qwen2/3; no logit soft-capping or scaling), a plain ``nn.Linear`` head (not a
LoRA-wrapped or quantised one), and a model that is not sharded (FSDP2 and DeepSpeed hand the head's
parameters over only inside their own forward) nor compiled as a whole. Anything else takes the plain
path. Under DDP the forward still goes through DDP's own ``forward`` (the hook sits on the inner head), so
its reducer is prepared as usual and the head's gradient, made by ``LinearCrossEntropy``, is all-reduced
with the others.
"""

from __future__ import annotations

import contextlib
import importlib.util

import torch

from aura.models.hardware import chunk_tokens

# model types whose CausalLM forward is `logits = lm_head(hidden_states)` with nothing applied after
_PLAIN_HEAD_TYPES = frozenset({"gpt2", "llama", "mistral", "qwen2", "qwen3", "olmo", "olmo2"})
_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling", "output_multiplier_scale")


def head_for_chunked_loss(model) -> torch.nn.Linear | None:
    """The output head the chunked loss multiplies by, or None when ``model`` must take the plain path."""
    from aura.distributed.parallel import strategy_of, unwrap

    if strategy_of(model) in ("fsdp", "deepspeed"):
        return None
    if hasattr(getattr(model, "module", model), "_orig_mod"):  # a whole-model torch.compile (Aura compiles
        return None  # blocks): a hook added per call would make it recompile every step
    inner = unwrap(model)
    if hasattr(inner, "get_base_model"):  # peft.PeftModel -> the transformers model inside
        inner = inner.get_base_model()
    config = getattr(inner, "config", None)
    if config is None or getattr(config, "model_type", None) not in _PLAIN_HEAD_TYPES:
        return None
    if any(getattr(config, key, None) not in (None, 1, 1.0) for key in _LOGIT_TRANSFORMS):
        return None
    head = inner.get_output_embeddings() if hasattr(inner, "get_output_embeddings") else None
    if type(head) is not torch.nn.Linear:  # a LoRA / quantised / modules_to_save head computes more than W h + b
        return None
    from torch.distributed.tensor import DTensor

    if isinstance(head.weight, DTensor):
        return None
    return head


@contextlib.contextmanager
def capture_head_input(head: torch.nn.Module):
    """Inside the block, ``head`` records its input in ``box["hidden"]`` and computes nothing (its input
    is replaced by an empty sequence, so the model returns (B, 0, V) logits)."""
    box: dict[str, torch.Tensor] = {}

    def hook(_module, args):
        hidden = args[0]  # (B, T, d)
        box["hidden"] = hidden
        return (hidden.narrow(-2, 0, 0), *args[1:])  # (B, 0, d)

    handle = head.register_forward_pre_hook(hook)
    try:
        yield box
    finally:
        handle.remove()


def _compute_dtype(h: torch.Tensor) -> torch.dtype:
    """The dtype the plain head would run in: autocast's when it is on, else the hidden states'."""
    kind = h.device.type
    if torch.is_autocast_enabled(kind):
        return torch.get_autocast_dtype(kind)
    return h.dtype


def _chunk_loss(h: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, t: torch.Tensor):
    """(summed loss, fp32 logits, log-sum-exp, safe targets, valid mask) of one chunk."""
    logits = torch.nn.functional.linear(h, w, b).float()  # (n, V)
    valid = t != -100
    safe = torch.where(valid, t, torch.zeros_like(t))
    lse = torch.logsumexp(logits, dim=-1)  # (n,)
    picked = logits.gather(1, safe.unsqueeze(1)).squeeze(1)
    return ((lse - picked) * valid).sum(), logits, lse, safe, valid


class LinearCrossEntropy(torch.autograd.Function):
    """sum_i CE(h_i W^T + b, t_i) over targets != -100, chunk by chunk; gradients made in the forward."""

    @staticmethod
    def forward(ctx, h, weight, bias, targets, chunk: int, dtype: torch.dtype):
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        need_b = bias is not None and ctx.needs_input_grad[2]
        w = weight.to(dtype)
        b = bias.to(dtype) if bias is not None else None
        loss = torch.zeros((), dtype=torch.float32, device=h.device)
        grad_h = torch.empty_like(h) if need_h else None
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_w else None
        grad_b = torch.zeros(bias.shape, dtype=torch.float32, device=bias.device) if need_b else None
        for s in range(0, h.shape[0], chunk):
            hc = h[s : s + chunk].to(dtype)  # (n, d)
            part, logits, lse, safe, valid = _chunk_loss(hc, w, b, targets[s : s + chunk])
            loss += part
            g = logits.sub_(lse.unsqueeze(1)).exp_()  # softmax, in place of the logits: (n, V) fp32
            g[torch.arange(g.shape[0], device=g.device), safe] -= 1.0
            g.mul_(valid.unsqueeze(1))
            if need_b:
                grad_b += g.sum(0)
            g = g.to(dtype)
            if need_h:
                grad_h[s : s + chunk] = (g @ w).to(h.dtype)
            if need_w:  # accumulated in place: no (V, d) temporary per chunk in fp32
                if dtype == torch.float32:
                    grad_w.addmm_(g.t(), hc)
                else:
                    grad_w.add_(g.t() @ hc)
        ctx.save_for_backward(grad_h, grad_w, grad_b)
        ctx.dtypes = (weight.dtype, bias.dtype if bias is not None else None)
        return loss

    @staticmethod
    def backward(ctx, grad_out):
        grad_h, grad_w, grad_b = ctx.saved_tensors
        w_dtype, b_dtype = ctx.dtypes
        gh = grad_h * grad_out.to(grad_h.dtype) if grad_h is not None else None
        gw = (grad_w * grad_out).to(w_dtype) if grad_w is not None else None
        gb = (grad_b * grad_out).to(b_dtype) if grad_b is not None else None
        return gh, gw, gb, None, None, None


def _liger_available(h: torch.Tensor) -> bool:
    """Liger's fused kernel on CUDA, when installed in a version that accumulates the head's gradient in
    fp32 (``accum_dtype``): older ones sum it in bf16 over every chunk, which Aura's own path never does.
    Ran on an NVIDIA H200 with liger-kernel 0.8.5 (bench/gpu_suite.py's ``liger`` check): within 8.1e-4 of the
    plain loss and gradients at vocab 128k, docs/benchmarks.md "GPU suite, second lease"."""
    if not h.is_cuda or importlib.util.find_spec("liger_kernel") is None:
        return False
    import inspect

    from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss

    return "accum_dtype" in inspect.signature(LigerFusedLinearCrossEntropyLoss.__init__).parameters


def linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    *,
    chunk: int | None = None,
) -> torch.Tensor:
    """Summed cross entropy of ``hidden @ weight.T + bias`` against ``targets`` (-100 ignored), fp32.

    ``hidden`` (..., d) and ``targets`` (...) are flattened over tokens. Equal to
    ``F.cross_entropy(F.linear(hidden, weight, bias).float(), targets, reduction="sum")`` and to its
    gradients; the full logits never exist.
    """
    h = hidden.reshape(-1, hidden.shape[-1])  # (N, d)
    t = targets.reshape(-1).to(h.device)  # (N,)
    dtype = _compute_dtype(h)
    if chunk is None and _liger_available(h):
        from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss

        fused = LigerFusedLinearCrossEntropyLoss(ignore_index=-100, reduction="sum", accum_dtype=torch.float32)
        with torch.autocast(h.device.type, enabled=False):
            return fused(weight.to(dtype), h.to(dtype), t, bias.to(dtype) if bias is not None else None).float()
    chunk = chunk or chunk_tokens(h.shape[0], weight.shape[0], h.shape[1], device_type=h.device.type)
    with torch.autocast(h.device.type, enabled=False):  # dtypes are explicit inside
        if torch.is_grad_enabled() and (
            h.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad)
        ):
            return LinearCrossEntropy.apply(h, weight, bias, t, chunk, dtype)
        w = weight.to(dtype)
        b = bias.to(dtype) if bias is not None else None
        total = torch.zeros((), dtype=torch.float32, device=h.device)
        for s in range(0, h.shape[0], chunk):
            total += _chunk_loss(h[s : s + chunk].to(dtype), w, b, t[s : s + chunk])[0]
        return total


def chunked_token_loss_sum(
    model, head: torch.nn.Linear, batch: dict[str, torch.Tensor], *, chunk: int | None = None
) -> torch.Tensor:
    """``token_loss_sum`` through ``linear_cross_entropy``: the model's forward (through its wrappers)
    with the head skipped, then the loss from the captured hidden states."""
    kwargs = {k: batch[k] for k in ("attention_mask", "position_ids") if k in batch}
    with capture_head_input(head) as box:
        model(input_ids=batch["input_ids"], use_cache=False, **kwargs)
    hidden = box["hidden"]  # (B, T, d)
    if "shift_labels" in batch:
        targets = batch["shift_labels"]  # (B, T)
    else:
        hidden, targets = hidden[:, :-1], batch["labels"][:, 1:]  # (B, T-1, d), (B, T-1)
    return linear_cross_entropy(hidden, head.weight, head.bias, targets, chunk=chunk)
