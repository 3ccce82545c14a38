"""Everything distributed on the library side, applied from outside the model code.

* ``process``: torchrun environment -> ``DistInfo``; process-group set-up and tear-down.
* ``parallel``: strategy choice and ``parallelize`` (activation checkpointing -> compile -> FSDP2/DDP),
  ``strategy_of``, ``unwrap``, ``no_sync``.
* ``weights``: ``place_frozen`` (a frozen reference or teacher, sharded where the model is) and ``whole_weights``
  (an FSDP2 model's weights gathered for sampling).
* ``sync``: the cross-rank weight check (``Sync=`` in the log).
* ``comm``: DDP communication hooks for slow links (``--ddp-comm none|bf16|powersgd``), their timing
  (the communication share in the log) and PowerSGD's checkpointed per-rank state.
* ``local_sgd``: ``--local-steps H``, DiLoCo-style local SGD (no DDP; an outer Nesterov step every H steps).
* ``engines``: ``wrap_engine``, the step engine of a slow-link mode (``comm`` or ``local_sgd``).
* ``sharded``: DCP checkpoints of sharded models.
* ``totals``: ``StepTotals``, the host-known numbers of an optimizer step (the window's token counts, the
  stop flag) summed over ranks in one collective that never makes the host wait for the device.
* ``launcher``: the launch record (how this process was started and how to resume it the same way) and
  ``ParentWatch`` (a worker notices that its launcher died).

DeepSpeed, which replaces the step engine rather than wrapping the model, lives with the other step
engines in ``aura.train.optim.deepspeed``.

The public names below are re-exported lazily: importing the package does not import torch; the
first use of a name does.
The commands around it (``aura launch``, ``aura check-dist``) live beside the other commands
(``aura.cluster.launch``, ``aura.cluster.check``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

_EXPORTS = {
    "DistInfo": "process",
    "init_distributed": "process",
    "teardown": "process",
    "main_process_first": "process",
    "pick_device": "process",
    "under_torchrun": "process",
    "agree_hardware": "process",
    "STRATEGIES": "parallel",
    "choose_strategy": "parallel",
    "find_blocks": "parallel",
    "is_deepspeed_engine": "parallel",
    "is_quantized": "parallel",
    "no_sync": "parallel",
    "parallelize": "parallel",
    "place_frozen": "weights",
    "strategy_of": "parallel",
    "training_state_bytes": "parallel",
    "unwrap": "parallel",
    "whole_weights": "weights",
    "sync_check": "sync",
    "sync_status": "sync",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from aura.distributed.parallel import (
        STRATEGIES as STRATEGIES,
        choose_strategy as choose_strategy,
        find_blocks as find_blocks,
        is_deepspeed_engine as is_deepspeed_engine,
        is_quantized as is_quantized,
        no_sync as no_sync,
        parallelize as parallelize,
        strategy_of as strategy_of,
        training_state_bytes as training_state_bytes,
        unwrap as unwrap,
    )
    from aura.distributed.process import (
        DistInfo as DistInfo,
        agree_hardware as agree_hardware,
        init_distributed as init_distributed,
        main_process_first as main_process_first,
        pick_device as pick_device,
        teardown as teardown,
        under_torchrun as under_torchrun,
    )
    from aura.distributed.sync import sync_check as sync_check, sync_status as sync_status
    from aura.distributed.weights import place_frozen as place_frozen, whole_weights as whole_weights


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
