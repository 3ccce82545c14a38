"""fp16 under torchrun: every rank takes the same GradScaler decision (issue 38, item 3), through the loop's
``optimizer_step`` and ``TorchEngine`` on CPU (gloo; torch >= 2.3 has fp16 autocast and GradScaler on CPU).

Three steps per case; before the second, an inf goes into one gradient on rank 1 only:

* ``ddp``: DDP's gradients are plain tensors, equal on every rank after the all-reduce; the inf makes
  them differ, as an FSDP2 shard of its own does. Nothing but the engine's agreement makes rank 0 skip too.
* ``fsdp``: FSDP2, the inf in rank 1's local shard (torch's DTensor dispatch also reduces found-inf).

Run: torchrun --nproc_per_node=2 tests/dist_scripts/fp16_agree.py OUT.json
"""

from __future__ import annotations

import copy
import sys

import torch
from common import batches, shard, tiny_llama, write_json

from aura import distributed as D
from aura.train.args import TrainArgs
from aura.train.loop import optimizer_step
from aura.train.optim.step_engine import TorchEngine

STEPS, POISONED = 3, 1  # the second step gets the inf


class Poison:
    """The engine, with an inf written into rank 1's first gradient before ``finish`` when told."""

    def __init__(self, engine: TorchEngine, *, rank: int):
        self.engine, self.rank, self.armed = engine, rank, False

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def finish(self, window_loss):
        if self.armed and self.rank == 1:
            grad = next(p.grad for p in self.engine.params if p.grad is not None)
            local = grad.to_local() if hasattr(grad, "to_local") else grad  # FSDP2: this rank's shard
            local.view(-1)[0] = float("inf")
        return self.engine.finish(window_loss)


def full_params(model) -> list[torch.Tensor]:
    return [
        (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().clone() for p in D.unwrap(model).parameters()
    ]


def run(model, dist, data) -> dict:
    args = TrainArgs(learning_rate=1e-2, max_grad_norm=1.0)
    engine = Poison(TorchEngine.build(model, args=args, dist=dist, precision="fp16"), rank=dist.rank)
    outcomes, scales, changed = [], [], []
    for i, ids in enumerate(data):
        ids = shard(ids, dist.rank, dist.world_size)  # (B / W, T)
        before = full_params(model)
        engine.armed = i == POISONED
        outcome, *_ = optimizer_step(model, engine, [{"input_ids": ids, "labels": ids}], lr=1e-2, dist=dist)
        after = full_params(model)
        outcomes.append([outcome.applied, outcome.grad_norm, outcome.loss])
        scales.append(engine.scaler.get_scale())
        changed.append(any(not torch.equal(a, b) for a, b in zip(before, after)))
    return {
        "outcomes": outcomes,
        "scales": scales,
        "changed": changed,
        "digest": [float(p.double().sum()) for p in full_params(model)],
    }


def main(out: str) -> None:
    dist = D.init_distributed(backend="gloo")
    base, data = tiny_llama(), batches(STEPS)
    result = {
        "ddp": run(D.parallelize(copy.deepcopy(base), dist=dist, strategy="ddp"), dist, data),
        "fsdp": run(D.parallelize(copy.deepcopy(base), dist=dist, strategy="fsdp"), dist, data),
    }
    ranks = [None] * dist.world_size
    torch.distributed.all_gather_object(ranks, result)
    if dist.is_main:
        write_json(out, {"world": dist.world_size, "ranks": ranks})
    D.teardown(dist)


if __name__ == "__main__":
    main(sys.argv[1])
