"""Muon's optimizer step on 2 gloo ranks: Newton-Schulz shared between the ranks against every rank doing all of it.

``MuonAdamW`` steps of a Llama-shaped stack of hidden matrices (``--layers`` x q, k, v, o, gate, up, down;
``--width``, GQA k/v at half width, MLP at 2.6875x as Llama's 688 for 256) plus AdamW's gains, on 2 CPU
ranks of one thread each (gloo), in the same run and on the same gradients:

* ``old``: each rank runs ``torch.optim.Muon``'s step over every matrix (what ``--optimizer muon`` did under
  DDP before ``aura.train.optim.muon_dist``; on a CPU without fast bf16 the same step with Newton-Schulz
  in fp32, as every variant here: ``muon.ns_dtype``);
* ``new``: the DDP path, each rank orthogonalises its share and all-gathers the rest (``process_group``);
* ``fsdp``: the same matrices sharded with ``fully_shard`` (DTensors): all-to-all to the owner and back.

The steps alternate old / new / fsdp (the same noise for all), after ``--warmup`` untimed rounds; the figure
is the median wall time of a step on rank 0 (every rank waits at a barrier before each step). The
gradients are the same on both ranks, as after DDP's all-reduce, and the old and new weights must stay
bit-identical (checked at the end: the comparison is of the same computation).

    python bench/bench_muon_dist.py                      # 6 layers x width 256: 42 matrices, 10 rounds
    python bench/bench_muon_dist.py --layers 4 --width 512 --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def shapes(*, layers: int, width: int) -> list[tuple[int, int]]:
    """(out, in) of each hidden matrix, layer by layer as a Llama block lists them."""
    kv, mlp = width // 2, int(width * 2.6875)
    block = [(width, width), (kv, width), (kv, width), (width, width), (mlp, width), (mlp, width), (width, mlp)]
    return block * layers


class Stack(torch.nn.Module):
    """The matrices and one gain per layer: no forward, the benchmark sets the gradients itself."""

    def __init__(self, *, layers: int, width: int):
        super().__init__()
        torch.manual_seed(0)
        self.mats = torch.nn.ParameterList(
            torch.nn.Parameter(torch.randn(s) * 0.02) for s in shapes(layers=layers, width=width)
        )
        self.gains = torch.nn.ParameterList(torch.nn.Parameter(torch.ones(width)) for _ in range(layers))


def optimizer(model: Stack, *, group):
    from aura.train.optim.muon import MuonAdamW

    return MuonAdamW(
        list(model.mats),
        [],
        list(model.gains),
        lr=1e-3,
        weight_decay=0.1,
        betas=(0.9, 0.95),
        eps=1e-8,
        process_group=group,
    )


def set_grads(model: Stack, step: int) -> None:
    """Gradients seeded by the step alone: the same on every rank and for every variant."""
    g = torch.Generator().manual_seed(1000 + step)
    for p in [*model.mats, *model.gains]:
        full = torch.randn(p.shape, generator=g)
        if hasattr(p, "device_mesh"):  # a DTensor: this rank's rows, as FSDP2's reduce-scatter leaves them
            from torch.distributed.tensor import distribute_tensor

            p.grad = distribute_tensor(full, p.device_mesh, p.placements)
        else:
            p.grad = full


def worker(rank: int, world: int, port: int, cfg: dict, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)  # 2 ranks on 2 cores: one each, the same for every variant
    dist.init_process_group("gloo", rank=rank, world_size=world)
    from torch.distributed.fsdp import fully_shard

    size = dict(layers=cfg["layers"], width=cfg["width"])
    models = {"old": Stack(**size), "new": Stack(**size), "fsdp": Stack(**size)}
    fully_shard(models["fsdp"])
    opts = {
        "old": optimizer(models["old"], group=None),
        "new": optimizer(models["new"], group=dist.group.WORLD),
        "fsdp": optimizer(models["fsdp"], group=None),
    }
    times: dict[str, list[float]] = {k: [] for k in models}
    for step in range(cfg["warmup"] + cfg["rounds"]):
        for name, model in models.items():
            set_grads(model, step)
            dist.barrier()
            t = time.perf_counter()
            opts[name].step()
            dist.barrier()  # the step ends when the slowest rank's does
            if step >= cfg["warmup"]:
                times[name].append(time.perf_counter() - t)
    same = all(torch.equal(a, b) for a, b in zip(models["old"].parameters(), models["new"].parameters()))
    fsdp = max(
        (a.full_tensor() - b).abs().max().item()
        for a, b in zip(models["fsdp"].parameters(), models["new"].parameters())
    )
    if rank == 0:
        med = {k: statistics.median(v) for k, v in times.items()}
        Path(out).write_text(
            json.dumps(
                {
                    "median_s": med,
                    "old_equals_new": same,
                    "fsdp_max_diff": fsdp,
                    "matrices": len(models["old"].mats),
                    "params": sum(p.numel() for p in models["old"].mats),
                }
            )
        )
    dist.destroy_process_group()


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args()
    from tests.distutil import free_port

    cfg = vars(args)
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "result.json")
        mp.spawn(worker, args=(2, free_port(), cfg, out), nprocs=2)
        r = json.loads(Path(out).read_text())
    med = r["median_s"]
    print(f"CPU: {cpu_name()}; torch {torch.__version__}; 2 gloo ranks x 1 thread")
    print(
        f"{r['matrices']} matrices, {r['params'] / 1e6:.2f}M Muon parameters ({args.layers} layers x width "
        f"{args.width}); median of {args.rounds} steps after {args.warmup} warm-up"
    )
    print(f"old (every rank all matrices): {med['old'] * 1e3:.1f} ms/step")
    print(f"new (DDP, shared):             {med['new'] * 1e3:.1f} ms/step   new/old = {med['new'] / med['old']:.2f}")
    print(f"fsdp (sharded, shared):        {med['fsdp'] * 1e3:.1f} ms/step   fsdp/old = {med['fsdp'] / med['old']:.2f}")
    print(f"old and new weights bit-identical: {r['old_equals_new']}; fsdp max |diff| vs new: {r['fsdp_max_diff']:.1e}")
    from figures import figure, ratio

    shape = f"{args.layers}x{args.width}"
    figure(f"muon_dist.{shape}.new_over_old", ratio(med["new"] / med["old"]))
    figure(f"muon_dist.{shape}.fsdp_over_old", ratio(med["fsdp"] / med["old"]))


# reproduce:
# reproduce: --layers 4 --width 512 --rounds 4 --warmup 1
# reproduce-quick: --layers 1 --width 64 --rounds 2 --warmup 1

if __name__ == "__main__":
    main()
