"""``--local-steps H``: DiLoCo-style local SGD for the slowest links (no per-step all-reduce).

Each rank trains its own replica (the model is not DDP-wrapped) with the inner optimizer (AdamW,
``TorchEngine``) for H optimizer steps. Then, in the outer step, every rank computes its
pseudo-gradient (the last synchronised weights minus its current ones), the pseudo-gradients are
averaged with one all-reduce, and an outer SGD with Nesterov momentum (DiLoCo's defaults: lr 0.7,
momentum 0.9; ``--outer-lr``, ``--outer-momentum``) applies the average to the synchronised weights,
which are copied into every replica. This follows torchft's ``DiLoCo`` (restore the global weights,
set the averaged pseudo-gradient as their gradient, step the outer optimizer) without its fault-tolerance
manager; PyTorch's ``PeriodicModelAverager`` is the special case outer lr 1, momentum 0 (plain
averaging). The last step of the run is always an outer step, so ``final/`` holds the synchronised model.

After every outer step the replicas are compared (``sync_status``: ``Sync=OK``, or an error naming the
ranks); log lines between two outer steps show ``Sync=local`` (the replicas differ by design).

Checkpointed (inside the engine state, ``scaler.pt``): the synchronised weights, the outer optimizer's
momentum, the step counters, and each rank's own replica and inner AdamW state (gathered on rank 0:
replicas and optimizer moments differ between ranks), so a resume is exact at any step.
"""

from __future__ import annotations

import time

import torch

from aura.core import console
from aura.core.i18n import Messages
from aura.distributed.comm_hooks import CommTimer, gather_to_main
from aura.distributed.parallel import unwrap

M = Messages(
    "dist_local_sgd",
    {
        "start": (
            "SGD local (DiLoCo): {h:paso local|pasos locales} por sincronización; optimizador externo SGD "
            "Nesterov (lr {lr:g}, momento {mom:g}); sin all-reduce por paso.",
            "Local SGD (DiLoCo): {h:local step|local steps} per synchronisation; outer optimizer SGD Nesterov "
            "(lr {lr:g}, momentum {mom:g}); no per-step all-reduce.",
        ),
        "how": ("all-reduce de los pseudogradientes", "pseudo-gradient all-reduce"),
        "world_changed": (
            "El checkpoint guarda las réplicas de {saved:proceso|procesos} y hay {world}: cada réplica "
            "parte de los últimos pesos sincronizados (la reanudación no es exacta).",
            "The checkpoint holds the replicas of {saved:rank|ranks} and there are {world}: every "
            "replica starts from the last synchronised weights (the resume is not exact).",
        ),
    },
)

STATE_KEY = "aura_local_sgd"
_BUCKET_BYTES = 64 * 2**20  # pseudo-gradients all-reduced in flat buckets of at most this size


