"""Views of a peft LoRA model for the passes that need no gradient (GRPO's rollouts and its reference), and its
frozen layers packed for a training forward (distillation).

A peft ``lora.Linear`` runs its base layer, then ``lora_B(lora_A(x)) * scaling`` and an addition, in
Python, for every projection of every token. In a rollout (one token per forward, many forwards) that
wrapper and its two extra matmuls cost as much as the base layer itself on a small model. Two views
take the wrappers out for the length of a ``with`` block and put them back exactly as they were:

* ``base_view``: every LoRA layer replaced by its base layer in its parent module. The same computation
  as peft's ``disable_adapter()`` (which calls the base layer alone), so the reference's log-probs are
  bit for bit the same, without the wrappers' overhead (``adapters_off``: it, else peft's switch, for the
  reference passes of DPO, KTO and GRPO).
* ``merged_view``: every LoRA layer replaced by its base layer holding a *new* weight ``W + scaling B A``
  (peft's own ``get_delta_weight``). The original weight tensors are never written: unlike peft's
  ``merge_adapter()`` / ``unmerge_adapter()``, which add then subtract the delta in place and leave float
  rounding in the frozen base (it drifts step after step, and a resumed run, which loads the base from
  disk, would not be the run that went on), the base is restored bit for bit. The merged product differs
  from the unmerged one by float rounding only, so the sampled tokens are the same up to that rounding.
  It is offered only where that rounding is fp32's: fp32 weights and no lower-precision autocast (with
  bf16/fp16 weights, or autocast, ``W + dW`` rounded to 16 bits loses an adapter's small update that the
  unmerged path keeps), a plain LoRA (no DoRA or other variant, no LoRA bias), and on the CPU (it holds a
  second copy of the adapted weights while it is open, which the CPU's memory affords and a GPU's may not).

``compute_view`` is the merge for the other precisions and devices (bf16/fp16 training, CUDA): every LoRA layer
replaced by its base layer holding ``W + scaling B A`` summed in fp32 and rounded once to the compute dtype,
and every other floating weight of the model cast to that dtype (new tensors again, the originals restored
on exit), so that the decode step runs plain layers without autocast. Built at each rollout from the current
adapter (so refreshed after every optimizer step). Its rounding is the compute dtype's, not fp32's: the
sampler keeps its own log-probs and GRPO's truncated importance-sampling correction accounts for the
difference, as for vLLM.

``cast_view`` is the same for a fully fine-tuned policy (no adapters): every floating weight cast to the compute
dtype, new tensors while the block runs. On a GPU both are offered only where their copies fit in the free memory
beside the training state (else peft's wrappers, or autocast, as before). The copies are new tensors at every
rollout: a CUDA graph of the decode step meets new weight addresses each time and is recorded again (torch 2.13
does not count that towards its re-record limit; not measured on a GPU).

``merged_weights`` gives the same merged tensors by name, for an inference engine that holds its own copy
(vLLM), again without writing into the model.

``frozen_packed`` is for a pass that does need gradients, distillation's training forward: every frozen
bias-free fp32 linear layer (the adapted layers' bases, the head) replaced by one holding its weight packed once
for oneDNN for the forward, the backward to the input using the plain weight (``FrozenPackedLinear``); the base
never changes in a LoRA run, so one packing serves the whole run. On 12 micro-batches of a tiny Llama it took
~6 % off the loss path's CPU time on top of the teacher's packing (``bench/distill_parts.py``).

All return None for a model they do not cover (not a peft LoRA model, QLoRA's 4-bit layers for the merge,
``modules_to_save``, adapters already merged): the caller keeps peft's own path then.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator

import torch

_LAYERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> its LoRA layers, found once


def _lora_layers(model) -> list[tuple[torch.nn.Module, str, torch.nn.Module]] | None:
    """(parent, attribute, LoRA layer) of every LoRA layer of a peft model, or None when the model holds
    anything these views do not handle (or is not a peft LoRA model). Found by one walk of the model, kept
    for the next calls (a reference pass or a rollout at every step) while every layer is still in its place,
    unmerged and enabled (a 24-layer model has ~2,000 modules: the walk cost ~8 ms a call)."""
    if not hasattr(model, "peft_config"):
        return None
    kept = _LAYERS.get(model)
    if kept is not None and all(
        parent._modules.get(attr) is lora and not lora.merged and not lora.disable_adapters
        for parent, attr, lora in kept
    ):
        return kept
    from peft.tuners.lora import LoraLayer
    from peft.tuners.tuners_utils import BaseTunerLayer

    _LAYERS.pop(model, None)
    layers, modules = [], {}
    for name, module in model.named_modules():
        modules[name] = module
        if isinstance(module, BaseTunerLayer):
            if not isinstance(module, LoraLayer) or module.merged or module.disable_adapters:
                return None
            parent_name, _, attr = name.rpartition(".")
            layers.append((modules[parent_name], attr, module))
        elif "ModulesToSave" in type(module).__name__ or "TrainableTokens" in type(module).__name__:
            return None  # peft swaps these too when the adapter is disabled: leave it to peft
    if layers:
        _LAYERS[model] = layers
    return layers or None


@contextlib.contextmanager
def _swap(layers: list, modules: list[torch.nn.Module]) -> Iterator[None]:
    """Put each module where its LoRA layer was; put the LoRA layers back on exit."""
    try:
        for (parent, attr, _), module in zip(layers, modules):
            parent._modules[attr] = module
        yield
    finally:
        for parent, attr, lora in layers:
            parent._modules[attr] = lora


@contextlib.contextmanager
def _with_weights(bases: list, weights: list) -> Iterator[None]:
    """Each base layer holding a new weight for the block (a new Parameter: the original is never written)."""
    originals = [base._parameters.get("weight") for base in bases]
    try:
        for base, weight in zip(bases, weights):
            base._parameters["weight"] = torch.nn.Parameter(weight, requires_grad=False)
        yield
    finally:
        for base, original in zip(bases, originals):
            base._parameters["weight"] = original


def base_view(model) -> contextlib.AbstractContextManager | None:
    """The base model without the LoRA wrappers (exactly peft's ``disable_adapter()``), or None."""
    layers = _lora_layers(model)
    if layers is None:
        return None
    return _swap(layers, [lora.get_base_layer() for _, _, lora in layers])


def adapters_off(model) -> contextlib.AbstractContextManager:
    """A peft model's base for the length of a block, for a reference pass: ``base_view`` where it covers the
    model, else peft's ``disable_adapter()``. The same log-probs bit for bit; peft's switch also checks every
    layer's status and flips each layer's flag on entry and on exit (``get_model_status``,
    ``enable_adapter_layers``: walks of every module on entry and on exit, 59 ms against 1.7 ms a call for a
    24-layer model on a CPU, ``bench/bench_reference_pass.py``)."""
    return base_view(model) or model.disable_adapter()


def _plain(lora) -> list[str] | None:
    """The active adapters of a plain ``lora.Linear`` (no DoRA or other variant, no LoRA bias), or None."""
    from peft.tuners.lora.layer import Linear

    adapters = [a for a in lora.active_adapters if a in lora.lora_A]
    if type(lora) is not Linear or any(a in lora.lora_variant or lora.lora_bias.get(a) for a in adapters):
        return None
    return adapters


def merged_weights(model) -> Iterator[tuple[str, torch.Tensor]] | None:
    """(name, tensor) of every weight of a peft LoRA model but the adapters', under the base model's own names
    (peft's ``base_model.model.`` and ``.base_layer`` taken out), each adapted weight as a new tensor
    ``W + scaling B A`` in W's dtype (what peft's merge would write into W); or None."""
    layers = _lora_layers(model)
    if layers is None or any(_plain(lora) is None for _, _, lora in layers):
        return None
    adapted = {id(lora.get_base_layer().weight): lora for _, _, lora in layers}

    def pairs() -> Iterator[tuple[str, torch.Tensor]]:
        with torch.no_grad():
            for name, param in model.named_parameters():
                if "lora_" in name:
                    continue
                tensor, lora = param.detach(), adapted.get(id(param))
                if lora is not None:
                    tensor = tensor.clone()
                    for a in _plain(lora):
                        tensor += lora.get_delta_weight(a).to(tensor.dtype)
                yield name.removeprefix("base_model.model.").replace(".base_layer", ""), tensor

    return pairs()


def _merged_fp32(lora, adapters: list[str]) -> torch.Tensor:
    """A new fp32 tensor ``W + scaling B A`` for every adapter of ``lora``, in the base weight's own layout
    (GPT-2's Conv1D is transposed: peft's ``get_delta_weight`` handles it); W itself is never written."""
    merged = lora.get_base_layer().weight.detach().float().clone()
    for a in adapters:
        merged += lora.get_delta_weight(a).float()
    return merged


def merged_view(model, *, precision: str, device: torch.device) -> contextlib.AbstractContextManager | None:
    """The policy with every adapter merged into new copies of its base weights (see the module
    docstring for when it is offered), or None."""
    if precision != "fp32" or device.type != "cpu":
        return None
    layers = _lora_layers(model)
    if layers is None:
        return None
    bases, weights = [], []
    with torch.no_grad():
        for _, _, lora in layers:
            base, adapters = lora.get_base_layer(), _plain(lora)
            if (
                adapters is None
                or getattr(base, "weight", None) is None
                or base.weight.dtype != torch.float32
                or base.weight.device.type != "cpu"
                or any(lora.lora_A[a].weight.dtype != torch.float32 for a in adapters)
            ):
                return None
            bases.append(base)
            weights.append(_merged_fp32(lora, adapters))
    return _stack(_with_weights(bases, weights), _swap(layers, bases))


def compute_view(model, *, dtype: torch.dtype) -> contextlib.AbstractContextManager | None:
    """The policy as plain layers in ``dtype``, each adapter merged (see the module docstring), or None."""
    layers = _lora_layers(model)
    if layers is None:
        return None
    bases, active, weights = [], [], []
    for _, _, lora in layers:
        base, adapters = lora.get_base_layer(), _plain(lora)
        if adapters is None or getattr(base, "weight", None) is None or not base.weight.is_floating_point():
            return None
        bases.append(base)
        active.append(adapters)
    inside = {id(p) for _, _, lora in layers for p in lora.parameters()}  # the adapters and the adapted weights
    others = [p for p in model.parameters() if id(p) not in inside and p.is_floating_point() and p.dtype != dtype]
    if not _affordable([base.weight for base in bases] + others, dtype):
        return None
    with torch.no_grad():
        for (_, _, lora), adapters in zip(layers, active):
            weights.append(_merged_fp32(lora, adapters).to(dtype))
    return _stack(_with_weights(bases, weights), _swap(layers, bases), _cast(model, dtype))


def cast_view(model, *, dtype: torch.dtype) -> contextlib.AbstractContextManager | None:
    """A fully fine-tuned policy (no peft) as plain layers in ``dtype``: ``compute_view`` for a model without
    adapters, so that a bf16/fp16 run's rollouts decode without autocast (and through the engine's lean step);
    None for a peft model (``compute_view`` or peft's own path), or where the copies would not fit beside the
    training state on the model's GPU (autocast's path then, as before)."""
    if hasattr(getattr(model, "module", model), "peft_config"):
        return None
    if not _affordable([p for p in model.parameters() if p.is_floating_point() and p.dtype != dtype], dtype):
        return None
    return _cast(model, dtype)


def _affordable(tensors: list[torch.Tensor], dtype: torch.dtype) -> bool:
    """Whether a new copy in ``dtype`` of each of ``tensors`` (shared ones once) fits in its GPU's free memory,
    the allocator's idle reserve included, with a quarter to spare for the rollout's cache and activations (a
    view that would not fit is not offered: peft's or autocast's path then, as before); always on the CPU."""
    need: dict[torch.device, int] = {}
    for t in {id(t): t for t in tensors}.values():
        need[t.device] = need.get(t.device, 0) + t.numel() * dtype.itemsize
    for device, size in need.items():
        if device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(device)
            idle = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
            if size * 1.25 > free + idle:
                return False
    return True


@contextlib.contextmanager
def _cast(model, dtype: torch.dtype) -> Iterator[None]:
    """Every floating parameter of ``model`` not yet in ``dtype`` replaced by a cast copy (a tensor shared by
    two modules, as tied embeddings, stays shared); the originals put back on exit."""
    saved, copies = [], {}
    try:
        with torch.no_grad():
            for module in model.modules():
                for name, param in list(module._parameters.items()):
                    if param is None or not param.is_floating_point() or param.dtype == dtype:
                        continue
                    if id(param) not in copies:
                        copies[id(param)] = torch.nn.Parameter(param.detach().to(dtype), requires_grad=False)
                    saved.append((module, name, param))
                    module._parameters[name] = copies[id(param)]
        yield
    finally:
        for module, name, param in reversed(saved):
            module._parameters[name] = param


@contextlib.contextmanager
def _stack(*contexts: contextlib.AbstractContextManager) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for c in contexts:
            stack.enter_context(c)
        yield


class _FrozenPackedFn(torch.autograd.Function):
    """``x W^T`` for a frozen ``W`` held packed for the forward: the gradient flows to ``x`` only, as ``g W``
    with the plain ``W`` (a packed ``W^T`` would be faster still, but oneDNN's packed tensor keeps its source
    alive: a transposed copy would cost twice the layer's weight in memory)."""

    @staticmethod
    def forward(ctx, x, packed, weight):
        ctx.weight = weight
        return torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")

    @staticmethod
    def backward(ctx, grad):
        return grad.matmul(ctx.weight), None, None


class FrozenPackedLinear(torch.nn.Module):
    """A frozen bias-free fp32 ``nn.Linear`` whose input takes gradients: ``W`` packed once for oneDNN for the
    forward (``aura.inference.packed``'s ops; the packed tensor holds on to ``W`` itself, so it costs one more
    copy of the weight); equal to the plain layer up to float rounding."""

    def __init__(self, weight: torch.Tensor):
        super().__init__()
        self.weight = weight.detach()
        self.packed = torch.ops.mkldnn._reorder_linear_weight(self.weight, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _FrozenPackedFn.apply(x, self.packed, self.weight)


def frozen_packed(model, *, precision: str, device: torch.device):
    """A LoRA model's frozen linear layers (every adapted layer's base, and a frozen head) packed once for the
    training forward (``FrozenPackedLinear``; ``aura.inference.packed.PackedLayers``: ``view()``
    swaps them in for a block), for fp32 on the CPU; None elsewhere, for a model these views do not cover, or
    where a layer has a bias or a trainable weight. The base weights never change in a LoRA run, so one packing
    serves every step; the packed copies (once the frozen linear weights) are the memory it costs."""
    from aura.inference.packed import PackedLayers, packable, sharded

    if precision != "fp32" or device.type != "cpu" or not packable() or sharded(model):
        return None
    layers = _lora_layers(model)
    if layers is None:
        return None
    swaps = []
    adapted = {id(lora.get_base_layer()) for _, _, lora in layers}
    with torch.no_grad():
        for _, _, lora in layers:
            base = lora.get_base_layer()
            if not _frozen_plain_linear(base):
                return None
            swaps.append((lora, "base_layer", base, FrozenPackedLinear(base.weight)))
        for parent in model.modules():
            for name, child in parent.named_children():
                if id(child) not in adapted and _frozen_plain_linear(child):
                    swaps.append((parent, name, child, FrozenPackedLinear(child.weight)))
    return PackedLayers(swaps)


def _frozen_plain_linear(module) -> bool:
    return (
        type(module) is torch.nn.Linear
        and module.bias is None
        and not module.weight.requires_grad
        and module.weight.dtype == torch.float32
        and module.weight.device.type == "cpu"
    )
