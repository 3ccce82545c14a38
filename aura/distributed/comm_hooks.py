"""Gradient communication for slow links: DDP communication hooks (``--ddp-comm``) and their timing.

Under DDP every optimizer step all-reduces the gradients. ``register_comm_hook`` replaces DDP's
built-in all-reduce with one of PyTorch's own hooks (``torch.distributed.algorithms.ddp_comm_hooks``):

* ``none``: ``allreduce_hook``, the same fp32 average as DDP's built-in reducer;
* ``bf16``: ``bf16_compress_hook``, half the bytes (gradients cast to bf16 for the wire);
* ``powersgd``: ``powerSGD_hook`` (rank ``--powersgd-rank``, plain all-reduce for the first
  ``--powersgd-warmup`` steps, error feedback and warm start on).

Under gloo every hook (``none`` included) is wrapped to time its futures: ``CommEngine`` (the
``StepEngine`` the session wraps around ``TorchEngine``) logs the share of step time during which gradient
communication was in flight (it overlaps backward, so it is an upper bound of the time DDP waited). NCCL
completes a hook's future once the collective is queued on the GPU, so there nothing is timed (and
``none`` keeps DDP's built-in reducer); ``aura check-dist --model-preset`` computes the estimate instead.
``CommEngine`` also carries PowerSGD's state
(error feedback, the warm-started Q matrices, the iteration, the seed generator) in the checkpoint.
That state belongs to each rank: the engine gathers every rank's part on rank 0, which writes it with
the rest of the engine state, and every rank takes its own part back on resume. It is stored per
parameter name, not per DDP bucket, because DDP rebuilds its buckets after the first step of every
process, so a resumed run's buckets differ from the saved ones until then (``_PowerSGDMemory``).
PowerSGD under gloo runs its buckets one after another (``HookState.ordered``): the hook chains three
all-reduces per bucket (uncompressed tensors, then P, then Q), the later two issued from the callback of
the previous one, which gloo runs on its own worker thread. With two or more buckets, bucket 1's first
all-reduce (issued by backward on the main thread) and bucket 0's P all-reduce (issued by that thread) then
reach gloo in an order that differs between ranks, and gloo pairs collectives by their order: a size
mismatch aborts the run ("op.preamble.length <= op.nbytes ... collective mismatch"), measured here with
torch's own hook and no Aura code. So a bucket's chain must end before the next bucket's starts; it still
overlaps the backward computation that makes the next bucket ready. NCCL runs the callbacks when the
collectives are queued, on the calling thread, in one order: nothing to do there.
``--local-steps`` (DiLoCo) lives in ``aura.distributed.local_sgd``.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from aura.core import console
from aura.core.errors import AuraError
from aura.core.i18n import Messages

M = Messages(
    "dist_comm",
    {
        "hook": (
            "Comunicación de gradientes: --ddp-comm {mode} ({detail})",
            "Gradient communication: --ddp-comm {mode} ({detail})",
        ),
        "detail_none": ("all-reduce fp32, como DDP", "fp32 all-reduce, as DDP's own"),
        "detail_bf16": ("gradientes en bf16 por la red: la mitad de bytes", "gradients sent as bf16: half the bytes"),
        "detail_powersgd": (
            "rango {rank}, all-reduce completo en los primeros {warmup:paso|pasos}, con "
            "realimentación del error; bytes por paso divididos por {ratio:.1f}",
            "rank {rank}, full all-reduce for the first {warmup:step|steps}, with error "
            "feedback; bytes per step divided by {ratio:.1f}",
        ),
        "rank_too_big": (
            "--powersgd-rank {rank} es mayor que la capa {name} ({rows} x {cols}): PowerSGD no puede "
            "comprimirla con ese rango. Usa --powersgd-rank {most} o menos.",
            "--powersgd-rank {rank} is larger than the layer {name} ({rows} x {cols}): PowerSGD cannot "
            "compress it at that rank. Use --powersgd-rank {most} or less.",
        ),
        "share": (
            "Comunicación: {share:.1f} % del tiempo de paso ({comm:.2f} s de {total:.2f} s en {n:paso|pasos}; {how})",
            "Communication: {share:.1f} % of step time ({comm:.2f} s of {total:.2f} s over {n:step|steps}; {how})",
        ),
        "how_hooks": (
            "medido en los hooks de comunicación de DDP, a la vez que la retropropagación",
            "measured in the DDP hooks, overlapping backward",
        ),
        "world_changed": (
            "El checkpoint guarda el estado de PowerSGD de {saved:proceso|procesos} y hay {world}: la "
            "realimentación del error empieza de cero (la reanudación no es exacta).",
            "The checkpoint holds PowerSGD state for {saved:rank|ranks} and there are {world}: error "
            "feedback starts from zero (the resume is not exact).",
        ),
    },
)

STATE_KEY = "aura_ddp_comm"  # PowerSGD's per-rank state inside the engine state (scaler.pt)


class CommTimer:
    """Wall-clock intervals during which communication was in flight, and the step times around them."""

    def __init__(self):
        self.intervals: list[tuple[float, float]] = []
        self.step_start: float | None = None
        self.comm_s = self.step_s = 0.0
        self.steps = 0

    def add(self, start: float, end: float) -> None:
        self.intervals.append((start, end))  # list.append is atomic: gloo completes futures on its threads

    def start_step(self) -> None:
        if self.step_start is None:
            self.step_start = time.perf_counter()

    def end_step(self) -> None:
        end = time.perf_counter()
        start = self.step_start if self.step_start is not None else end
        spans, self.intervals = sorted(self.intervals), []
        busy, cur_start, cur_end = 0.0, None, None
        for a, b in spans:  # the union of the intervals: queued all-reduces overlap each other
            a, b = max(a, start), min(b, end)
            if b <= a:
                continue
            if cur_end is None or a > cur_end:
                busy += 0.0 if cur_end is None else cur_end - cur_start
                cur_start, cur_end = a, b
            else:
                cur_end = max(cur_end, b)
        busy += 0.0 if cur_end is None else cur_end - cur_start
        self.comm_s += busy
        self.step_s += end - start
        self.steps += 1
        self.step_start = None

    def report(self, how: str) -> None:
        """The share line (rank 0), then a new window."""
        if self.steps and self.step_s > 0:
            console.info(
                M(
                    "share",
                    share=100.0 * self.comm_s / self.step_s,
                    n=self.steps,
                    comm=self.comm_s,
                    total=self.step_s,
                    how=how,
                )
            )
        self.comm_s = self.step_s = 0.0
        self.steps = 0


class HookState:
    """What the timed hook carries: the inner hook's state, the timer, PowerSGD's resumable memory, and
    whether buckets run one after another (``ordered``: PowerSGD under gloo, see the module docstring)."""

    def __init__(
        self,
        mode: str,
        inner_state: Any,
        hook,
        timer: CommTimer | None,
        memory: "_PowerSGDMemory | None",
        ordered: bool = False,
    ):
        self.mode, self.inner_state, self.hook, self.timer, self.memory = mode, inner_state, hook, timer, memory
        self.ordered = ordered
        self.pending = None  # ordered: the previous bucket's future, waited for before the next one starts


def _timed_hook(state: HookState, bucket):
    if state.pending is not None:  # ordered: the previous bucket's chain of collectives has ended everywhere
        state.pending.wait()
        state.pending = None
    start = time.perf_counter()
    if state.memory is not None:
        state.memory.before(bucket)
    fut = state.hook(state.inner_state, bucket)
    if state.ordered:
        state.pending = fut
    if state.timer is None:
        return fut

    def done(f):
        state.timer.add(start, time.perf_counter())
        return f.value()

    return fut.then(done)


def check_powersgd_rank(module: torch.nn.Module, rank: int) -> None:
    """A rank larger than a weight matrix's smaller side cannot compress it: refuse, naming the layer."""
    for name, p in module.named_parameters():
        if p.requires_grad and p.ndim >= 2:
            rows, cols = p.shape[0], p.numel() // p.shape[0]
            if rank > min(rows, cols):
                most = min(
                    min(q.shape[0], q.numel() // q.shape[0])
                    for q in module.parameters()
                    if q.requires_grad and q.ndim >= 2
                )
                raise AuraError(M("rank_too_big", rank=rank, name=name, rows=rows, cols=cols, most=most))


def powersgd_ratio(module: torch.nn.Module, rank: int, min_compression_rate: float = 2.0) -> float:
    """Bytes of a plain all-reduce / bytes PowerSGD sends (its own per-tensor rule, ``_should_compress``)."""
    full = sent = 0
    for p in module.parameters():
        if not p.requires_grad:
            continue
        n = p.shape[0] if p.ndim >= 2 else p.numel()
        m = p.numel() // max(n, 1)
        r = min(n, m, rank)
        full += p.numel()
        compress = p.ndim >= 2 and (n + m) * r * min_compression_rate < n * m
        sent += (n + m) * r if compress else p.numel()
    return full / max(sent, 1)


def register_comm_hook(ddp: torch.nn.Module, *, mode: str, rank: int, warmup: int, timed: bool = True) -> HookState:
    """Install the hook for ``mode`` on the DDP module (before its first backward); ``timed``: measure it
    (gloo, whose futures complete when the data has arrived)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    module = ddp.module
    memory = None
    if mode == "powersgd":
        check_powersgd_rank(module, rank)
        inner = powerSGD_hook.PowerSGDState(
            process_group=None,
            matrix_approximation_rank=rank,
            start_powerSGD_iter=warmup,
            use_error_feedback=True,
            warm_start=True,
        )
        memory = _PowerSGDMemory(inner, module)
        hook = powerSGD_hook.powerSGD_hook
        detail = M("detail_powersgd", rank=rank, warmup=warmup, ratio=powersgd_ratio(module, rank))
    elif mode == "bf16":
        inner, hook, detail = None, default_hooks.bf16_compress_hook, M("detail_bf16")
    else:
        inner, hook, detail = None, default_hooks.allreduce_hook, M("detail_none")
    # timed means gloo, whose callbacks (PowerSGD's P and Q all-reduces) run on its worker threads
    state = HookState(mode, inner, hook, CommTimer() if timed else None, memory, ordered=timed and mode == "powersgd")
    ddp.register_comm_hook(state, _timed_hook)
    ddp._aura_comm = state
    console.info(M("hook", mode=mode, detail=detail))
    return state


class _PowerSGDMemory:
    """PowerSGD's per-bucket memory (error feedback, Q) kept resumable across DDP's bucket layouts.

    ``powerSGD_hook`` keys its tensors by bucket index; the bucket layout is DDP's, which changes after
    the first step of a process (DDP rebuilds its buckets in gradient-ready order). Before each bucket
    is reduced, ``before`` compares its parameters with the ones the stored tensors were built for: on a
    change every bucket's memory is split per parameter (``pool``) and rebuilt for the new layout.
    Checkpoints hold the per-parameter form, so they do not depend on the layout at all.
    """

    def __init__(self, state, module: torch.nn.Module):
        self.state = state
        self.names = {id(p): n for n, p in module.named_parameters()}
        self.layouts: dict[int, tuple[str, ...]] = {}
        self.shapes = {n: p.shape for n, p in module.named_parameters()}
        self.pool_error: dict[str, torch.Tensor] = {}
        self.pool_q: dict[str, torch.Tensor] = {}

    def _q_parts(self, names: tuple[str, ...]) -> list[tuple[str, int, int]]:
        """(name, Q length, P length) of the compressed parameters, in the hook's order (grouped by shape)."""
        groups: dict[tuple[int, int], list[tuple[str, int, int]]] = {}
        for name in names:
            shape = self.shapes[name]
            if len(shape) < 2:
                n, m = shape[0] if len(shape) else 1, 1
            else:
                n, m = shape[0], int(torch.Size(shape[1:]).numel())
            r = min(n, m, self.state.matrix_approximation_rank)
            if (n + m) * r * self.state.min_compression_rate < n * m:
                groups.setdefault((n, m), []).append((name, m * r, n * r))
        return [part for group in groups.values() for part in group]

    def _split(self, idx: int, names: tuple[str, ...]) -> tuple[dict, dict]:
        errors, qs = {}, {}
        if idx in self.state.error_dict:
            flat, offset = self.state.error_dict[idx], 0
            for name in names:
                n = self.shapes[name].numel()
                errors[name] = flat[offset : offset + n].clone()
                offset += n
        if idx in self.state.q_memory_dict:
            flat, offset = self.state.q_memory_dict[idx], 0
            for name, q_len, _ in self._q_parts(names):
                qs[name] = flat[offset : offset + q_len].clone()
                offset += q_len
        return errors, qs

    def _dump_all(self) -> None:
        for idx, names in self.layouts.items():
            errors, qs = self._split(idx, names)
            self.pool_error.update(errors)
            self.pool_q.update(qs)
        self.layouts.clear()
        for d in (self.state.error_dict, self.state.p_memory_dict, self.state.q_memory_dict):
            d.clear()

    def _assemble(self, idx: int, names: tuple[str, ...], like: torch.Tensor) -> None:
        if any(n in self.pool_error for n in names):
            self.state.error_dict[idx] = torch.cat(
                [
                    self.pool_error.pop(n).to(like).reshape(-1)
                    if n in self.pool_error
                    else torch.zeros(self.shapes[n].numel(), dtype=like.dtype, device=like.device)
                    for n in names
                ]
            )
        parts = self._q_parts(names)
        if parts and all(name in self.pool_q for name, _, _ in parts):
            self.state.q_memory_dict[idx] = torch.cat([self.pool_q.pop(name).to(like) for name, _, _ in parts])
            self.state.p_memory_dict[idx] = torch.empty(
                sum(p for _, _, p in parts), dtype=like.dtype, device=like.device
            )

    def before(self, bucket) -> None:
        idx = bucket.index()
        names = tuple(self.names[id(p)] for p in bucket.parameters())
        old = self.layouts.get(idx)
        if old is not None and old != names:  # DDP rebuilt its buckets
            self._dump_all()
        if idx not in self.layouts:
            self._assemble(idx, names, bucket.buffer())
            self.layouts[idx] = names

    def state_dict(self) -> dict:
        errors, qs = dict(self.pool_error), dict(self.pool_q)
        for idx, names in self.layouts.items():
            e, q = self._split(idx, names)
            errors.update(e)
            qs.update(q)
        keys, pos, has_gauss, gauss = self.state.rng.get_state()[1:]
        return {
            "iter": self.state.iter,
            "error": {k: v.cpu() for k, v in errors.items()},
            "q": {k: v.cpu() for k, v in qs.items()},
            "rng": {
                "keys": torch.from_numpy(keys.astype("int64")),
                "pos": int(pos),
                "has_gauss": int(has_gauss),
                "gauss": float(gauss),
            },
        }

    def load_state_dict(self, saved: dict) -> None:
        import numpy as np

        self.state.iter = int(saved["iter"])
        rng = saved["rng"]
        self.state.rng.set_state(
            ("MT19937", rng["keys"].numpy().astype(np.uint32), rng["pos"], rng["has_gauss"], rng["gauss"])
        )
        for d in (self.state.error_dict, self.state.p_memory_dict, self.state.q_memory_dict):
            d.clear()
        self.layouts.clear()
        self.pool_error, self.pool_q = dict(saved["error"]), dict(saved["q"])


def gather_to_main(obj, dist) -> list | None:
    """Every rank's ``obj`` on rank 0 (a list indexed by rank), None elsewhere (collective)."""
    if not dist.is_distributed or dist.world_size == 1:
        return [obj]
    out = [None] * dist.world_size if dist.is_main else None
    torch.distributed.gather_object(obj, out, dst=0)
    return out


class CommEngine:
    """A ``StepEngine`` around ``TorchEngine`` under DDP: times the step, logs the communication share,
    and checkpoints the hook's per-rank state (PowerSGD). Everything else is the inner engine's."""

    def __init__(self, base, *, hook: HookState, dist, log_interval: int):
        self.base, self.hook, self.dist, self.every = base, hook, dist, max(log_interval, 1)
        self.optimizer, self.precision = base.optimizer, base.precision

    def describe(self) -> str:
        return self.base.describe()

    def autocast(self):
        return self.base.autocast()

    def set_lr(self, lr: float) -> None:  # the first engine call of every optimizer step
        if self.hook.timer is not None:
            self.hook.timer.start_step()
        self.base.set_lr(lr)

    def backward(self, loss, *, last: bool = True) -> None:
        self.base.backward(loss, last=last)

    def finish(self, window_loss):
        outcome = self.base.finish(window_loss)
        timer = self.hook.timer
        if timer is not None:
            timer.end_step()
            if timer.steps >= self.every:
                timer.report(M("how_hooks"))
        return outcome

    def state_dict(self) -> dict:
        base = self.base.state_dict()
        if self.hook.memory is None:  # none / bf16: nothing of their own to resume
            return base
        # beside the inner engine's keys (a GradScaler reads only its own): any engine can load it
        return {**base, STATE_KEY: {"ranks": gather_to_main(self.hook.memory.state_dict(), self.dist)}}

    def load_state_dict(self, state: dict) -> None:
        state = dict(state or {})
        saved = state.pop(STATE_KEY, None)
        self.base.load_state_dict(state)
        if saved is None or self.hook.memory is None:  # another --ddp-comm before: PowerSGD starts afresh
            return
        ranks = saved["ranks"]
        if len(ranks) != self.dist.world_size:
            console.warn(M("world_changed", saved=len(ranks), world=self.dist.world_size))
            return
        self.hook.memory.load_state_dict(ranks[self.dist.rank])
