"""Host-known numbers of one optimizer step, summed over ranks in one small collective that never makes
the host wait for the device (``StepTotals``).

The loop (``aura.train.loop.optimizer_step``) needs, for every optimizer step, the window's units (target
tokens) and input tokens on all ranks (the loss is divided by the global count before backward) and
whether any rank was asked to stop (every rank must stop at the same step). All of them are known on the
host before the step starts (the batches are CPU tensors, the stop is a signal flag), so they travel
together in one all-reduce at the step's start:

* one process: nothing to reduce.
* gloo: a CPU tensor reduced at once; the device (if any) is not involved, so nothing drains it.
* NCCL: the values are copied to the device from pinned memory, reduced there and copied back to pinned
  memory, all queued on the current stream: the host does not wait. The loss scale stays on the device
  (``scale``), and the host reads the totals (``values``) after the step's one host sync
  (``StepEngine.finish``), by which time the copy back is done: an event waits for that copy alone,
  never for the work queued after it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import torch

if TYPE_CHECKING:
    from aura.distributed.process import DistInfo


class StepTotals:
    """``values`` summed over ranks; see the module docstring for when each side waits."""

    def __init__(self, values: Sequence[float], *, dist: DistInfo):
        host = torch.tensor(list(values), dtype=torch.float64)
        self._ready = None  # a CUDA event: the reduced values have reached ``self._host``
        self._device = None  # the reduced values on the device (NCCL)
        if dist.is_distributed and dist.comm_device.type != "cpu":
            self._device = dist.all_reduce(host.pin_memory().to(dist.comm_device, non_blocking=True), "sum")
            self._host = torch.empty(host.shape, dtype=host.dtype, pin_memory=True)
            self._host.copy_(self._device, non_blocking=True)
            self._ready = torch.cuda.Event()
            self._ready.record()
        else:
            self._host = dist.all_reduce(host, "sum")  # a no-op in one process

    def scale(self, world_size: int, index: int = 0) -> float | torch.Tensor:
        """``world_size / max(total, 1)`` of the value at ``index``: DDP and FSDP average gradients over
        ranks, and this undoes it. A float when the totals are on the host; under NCCL a float32 scalar on
        the device, not read back (the same value: float64 division rounded to float32, which is what
        multiplying a float32 loss by a Python float does)."""
        if self._device is None:
            return world_size / max(float(self._host[index]), 1.0)
        return (world_size / self._device[index].clamp(min=1.0)).float()

    def values(self) -> list[float]:
        """The totals on the host; under NCCL it waits for their copy back, queued before the step's work."""
        if self._ready is not None:
            self._ready.synchronize()
        return self._host.tolist()
