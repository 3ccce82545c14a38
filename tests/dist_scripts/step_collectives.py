"""The collectives of each optimizer step of a real `aura pretrain` run under torchrun (issue 38, item 7),
and a stop signal on one rank stopping every rank at the same step.

Counts every ``torch.distributed`` collective called from Python between the starts of consecutive optimizer
steps, by the module that called it (DDP's gradient buckets go through its comm hook, in torch's own
``default_hooks``). ``signal`` mode: rank 1 sends itself SIGTERM just after its step 2.

Run: torchrun --nproc_per_node=2 tests/dist_scripts/step_collectives.py count|signal DATA OUT_DIR RESULT.json
     [--precision fp32] [--strategy ddp]
"""

from __future__ import annotations

import functools
import os
import signal
import sys
from collections import Counter
from pathlib import Path

import torch.distributed as td
from common import write_json

from aura.train import loop
from aura.train.pretrain import PretrainConfig, pretrain

NAMES = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "reduce_scatter_tensor",
    "broadcast",
    "broadcast_object_list",
    "gather_object",
    "barrier",
    "all_to_all_single",
)
TINY = dict(
    model_preset="manual",
    arch="llama",
    embed_size=32,
    num_layers=1,
    num_heads=2,
    num_kv_heads=2,
    seq_length=32,
    intermediate_size=64,
    batch_size=2,
    sample_tokens=0,
    learning_rate=3e-3,
    backend="gloo",
    save_steps=0,
    keep_last=0,
    log_interval=1000,
    eval_interval=0,
)

calls: Counter = Counter()
marks: list[Counter] = []


def counted(name: str, fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        caller = sys._getframe(1).f_globals.get("__name__", "?")
        calls[f"{name} from {caller}"] += 1
        return fn(*args, **kwargs)

    return wrapper


def main(mode: str, data: str, out: str, result: str, *extra: str) -> None:
    opts = dict(zip(extra[::2], extra[1::2]))
    for name in NAMES:
        if hasattr(td, name):
            setattr(td, name, counted(name, getattr(td, name)))
    real_step = loop.optimizer_step

    def step(*args, **kwargs):
        marks.append(Counter(calls))
        outcome = real_step(*args, **kwargs)
        if mode == "signal" and len(marks) == 2 and os.environ["RANK"] == "1":
            os.kill(os.getpid(), signal.SIGTERM)  # during the step's work, after its collective
        return outcome

    loop.optimizer_step = step
    cfg = PretrainConfig(
        data=[data],
        output_dir=Path(out),
        max_steps=6 if mode == "count" else 50,
        precision=opts.get("--precision", "fp32"),
        strategy=opts.get("--strategy", "ddp"),
        **TINY,
    )
    code = pretrain(cfg)
    per_step = [dict(b - a) for a, b in zip(marks, marks[1:])]  # step k's start to step k+1's start
    write_json(f"{result}.rank{os.environ['RANK']}", {"code": code, "steps": len(marks), "per_step": per_step})


if __name__ == "__main__":
    main(*sys.argv[1:])
