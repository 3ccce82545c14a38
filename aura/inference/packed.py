"""fp32 linear layers with their weights packed once for oneDNN, for the length of a ``with`` block.

At a decode step's few rows a CPU linear layer is bound by reading its weight, and BLAS repacks that
weight into its blocked layout at every call. ``packed_view`` replaces every fp32 ``nn.Linear`` (and GPT-2's
``Conv1D``) of a model on the CPU by a ``PackedLinear`` holding the weight reordered once into oneDNN's
layout (``torch.ops.mkldnn``: the ops Inductor's CPU weight prepacking uses), and puts the layers back on
exit; the model's own weights are read, never written. The products equal the unpacked ones up to float
rounding (another summation order). On a 2-core EPYC, GRPO's rollouts of 8 rows x 64 tokens of a tiny
Llama took ~10 % less CPU time (``bench/grpo_parts.py``).

GRPO's rollouts use it for the models the engine's lean step does not run (``aura.inference.lean``), after
``aura.train.lora_views.merged_view`` has put plain layers holding the merged LoRA weights in place: the packing
costs one reorder of the weights per rollout, which a whole batch of completions repays. With the lean step the
packed layers made the rollout slower (``bench/bench_rollout.py``, hidden 128), so it runs the merged layers as
they are. Distillation's frozen teacher is packed once for the whole run (``pack_in_place``: its original weights
are freed): at a training micro-batch's few hundred rows the packed product is faster still (a tiny Llama teacher's
forward took ~35 % less CPU time on that EPYC, ``bench/distill_parts.py``). It refuses (None) what it does not
cover: another dtype or device, a torch without these ops, and a model that still holds peft's LoRA wrappers (they
read their base layer's weight).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

import torch


def packable() -> bool:
    """Whether this torch has oneDNN's prepacked fp32 linear."""
    return (
        torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
        and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    )


def sharded(model: torch.nn.Module) -> bool:
    """Whether any parameter of ``model`` is a shard (an FSDP2 ``DTensor``): a shard is not the layer's weight,
    and FSDP2 swaps the whole weight in only around each forward, so nothing of such a model is packed."""
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in model.parameters())


class PackedLinear(torch.nn.Module):
    """``x W^T + b`` for a fixed fp32 ``W`` (out, in), reordered once into oneDNN's blocked layout."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None):
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(), 8)  # 8: a rows hint
        self.bias = None if bias is None else bias.detach()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")


class PackedLayers:
    """Every fp32 linear layer of a model with its packed twin, built once; ``with layers.view():`` puts the twins
    in place for a block and the originals back after it, as often as asked (layers that never change, such as
    a LoRA student's frozen ones in distillation, are packed once for the whole run instead of once per block)."""

    def __init__(self, swaps: list):
        self.swaps = swaps

    def view(self) -> contextlib.AbstractContextManager:
        return _swapped(self.swaps)


def _linears(model: torch.nn.Module) -> list | None:
    """(parent, name, layer) of every fp32 CPU linear layer (``nn.Linear``, GPT-2's ``Conv1D``) of ``model``, or
    None when one of them is in another dtype or device or a peft LoRA wrapper holds one."""
    from transformers.pytorch_utils import Conv1D

    tuners = sys.modules.get("peft.tuners.tuners_utils")  # no peft imported: no peft layer exists
    found = []
    for parent in model.modules():
        if tuners is not None and isinstance(parent, tuners.BaseTunerLayer):
            return None  # a peft LoRA wrapper: it reads its base layer's weight
        for name, child in parent.named_children():
            if type(child) not in (torch.nn.Linear, Conv1D):
                continue
            if child.weight.dtype != torch.float32 or child.weight.device.type != "cpu":
                return None
            found.append((parent, name, child))
    return found


def _packed(child: torch.nn.Module) -> PackedLinear:
    from transformers.pytorch_utils import Conv1D

    return PackedLinear(child.weight.t() if isinstance(child, Conv1D) else child.weight, child.bias)


def packed_layers(model: torch.nn.Module, *, precision: str, device: torch.device) -> PackedLayers | None:
    """``model``'s fp32 linear layers packed once (see the module docstring), or None where it does not apply."""
    if precision != "fp32" or device.type != "cpu" or not packable() or sharded(model):
        return None
    found = _linears(model)
    with torch.no_grad():
        swaps = [(parent, name, child, _packed(child)) for parent, name, child in found or []]
    return PackedLayers(swaps) if swaps else None


def pack_in_place(model: torch.nn.Module, *, precision: str, device: torch.device) -> bool:
    """Every fp32 linear layer of ``model`` replaced for good by its packed twin, for a frozen model that nothing
    reads by its weights (distillation's teacher); False where ``packed_layers`` would give None. One layer at a
    time: each original is let go as soon as its twin exists (its weight freed unless something else holds it),
    so the peak holds one layer twice, not the model."""
    usable = precision == "fp32" and device.type == "cpu" and packable() and not sharded(model)
    found = _linears(model) if usable else None
    if not found:
        return False
    with torch.no_grad():
        while found:
            parent, name, child = found.pop()
            parent._modules[name] = _packed(child)
            del child
    return True


def packed_view(
    model: torch.nn.Module, *, precision: str, device: torch.device
) -> contextlib.AbstractContextManager | None:
    """``model`` with every fp32 linear layer packed (see the module docstring), or None."""
    layers = packed_layers(model, precision=precision, device=device)
    return None if layers is None else layers.view()


@contextlib.contextmanager
def _swapped(swaps: list) -> Iterator[None]:
    try:
        for parent, name, _, packed in swaps:
            parent._modules[name] = packed
        yield
    finally:
        for parent, name, original, _ in swaps:
            parent._modules[name] = original
