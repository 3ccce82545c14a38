"""Muon with Newton-Schulz shared between 2 ranks (aura.train.optim.muon_dist) against one process.

Run: torchrun --nproc_per_node=2 tests/dist_scripts/muon_dist.py DIR OUT.json

Every rank also trains the single-process reference itself (no collectives), so each comparison is local.
* DDP, each rank half of every batch: the reference's losses up to the all-reduce's rounding;
* DDP, both ranks the whole batch: the all-reduced gradient is the reference's exactly, so the weights must
  be bit-identical to the reference's (the sharing changes where Newton-Schulz runs, not its result);
* FSDP2, half batches: the reference's losses; saved (DCP) after 2 steps, a fresh model and optimizer
  loaded from it give exactly the per-step losses of the uninterrupted run;
and each rank ran Newton-Schulz on its share only, with the same weights on both ranks. A layout the
all-to-all does not cover (columns sharded, Shard(1)) takes the whole-matrix path: the same step as one process.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import torch
from common import batches, loss_of, shard, tiny_llama, write_json

from aura import distributed as D
from aura.distributed.sharded import load_sharded, save_sharded
from aura.train.optim import muon_dist
from aura.train.optim.step_engine import build_optimizer

STEPS, SAVE_AT = 4, 2
ARGS = SimpleNamespace(
    optimizer="muon", learning_rate=1e-2, weight_decay=0.1, adam_beta1=0.9, adam_beta2=0.95, adam_eps=1e-8
)
CALLS: list[tuple[int, int]] = []  # the shapes this rank orthogonalised
_ns = muon_dist.newton_schulz


def counting_ns(grad, *args, **kwargs):
    CALLS.append(tuple(grad.shape))
    return _ns(grad, *args, **kwargs)


def steps(model, opt, dist, data, *, split: bool = True) -> list[float]:
    losses = []
    for batch in data:
        loss = loss_of(model, shard(batch, dist.rank, dist.world_size) if split else batch)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(dist.mean_float(loss.item()) if split else loss.item())
    return losses


def weights(model) -> dict[str, torch.Tensor]:
    """Full tensors by the user's names (FSDP2 gathers its shards: every rank must call it)."""
    out = {}
    for n, p in D.unwrap(model).named_parameters():
        out[n] = (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().clone()
    return out


def same_on_all_ranks(w: dict[str, torch.Tensor], dist) -> bool:
    flat = torch.cat([w[k].flatten() for k in sorted(w)])
    theirs = flat.clone()
    torch.distributed.broadcast(theirs, src=0)
    return bool(torch.equal(flat, theirs))


def max_diff(a: dict, b: dict) -> float:
    return max((a[k] - b[k]).abs().max().item() for k in a)


def other_layout(dist) -> bool:
    """Two matrices (one with an odd column count) sharded by columns: bit-identical to the local step."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    from aura.train.optim.muon import MuonAdamW

    mesh = init_device_mesh("cpu", (dist.world_size,))
    g = torch.Generator().manual_seed(3)
    full = [torch.randn(s, generator=g) for s in ((24, 40), (40, 37))]
    grads = [torch.randn(t.shape, generator=g) for t in full]
    results = []
    for sharded in (False, True):
        ps = [
            torch.nn.Parameter(distribute_tensor(t.clone(), mesh, [Shard(1)]) if sharded else t.clone()) for t in full
        ]
        opt = MuonAdamW(ps, [], [], lr=1e-2, weight_decay=0.1, betas=(0.9, 0.95), eps=1e-8)
        for _ in range(2):
            for p, grad in zip(ps, grads):
                p.grad = distribute_tensor(grad, mesh, [Shard(1)]) if sharded else grad.clone()
            opt.step()
        results.append([p.full_tensor() if sharded else p.detach() for p in ps])
    return all(torch.equal(a, b) for a, b in zip(*results))


def main(root: str, out: str) -> None:
    dist = D.init_distributed(backend="gloo")
    data = batches(STEPS)
    ref = tiny_llama(seed=0)
    ref_opt = build_optimizer(ref, ARGS, dist.device)
    result = {
        "steps": STEPS,
        "save_at": SAVE_AT,
        "ref": steps(ref, ref_opt, dist, data, split=False),
        "ref_shared": ref_opt.shared,
    }
    ref_w = weights(ref)
    muon_dist.newton_schulz = counting_ns  # from here on: only the shared paths run it
    for name, split in (("ddp", True), ("ddp_whole", False)):
        model = D.parallelize(tiny_llama(seed=0), dist=dist, strategy="ddp")
        opt = build_optimizer(model, ARGS, dist.device)
        CALLS.clear()
        result[name] = steps(model, opt, dist, data, split=split)
        w = weights(model)
        result[f"{name}_calls"] = len(CALLS)
        result[f"{name}_max_diff"] = max_diff(w, ref_w)
        result[f"{name}_bitwise"] = all(torch.equal(w[k], ref_w[k]) for k in w)
        result[f"{name}_same_on_ranks"] = same_on_all_ranks(w, dist)
    result["muon_matrices"] = len(ref_opt.param_groups[0]["params"])

    model = D.parallelize(tiny_llama(seed=0), dist=dist, strategy="fsdp")
    opt = build_optimizer(model, ARGS, dist.device)
    CALLS.clear()
    result["fsdp_before"] = steps(model, opt, dist, data[:SAVE_AT])
    result["fsdp_calls"] = len(CALLS)
    buf = next(iter(opt.state.values()))["momentum_buffer"]
    result["fsdp_momentum"] = type(buf).__name__
    save_sharded(Path(root) / "ckpt", model=model, optimizer=opt, dist=dist)
    result["fsdp_after"] = steps(model, opt, dist, data[SAVE_AT:])
    w = weights(model)
    result["fsdp_max_diff"] = max_diff(w, ref_w)
    result["fsdp_same_on_ranks"] = same_on_all_ranks(w, dist)
    fresh = D.parallelize(tiny_llama(seed=7), dist=dist, strategy="fsdp")
    fresh_opt = build_optimizer(fresh, ARGS, dist.device)
    load_sharded(Path(root) / "ckpt", model=fresh, optimizer=fresh_opt, dist=dist)
    result["fsdp_resumed"] = steps(fresh, fresh_opt, dist, data[SAVE_AT:])
    result["fsdp_resumed_bitwise"] = all(torch.equal(a, b) for a, b in zip(weights(fresh).values(), w.values()))
    result["other_layout_bitwise"] = other_layout(dist)
    write_json(f"{out}.{dist.rank}", result)
    D.teardown(dist)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
