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


def whole_weights_check(model, dist) -> dict:
    """``D.whole_weights`` on an FSDP2 model: inside, every parameter whole and a different number of forwards
    per rank (rank r runs r + 2, of its own lengths) with no collective, giving the logits of a plain copy built
    from the gathered weights; a nested block gathers nothing more; after it, the same parameters sharded after
    a forward as before (the reshard-after-forward settings restored)."""
    from torch.distributed.tensor import DTensor

    def sharded_after_forward() -> list[bool]:
        with torch.no_grad():
            model(input_ids=torch.zeros((1, 4), dtype=torch.long))
        return [isinstance(p, DTensor) for p in model.parameters()]

    before = sharded_after_forward()
    plain = tiny_llama()
    plain.load_state_dict({k: v.full_tensor() if isinstance(v, DTensor) else v for k, v in model.state_dict().items()})
    worst = 0.0
    with D.whole_weights(model), torch.no_grad():
        whole = not any(isinstance(p, DTensor) for p in model.parameters())
        with D.whole_weights(model):
            pass  # nested: must leave the weights gathered
        nested_kept = not any(isinstance(p, DTensor) for p in model.parameters())
        for i in range(dist.rank + 2):
            ids = torch.arange(3 + i + 2 * dist.rank)[None] % 256  # (1, T): lengths differ by rank
            worst = max(worst, (model(input_ids=ids).logits - plain(input_ids=ids).logits).abs().max().item())
    return {
        "whole_inside": whole,
        "nested_kept": nested_kept,
        "logit_diff": dist.mean_float(worst),
        "sharded_before": sum(before),
        "same_after": sharded_after_forward() == before,
    }


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
    whole = whole_weights_check(fsdp, dist)

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
                "whole_weights": whole,
                "ddp_is_ddp": D.strategy_of(ddp) == "ddp",
                "auto_big_memory": [auto, reason],
                "auto_small_memory": [auto_small, reason_small],
            },
        )
    D.teardown(dist)


if __name__ == "__main__":
    main(sys.argv[1])
