"""Two gloo ranks that "see" different hardware agree on every `auto` decision; the chunked loss under DDP
equals a single-process plain-loss reference, and Sync= holds.

Run: AURA_ASSUME_HARDWARE="T4 16GB;H100 80GB" torchrun --nproc_per_node=2 tests/dist_scripts/gpu_readiness.py OUT
"""

from __future__ import annotations

import copy
import sys

import torch
from common import B, batches, shard, tiny_llama, write_json

from aura import distributed as D
from aura.models.hardware import choose_auto, default_precision, detect


def _batch(ids: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"input_ids": ids, "labels": ids}


def _reference(model, data):
    from aura.train.objectives.objective import plain_token_loss_sum

    model = copy.deepcopy(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses, grads = [], None
    for i, ids in enumerate(data):
        n = ids[:, 1:].numel()
        loss = plain_token_loss_sum(model, _batch(ids)) / n
        loss.backward()
        if i == 0:
            grads = {k: p.grad.clone() for k, p in model.named_parameters()}
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses, grads


def main(out: str) -> None:
    from aura.train.objectives.chunked_loss import head_for_chunked_loss
    from aura.train.objectives.objective import token_loss_sum

    dist = D.init_distributed(backend="gloo")
    own = detect()  # this rank's (assumed) hardware
    agreed = D.agree_hardware(own, dist)
    own_choice, choice = choose_auto(own), choose_auto(agreed)
    decision = {
        "preset": choice.preset,
        "batch": choice.batch_size,
        "ckpt": choice.gradient_checkpointing,
        "precision": default_precision(agreed),
        "memory": agreed.memory_bytes,
    }
    base = tiny_llama()
    strategy, _ = D.choose_strategy(base, dist=dist, device_memory=agreed.memory_bytes)
    decision["strategy"] = strategy
    views: list = [None] * dist.world_size
    torch.distributed.all_gather_object(
        views, {"own": [own.name, own_choice.preset, default_precision(own)], "agreed": decision}
    )

    data = batches(2)
    ref_losses, ref_grads = _reference(base, data)
    ddp = D.parallelize(copy.deepcopy(base), dist=dist, strategy="ddp")
    chunked = head_for_chunked_loss(ddp) is not None
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-2)
    losses, grad_diff = [], None
    for i, ids in enumerate(data):
        part = shard(ids, dist.rank, dist.world_size)  # (B / W, T)
        n = ids[:, 1:].numel()  # the global target count: the loop's normalisation
        loss = token_loss_sum(ddp, _batch(part)) * dist.world_size / n
        loss.backward()
        if i == 0:
            grad_diff = max((p.grad - ref_grads[k]).abs().max().item() for k, p in D.unwrap(ddp).named_parameters())
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(dist.sum_float(loss.item()) / dist.world_size)
    sync = D.sync_status(ddp, dist)
    fsdp = D.parallelize(copy.deepcopy(base), dist=dist, strategy="fsdp")
    if dist.is_main:
        write_json(
            out,
            {
                "views": views,
                "chunked_under_ddp": chunked,
                "losses": losses,
                "ref_losses": ref_losses,
                "grad_diff": grad_diff,
                "sync": sync,
                "global_batch": B,
                "bucket_view": bool(getattr(ddp, "gradient_as_bucket_view", False)),
                "chunked_under_fsdp": head_for_chunked_loss(fsdp) is not None,
            },
        )
    D.teardown(dist)


if __name__ == "__main__":
    main(sys.argv[1])
