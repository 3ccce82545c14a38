"""Whole weights beside the training, placed so that every rank can hold them: ``place_frozen`` puts a frozen
model (full fine-tuning's reference, distillation's teacher) on the device, sharded with FSDP2 where the model
being trained is sharded or a whole copy would not fit; ``whole_weights`` gathers an FSDP2 model's weights once
for sampling, where each rank runs its own number of forwards (GRPO's rollouts, distillation's own answers).
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch

from aura.core import console
from aura.core.i18n import Messages
from aura.distributed.parallel import (
    STATE_SHARE,
    choose_strategy,
    device_memory_bytes,
    find_blocks,
    fsdp_api,
    is_quantized,
    training_state_bytes,
)
from aura.distributed.process import DistInfo

M = Messages(
    "distributed.weights",
    {
        "frozen_sharded": (
            "{what} se reparte con FSDP2 entre {world:proceso|procesos}: {shard} por proceso en vez de "
            "{whole} ({why}).",
            "{what} is sharded with FSDP2 over {world:rank|ranks}: {shard} per rank instead of {whole} ({why}).",
        ),
        "role_reference": (
            "La copia congelada del modelo (la referencia)",
            "The frozen copy of the model (the reference)",
        ),
        "role_teacher": ("El maestro congelado (--teacher)", "The frozen teacher (--teacher)"),
        "frozen_why_fsdp": ("el modelo que se entrena también se reparte", "the model being trained is sharded too"),
        "frozen_why_room": (
            "entera no cabría junto al estado de entrenamiento, {need} de {have}",
            "whole it would not fit beside the training state, {need} of {have}",
        ),
    },
)


def place_frozen(
    module: torch.nn.Module,
    *,
    like: torch.nn.Module,
    dist: DistInfo,
    strategy: str = "auto",
    device_memory: int | None = None,
    role: str = "reference",
) -> torch.nn.Module:
    """A frozen module that runs beside the model being trained (full fine-tuning's reference, a copy of
    ``like`` before training; ``role`` "teacher": distillation's teacher, as the log names it), on
    ``dist.device``: sharded with FSDP2 block by block (its forward gathers one block at a time: 1/world of
    its weights stay on each rank) when ``parallelize`` will shard ``like``, or when a whole copy would not
    fit beside ``like``'s training state under DDP; else whole. Never wrapped in DDP: it has no gradients. A
    copy of the whole model on every rank is what FSDP exists to avoid."""
    from aura.core.atomic import human_bytes

    module.requires_grad_(False)
    if dist.world_size == 1 or is_quantized(module):
        return module.to(dist.device)
    chosen, _ = choose_strategy(like, dist=dist, strategy=strategy, device_memory=device_memory, quiet=True)
    whole = sum(p.numel() * p.element_size() for p in module.parameters())
    have = device_memory if device_memory is not None else device_memory_bytes(dist)
    need = training_state_bytes(like) + whole
    why = M("frozen_why_fsdp")
    if chosen == "ddp" and strategy == "auto" and need > int(have * STATE_SHARE):
        chosen, why = "fsdp", M("frozen_why_room", need=human_bytes(need), have=human_bytes(have))
    if chosen != "fsdp":
        return module.to(dist.device)
    from torch.distributed.device_mesh import init_device_mesh

    _, _, fully_shard = fsdp_api()
    mesh = init_device_mesh(dist.device.type, (dist.world_size,))
    for block in find_blocks(module):
        fully_shard(block, mesh=mesh)
    fully_shard(module, mesh=mesh)
    console.info(
        M(
            "frozen_sharded",
            what=M(f"role_{role}"),
            world=dist.world_size,
            shard=human_bytes(whole // dist.world_size),
            whole=human_bytes(whole),
            why=why,
        )
    )
    return module


_WHOLE: set[int] = set()  # ids of the models inside a ``whole_weights`` block


@contextlib.contextmanager
def whole_weights(model: torch.nn.Module) -> Iterator[None]:
    """Every FSDP2 module of ``model`` unsharded for a block of forwards whose number may differ between ranks
    (sampling: each rank's completions stop at their own lengths). On entry one all-gather per FSDP2 module, in
    the same order on every rank; inside, every forward runs on the local whole weights with no collective (the
    modules do not reshard after forward); on exit each is resharded (no collective) and its own
    reshard-after-forward setting put back. Every rank enters and leaves together; a block nested in another
    for the same model (a multi-turn rollout, resampled groups) gathers nothing more. Holds the whole weights on
    every rank while open (what one process holds). A no-op for a model without FSDP2 modules (one process,
    DDP, DeepSpeed ZeRO-1/2: the weights are whole already)."""
    modules = [m for m in model.modules() if isinstance(m, fsdp_api()[0])]
    if not modules or id(model) in _WHOLE:  # nested: the outer block gathered them and reshards them
        yield
        return
    _WHOLE.add(id(model))
    # FSDP2 has a setter for this flag but no getter: the groups' own record of it is read to restore it exactly
    groups = [g for m in modules for g in m._get_fsdp_state()._fsdp_param_groups]
    saved = [g.post_forward_mesh_info for g in groups]
    for m in modules:
        m.set_reshard_after_forward(False, recurse=False)
    try:
        for m in modules:
            m.unshard()
        yield
    finally:
        _WHOLE.discard(id(model))
        for m in modules:
            m.reshard()
        for g, info in zip(groups, saved):
            g.post_forward_mesh_info = info
