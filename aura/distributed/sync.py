"""The cross-rank weight check behind the ``Sync=`` field of every log line under torchrun."""

from __future__ import annotations

import torch

from aura.core.errors import AuraError
from aura.core.i18n import Messages
from aura.distributed.parallel import strategy_of, unwrap
from aura.distributed.process import DistInfo

M = Messages(
    "dist_sync",
    {
        "desync": (
            "Los pesos del modelo difieren entre procesos (Sync=FAIL): los rangos {ranks} no coinciden "
            "con el rango 0 (primer parámetro distinto: {param}). Revisa que todos los nodos usen el "
            "mismo código, datos, semilla y checkpoint, y que NODE_RANK no esté repetido.",
            "Model weights differ between ranks (Sync=FAIL): ranks {ranks} do not match rank 0 "
            "(first differing parameter: {param}). Check that every node runs the same code, data, "
            "seed and checkpoint, and that no NODE_RANK is repeated.",
        ),
    },
)


def _replicated_params(model: torch.nn.Module):
    from torch.distributed.tensor import DTensor

    for name, p in unwrap(model).named_parameters():
        if not isinstance(p, DTensor):  # FSDP2 shards are different on every rank by design
            yield name, p


_INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def tensor_checksum(t: torch.Tensor) -> torch.Tensor:
    """An int64 checksum of ``t``'s raw bytes: the sum of its elements viewed as integers of their width.

    Integer addition is associative (two's complement wraps), so the result does not depend on the order
    or the chunking in which a device reduces the tensor: equal bits always give equal checksums, which a
    float64 sum does not guarantee (two kernels may add the same floats in different orders and round
    differently). One flipped bit changes the sum.
    """
    t = t.detach()
    if t.is_complex():
        t = torch.view_as_real(t)
    if t.dtype == torch.bool:
        t = t.to(torch.uint8)
    flat = t.contiguous().reshape(-1)
    ints = flat.view(_INT_VIEW[flat.element_size()])
    return ints.sum(dtype=torch.int64)


def sync_check(model: torch.nn.Module, dist: DistInfo) -> bool:
    """True when every rank holds the same weights (the guides' ``Sync=OK``); AuraError otherwise.

    One integer checksum of the raw bytes per parameter tensor (``tensor_checksum``), all-gathered and
    compared with rank 0's: DDP keeps replicas bit-identical, so any difference is a real divergence,
    and the checksum never differs between identical replicas whatever order a device sums in.
    """
    if not dist.is_distributed or dist.world_size == 1:
        return True
    named = list(_replicated_params(model))
    with torch.no_grad():
        sums = [tensor_checksum(p) for _, p in named]
        local = (torch.stack(sums) if sums else torch.zeros(0, dtype=torch.int64)).to(dist.comm_device)
    gathered = [torch.empty_like(local) for _ in range(dist.world_size)]
    torch.distributed.all_gather(gathered, local)
    ref = gathered[0]
    bad = [r for r in range(1, dist.world_size) if not torch.equal(gathered[r], ref)]
    if bad:
        diff = (gathered[bad[0]] != ref).nonzero()
        param = named[int(diff[0])][0] if len(diff) else "?"
        raise AuraError(M("desync", ranks=", ".join(map(str, bad)), param=param))
    return True


def sync_status(model: torch.nn.Module, dist: DistInfo) -> str | None:
    """The ``Sync=`` field of a log line (collective: every rank calls it at the same step).

    None for one process; "OK" after a real ``sync_check`` of DDP replicas (AuraError if they
    diverge); "FSDP" under FSDP2, whose ranks hold different shards by design, so there is nothing
    to compare; "n/a" for a DeepSpeed engine, whose ZeRO-3 parameters are partitions this check
    cannot compare.
    """
    if not dist.is_distributed or dist.world_size == 1:
        return None
    kind = strategy_of(model)
    if kind == "fsdp":
        return "FSDP"
    if kind == "deepspeed":  # ZeRO-3 parameters are empty partitions here
        return "n/a"
    if getattr(unwrap(model), "_aura_between_syncs", False):  # --local-steps: equal only after an outer step
        return "local"
    sync_check(model, dist)  # DDP, or unwrapped replicas (--strategy none), which must agree too
    return "OK"
