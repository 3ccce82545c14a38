"""The cross-rank weight check behind the ``Sync=`` field of every log line under torchrun."""

from __future__ import annotations

import torch

from aura.distributed.parallel import strategy_of, unwrap
from aura.distributed.process import DistInfo
from aura.errors import AuraError
from aura.i18n import Messages

M = Messages("dist_sync", {
    "desync": ("Los pesos del modelo difieren entre procesos (Sync=FAIL): los rangos {ranks} no coinciden "
               "con el rango 0 (primer parámetro distinto: {param}). Revisa que todos los nodos usen el "
               "mismo código, datos, semilla y checkpoint, y que NODE_RANK no esté repetido.",
               "Model weights differ between ranks (Sync=FAIL): ranks {ranks} do not match rank 0 "
               "(first differing parameter: {param}). Check that every node runs the same code, data, "
               "seed and checkpoint, and that no NODE_RANK is repeated."),
})


def _replicated_params(model: torch.nn.Module):
    from torch.distributed.tensor import DTensor

    for name, p in unwrap(model).named_parameters():
        if not isinstance(p, DTensor):  # FSDP2 shards are different on every rank by design
            yield name, p


def sync_check(model: torch.nn.Module, dist: DistInfo) -> bool:
    """True when every rank holds the same weights (the guides' ``Sync=OK``); AuraError otherwise.

    One float64 sum per parameter tensor (no copy of the weights), all-gathered and compared with
    rank 0's bit for bit: DDP keeps replicas identical, so any difference is a real divergence.
    """
    if not dist.is_distributed or dist.world_size == 1:
        return True
    named = list(_replicated_params(model))
    with torch.no_grad():
        sums = [p.sum(dtype=torch.float64) for _, p in named]
        local = (torch.stack(sums) if sums else torch.zeros(0, dtype=torch.float64)).to(dist.comm_device)
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
    sync_check(model, dist)  # DDP, or unwrapped replicas (--strategy none), which must agree too
    return "OK"