class LocalSGDEngine:
    """A ``StepEngine`` around the inner one: ``finish`` = inner step, then every H steps the outer step."""

    def __init__(
        self, base, *, model, dist, local_steps: int, outer_lr: float, outer_momentum: float, total_steps: int
    ):
        self.base, self.model, self.dist = base, model, dist
        self.optimizer, self.precision = base.optimizer, base.precision
        self.h, self.total = local_steps, total_steps
        self.params = [p for p in unwrap(model).parameters() if p.requires_grad]
        with torch.no_grad():
            for p in self.params:  # as DDP does when it wraps a model: every replica starts from rank 0's
                t = p.detach().to(dist.comm_device)
                torch.distributed.broadcast(t, src=0)
                p.copy_(t)
            self.synced = [p.detach().float().clone() for p in self.params]  # the global weights (fp32)
        self.outer = torch.optim.SGD(self.synced, lr=outer_lr, momentum=outer_momentum, nesterov=True)
        self.step = self.inner = 0
        self.timer = CommTimer()
        self._mark(between=False)
        console.info(M("start", h=local_steps, lr=outer_lr, mom=outer_momentum))

    def replan(self, *, total_steps: int) -> None:
        """The run's last step moved (a WSD cooldown started by --time-budget): it is still an outer step."""
        self.total = total_steps

    def _mark(self, *, between: bool) -> None:
        unwrap(self.model)._aura_between_syncs = between  # read by sync_status

    def describe(self) -> str:
        return self.base.describe()

    def autocast(self):
        return self.base.autocast()

    def set_lr(self, lr: float) -> None:
        self.timer.start_step()
        self.base.set_lr(lr)

    def backward(self, loss, *, last: bool = True) -> None:
        self.base.backward(loss, last=last)

    def finish(self, window_loss):
        outcome = self.base.finish(window_loss)
        self.step += 1
        self.inner += 1
        if self.inner >= self.h or self.step >= self.total:
            self._outer_step()
            self.timer.end_step()
            self.timer.report(M("how"))
        else:
            self._mark(between=True)
            self.timer.end_step()
        return outcome

    @torch.no_grad()
    def _outer_step(self) -> None:
        from aura.distributed.sync import sync_status

        start = time.perf_counter()
        grads = [s - p.detach().float() for s, p in zip(self.synced, self.params)]  # pseudo-gradients
        self._average(grads)
        self.timer.add(start, time.perf_counter())
        for s, g in zip(self.synced, grads):
            s.grad = g
        self.outer.step()
        self.outer.zero_grad(set_to_none=True)
        for p, s in zip(self.params, self.synced):
            p.copy_(s)
        self.inner = 0
        self._mark(between=False)
        sync_status(self.model, self.dist)  # the replicas must now be equal bit for bit (AuraError if not)

    def _average(self, tensors: list[torch.Tensor]) -> None:
        """All-reduce (mean) in flat fp32 buckets: few messages, as DDP's buckets."""
        bucket: list[torch.Tensor] = []
        size = 0
        for t in tensors + [None]:
            if t is not None:
                bucket.append(t)
                size += t.numel() * 4
            if bucket and (t is None or size >= _BUCKET_BYTES):
                flat = torch.cat([b.reshape(-1) for b in bucket]).to(self.dist.comm_device)
                torch.distributed.all_reduce(flat)
                flat /= self.dist.world_size
                offset = 0
                for b in bucket:
                    b.copy_(flat[offset : offset + b.numel()].view_as(b))
                    offset += b.numel()
                bucket, size = [], 0

    def state_dict(self) -> dict:
        mine = {
            "params": None if self.inner == 0 else [p.detach().cpu().clone() for p in self.params],
            "optimizer": None if self.dist.is_main else self.optimizer.state_dict(),
        }  # rank 0's: optimizer.pt
        ranks = gather_to_main(mine, self.dist)
        return {
            **self.base.state_dict(),
            STATE_KEY: {
                "step": self.step,
                "inner": self.inner,
                "synced": [s.cpu() for s in self.synced],
                "outer": self.outer.state_dict(),
                "ranks": ranks,
            },
        }

    @torch.no_grad()
    def load_state_dict(self, state: dict) -> None:
        state = dict(state or {})
        saved = state.pop(STATE_KEY, None)
        self.base.load_state_dict(state)
        if saved is None:  # a checkpoint without local steps: its weights are the synchronised ones
            return
        for s, t in zip(self.synced, saved["synced"]):
            s.copy_(t)
        self.outer.load_state_dict(saved["outer"])
        self.step = int(saved["step"])
        ranks = saved["ranks"]
        if len(ranks) != self.dist.world_size:
            console.warn(M("world_changed", saved=len(ranks), world=self.dist.world_size))
            for p, s in zip(self.params, self.synced):
                p.copy_(s)
            self.inner = 0
            self._mark(between=False)
            return
        self.inner = int(saved["inner"])
        mine = ranks[self.dist.rank]
        if mine["params"] is not None:
            for p, t in zip(self.params, mine["params"]):
                p.copy_(t)
        if mine["optimizer"] is not None:
            self.optimizer.load_state_dict(mine["optimizer"])
        self._mark(between=self.inner != 0)
