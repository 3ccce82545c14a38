"""PowerSGD under gloo with several DDP buckets, through Aura's ``register_comm_hook``: every rank must issue
the hook's chained all-reduces (uncompressed tensors, P, Q) in the same order, or gloo pairs collectives of
different sizes and aborts the process ("collective mismatch"). Torch's own hook registered directly fails
this way within a few dozen steps here (the ranks sleep at random between steps so their timing differs).

Run: torchrun --nproc_per_node=2 tests/dist_scripts/powersgd_order.py STEPS RESULT.json
Writes RESULT.json.rankR: the steps run and a checksum of the replica's parameters (equal on every rank).
"""

from __future__ import annotations

import random
import sys
import time

import torch
import torch.distributed as td
from common import write_json
from torch.nn.parallel import DistributedDataParallel

from aura.distributed.comm_hooks import register_comm_hook


def main(steps: int, result: str) -> None:
    td.init_process_group("gloo")
    rank = td.get_rank()
    torch.manual_seed(0)
    blocks = [torch.nn.Sequential(torch.nn.Linear(128, 128), torch.nn.LayerNorm(128)) for _ in range(8)]
    # ~0.07 MB per block: many small buckets, each with compressed (weights) and uncompressed (bias, norm) parts
    ddp = DistributedDataParallel(torch.nn.Sequential(*blocks), bucket_cap_mb=0.15)
    register_comm_hook(ddp, mode="powersgd", rank=2, warmup=2, timed=True)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    jitter = random.Random(rank)
    gen = torch.Generator().manual_seed(1 + rank)
    for _ in range(steps):
        ddp(torch.randn(16, 128, generator=gen)).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        if jitter.random() < 0.3:
            time.sleep(jitter.random() * 0.01)
    checksum = float(sum(p.double().sum() for p in ddp.parameters()))
    write_json(f"{result}.rank{rank}", {"steps": steps, "checksum": checksum})
    td.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
