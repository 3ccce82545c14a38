"""DDP and FSDP2 through aura.distributed.parallelize against a single-process full-batch reference.

Run: torchrun --nproc_per_node=2 tests/dist_scripts/parallel_equiv.py OUT.json
"""

from __future__ import annotations

import copy
import sys

import torch
from common import B, batches, loss_of, reference_run, shard, tiny_llama, write_json

from aura import distributed as D
from aura.core.errors import AuraError


def train(model, dist, data, *, accumulate: bool = False):
    """Loss (averaged over ranks) per step and first-step gradients (full tensors, by name)."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses, grads = [], None
    for i, batch in enumerate(data):
        ids = shard(batch, dist.rank, dist.world_size)  # (B / W, T)
        if accumulate:  # two micro-batches; the first skips the all-reduce
            half = ids.shape[0] // 2
            with D.no_sync(model):
                (loss_of(model, ids[:half]) / 2).backward()
            (loss_of(model, ids[half:]) / 2).backward()
            with torch.no_grad():
                loss = loss_of(model, ids)
        else:
            loss = loss_of(model, ids)
            loss.backward()
        if i == 0:
            grads = {}
            for n, p in D.unwrap(model).named_parameters():
                g = p.grad
                grads[n] = g.full_tensor() if hasattr(g, "full_tensor") else g.detach().clone()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(dist.mean_float(loss.item()))
    return losses, grads


def max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys(), (sorted(a)[:3], sorted(b)[:3])
    return max((a[k] - b[k]).abs().max().item() for k in a)


def main(out: str) -> None:
    dist = D.init_distributed(backend="gloo")
    base = tiny_llama()
    data = batches(3)
    ref_losses, ref_grads = reference_run(base, data)

    ddp = D.parallelize(copy.deepcopy(base), dist=dist, strategy="ddp")
    ddp_losses, ddp_grads = train(ddp, dist, data)
    sync_ok = D.sync_check(ddp, dist)

    acc = D.parallelize(copy.deepcopy(base), dist=dist, strategy="ddp")
    acc_losses, acc_grads = train(acc, dist, data, accumulate=True)

    fsdp = D.parallelize(copy.deepcopy(base), dist=dist, strategy="fsdp")
    fsdp_losses, fsdp_grads = train(fsdp, dist, data)

    with torch.no_grad():  # break one replica on purpose
        if dist.rank == 1:
            D.unwrap(ddp).model.layers[1].mlp.up_proj.weight[0, 0] += 1e-3
    try:
        D.sync_check(ddp, dist)
        desync_error = None
    except AuraError as err:
        desync_error = str(err)

    auto, reason = D.choose_strategy(base, dist=dist, device_memory=1 << 40)
    auto_small, reason_small = D.choose_strategy(base, dist=dist, device_memory=1 << 20)
    if dist.is_main:
        write_json(
            out,
            {
                "world": dist.world_size,
                "global_batch": B,
                "ref_losses": ref_losses,
                "ddp_losses": ddp_losses,
                "acc_losses": acc_losses,
                "fsdp_losses": fsdp_losses,
                "ddp_grad_diff": max_diff(ddp_grads, ref_grads),
                "acc_grad_diff": max_diff(acc_grads, ref_grads),
                "fsdp_grad_diff": max_diff(fsdp_grads, ref_grads),
                "sync_ok": sync_ok,
                "desync_error": desync_error,
                "fsdp_is_fsdp": D.strategy_of(fsdp) == "fsdp",
                "ddp_is_ddp": D.strategy_of(ddp) == "ddp",
                "auto_big_memory": [auto, reason],
                "auto_small_memory": [auto_small, reason_small],
            },
        )
    D.teardown(dist)


if __name__ == "__main__":
    main(sys.argv[1])
