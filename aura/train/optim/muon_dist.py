"""Muon's Newton-Schulz shared between ranks: each orthogonalises its share of the matrices (``MuonAdamW``).

``muon_step`` is ``torch.optim.Muon``'s step (torch's ``_single_tensor_muon``: Nesterov momentum,
Newton-Schulz, decoupled weight decay, Moonlight's learning-rate adjustment, all through torch's own
functions) except where each matrix is orthogonalised: on one rank, then shared.

Who does what: the matrices are grouped by shape, the most expensive shapes first, and dealt out in groups
of ``world`` same-shape matrices, one per rank (one collective per group moves them all); a group short of
``world`` goes to the ranks with the least Newton-Schulz work so far. The plan depends only on the shapes in
the parameters' order, the same on every rank, so every rank computes it without talking. The results travel
in Newton-Schulz's dtype (``newton_schulz``: bf16 on CUDA and on CPUs with fast bf16, fp32 on other CPUs),
what it returns, so sending anything wider would add bytes and change nothing, and anything narrower would
change the result.

* Replicated parameters (DDP, ``process_group``): every rank has the same gradient and momentum; it
  orthogonalises its slot of each group and one ``all_gather_into_tensor`` per group brings the others.
  Every rank then applies the same bytes, those one process would have applied.
* Sharded parameters (FSDP2 DTensors, ``Shard(0)`` on a 1-D mesh): momentum and update stay sharded; one
  ``all_to_all_single`` per group sends each rank's rows of every matrix to the rank that orthogonalises
  it (casting to Newton-Schulz's dtype before sending is the cast it does first: the same result), a second one
  sends every rank its rows of the results. Any other layout (a 2-D mesh, another placement) gathers the
  whole matrix on every rank and orthogonalises it there: correct, but without the sharing.

The collectives are asynchronous: a group's exchange travels while the next group is orthogonalised.
"""

from __future__ import annotations

import functools
import math
from typing import Callable, Iterator

import torch
import torch.distributed as dist
from torch.optim._muon import _adjust_lr, _zeropower_via_newtonschulz
from torch.optim.optimizer import _to_scalar


def newton_schulz(
    grad: torch.Tensor,
    ns_coefficients: tuple[float, float, float],
    ns_steps: int,
    eps: float,
    *,
    dtype: torch.dtype = torch.bfloat16,
) -> torch.Tensor:
    """``torch.optim.Muon``'s Newton-Schulz orthogonalisation of ``grad``, computed and returned in ``dtype``.

    bf16 is torch's own function (``_zeropower_via_newtonschulz``, which hard-codes it). Any other dtype runs
    the same lines (same coefficients, steps, normalisation and transposition) in that dtype: on a CPU
    without avx512_bf16 or AMX a bf16 matmul is emulated, several times slower than an fp32 one, so there
    Newton-Schulz runs in fp32 (``aura.train.optim.muon.ns_dtype`` decides). The bf16 result of these lines
    is torch's bit for bit (tests/test_muon.py), so a change in torch's algorithm fails that test."""
    if dtype == torch.bfloat16 or ns_steps >= 100 or grad.ndim != 2 or len(ns_coefficients) != 3:
        return _zeropower_via_newtonschulz(grad, ns_coefficients, ns_steps, eps)  # torch's; its ValueErrors
    return _newton_schulz_in(grad, ns_coefficients, ns_steps, eps, dtype)


def _newton_schulz_in(
    grad: torch.Tensor, ns_coefficients: tuple[float, float, float], ns_steps: int, eps: float, dtype: torch.dtype
) -> torch.Tensor:
    """torch 2.13's ``_zeropower_via_newtonschulz`` line for line, with ``dtype`` for its ``bfloat16``."""
    a, b, c = ns_coefficients
    ortho_grad = grad.to(dtype, copy=True)  # torch's .bfloat16() copies when it converts; so must this
    if grad.size(0) > grad.size(1):
        ortho_grad = ortho_grad.T
    ortho_grad.div_(ortho_grad.norm().clamp(min=eps))
    for _ in range(ns_steps):
        gram_matrix = ortho_grad @ ortho_grad.T
        gram_update = torch.addmm(gram_matrix, gram_matrix, gram_matrix, beta=b, alpha=c)
        ortho_grad = torch.addmm(ortho_grad, gram_update, ortho_grad, beta=a)
    if grad.size(0) > grad.size(1):
        ortho_grad = ortho_grad.T
    return ortho_grad


def is_sharded(p: torch.Tensor) -> bool:
    """A parameter FSDP2 sharded (a DTensor)."""
    from torch.distributed.tensor import DTensor

    return isinstance(p, DTensor)


def _local(t: torch.Tensor) -> torch.Tensor:
    """This rank's part of ``t``: a DTensor's local shard (the same storage), a plain tensor itself."""
    return t.to_local() if is_sharded(t) else t


@torch.no_grad()
def muon_step(
    opt: torch.optim.Muon, *, process_group: dist.ProcessGroup | None, dtype: torch.dtype = torch.bfloat16
) -> None:
    """One step of ``opt`` with each matrix's Newton-Schulz (in ``dtype``) on one rank of ``process_group``
    (replicated parameters) or of its DTensor's mesh (sharded ones); ``None`` and no DTensor: on this rank."""
    for group in opt.param_groups:
        params: list[torch.Tensor] = []
        grads: list[torch.Tensor] = []
        bufs: list[torch.Tensor] = []
        opt._init_group(group, params, grads, bufs)  # torch's: grad-less params skipped, buffers like the grads
        if not params:
            continue
        lr, momentum = _to_scalar(group["lr"]), group["momentum"]
        updates = []
        for grad, buf in zip(grads, bufs):  # as _single_tensor_muon, on the local shards under FSDP2
            grad, buf = _local(grad), _local(buf)
            buf.lerp_(grad, 1 - momentum)
            updates.append(grad.lerp(buf, momentum) if group["nesterov"] else buf)
        ns = functools.partial(
            newton_schulz,
            ns_coefficients=group["ns_coefficients"],
            ns_steps=group["ns_steps"],
            eps=group["eps"],
            dtype=dtype,
        )
        ortho = orthogonalise(params, updates, ns=ns, process_group=process_group, wire=dtype)
        for p, o in zip(params, ortho):
            w = _local(p)
            w.mul_(1 - lr * group["weight_decay"])
            w.add_(o, alpha=-_adjust_lr(lr, group["adjust_lr_fn"], p.shape))  # p.shape: the whole matrix's


def orthogonalise(
    params: list[torch.Tensor],
    updates: list[torch.Tensor],
    *,
    ns: Callable[[torch.Tensor], torch.Tensor],
    process_group: dist.ProcessGroup | None,
    wire: torch.dtype = torch.bfloat16,
) -> list[torch.Tensor]:
    """``ns`` of every update (a local shard where its parameter is a DTensor), each computed once; results
    cross ranks in ``wire``, the dtype ``ns`` computes and returns (a rank with no matrix sends zeros of it)."""
    out: list[torch.Tensor | None] = [None] * len(params)
    plain = [i for i, p in enumerate(params) if not is_sharded(p)]
    if process_group is None or dist.get_world_size(process_group) == 1:
        for i in plain:
            out[i] = ns(updates[i])
    elif plain:
        _replicated(plain, params, updates, out, ns=ns, group=process_group, wire=wire)
    sharded = [i for i, p in enumerate(params) if is_sharded(p)]
    layouts: dict[tuple, list[int]] = {}  # FSDP2 puts every parameter on one mesh; kept general all the same
    for i in sharded:
        layouts.setdefault((params[i].device_mesh, tuple(params[i].placements)), []).append(i)
    for (mesh, placements), indices in layouts.items():
        if mesh.ndim == 1 and placements == (_shard0(),):
            _sharded(indices, params, updates, out, ns=ns, group=mesh.get_group(), wire=wire)
        else:
            _whole_everywhere(indices, params, updates, out, ns=ns)
    return out


def _shard0():
    from torch.distributed.tensor import Shard

    return Shard(0)


def _plan(indices: list[int], params: list[torch.Tensor], world: int) -> Iterator[tuple[list[int], list[int]]]:
    """(group of at most ``world`` same-shape matrices, the distinct rank that orthogonalises each)."""
    by_shape: dict[tuple[int, ...], list[int]] = {}
    for i in indices:
        by_shape.setdefault(tuple(params[i].shape), []).append(i)
    cost = {shape: shape[0] * shape[1] * min(shape) for shape in by_shape}  # Newton-Schulz's matmul flops
    load = [0] * world
    for shape in sorted(by_shape, key=lambda s: -cost[s]):  # stable: equal costs keep the params' order
        same = by_shape[shape]
        for start in range(0, len(same), world):
            chunk = same[start : start + world]
            owners = sorted(range(world), key=lambda r: (load[r], r))[: len(chunk)]  # the least loaded
            for r in owners:
                load[r] += cost[shape]
            yield chunk, owners


def _replicated(
    indices: list[int],
    params: list[torch.Tensor],
    updates: list[torch.Tensor],
    out: list,
    *,
    ns: Callable,
    group: dist.ProcessGroup,
    wire: torch.dtype,
) -> None:
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    pending = []
    for chunk, owners in _plan(indices, params, world):
        if rank in owners:
            mine = ns(updates[chunk[owners.index(rank)]]).to(wire).contiguous()  # a transposed view if tall
        else:
            mine = updates[chunk[0]].new_zeros(updates[chunk[0]].shape, dtype=wire)
        gathered = mine.new_empty((world * mine.shape[0], mine.shape[1]))  # gloo wants the ranks' rows stacked
        work = dist.all_gather_into_tensor(gathered, mine, group=group, async_op=True)
        pending.append((work, gathered.view(world, *mine.shape), chunk, owners))
    for work, gathered, chunk, owners in pending:
        work.wait()
        for i, r in zip(chunk, owners):
            out[i] = gathered[r]


def _sharded(
    indices: list[int],
    params: list[torch.Tensor],
    updates: list[torch.Tensor],
    out: list,
    *,
    ns: Callable,
    group: dist.ProcessGroup,
    wire: torch.dtype,
) -> None:
    """Row shards as torch.chunk cuts them (DTensor's Shard(0)): ``per`` rows each, the last ones shorter or
    empty, padded to ``per`` on the wire so that one all-to-all moves them all."""
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    gathers = []
    for chunk, owners in _plan(indices, params, world):
        rows, cols = params[chunk[0]].shape
        per = math.ceil(rows / world)
        send = updates[chunk[0]].new_zeros((world, per, cols), dtype=wire)  # slot r: my rows of rank r's matrix
        for i, r in zip(chunk, owners):
            send[r, : updates[i].shape[0]] = updates[i]
        recv = torch.empty_like(send)  # recv[r]: rank r's rows of the matrix I orthogonalise
        gathers.append((dist.all_to_all_single(recv, send, group=group, async_op=True), recv, chunk, owners, rows))
    scatters = []
    for work, recv, chunk, owners, rows in gathers:
        work.wait()
        result = torch.zeros_like(recv)
        if rank in owners:
            flat = result.view(-1, result.shape[-1])
            flat[:rows] = ns(recv.view(-1, recv.shape[-1])[:rows])
        back = torch.empty_like(result)  # back[r]: my rows of the matrix rank r orthogonalised
        scatters.append((dist.all_to_all_single(back, result, group=group, async_op=True), back, chunk, owners))
    for work, back, chunk, owners in scatters:
        work.wait()
        for i, r in zip(chunk, owners):
            out[i] = back[r, : updates[i].shape[0]]


def _whole_everywhere(
    indices: list[int], params: list[torch.Tensor], updates: list[torch.Tensor], out: list, *, ns: Callable
) -> None:
    """A layout the all-to-all does not cover: the whole matrix on every rank, orthogonalised there, and
    this rank's part of the result (a Replicate -> Shard redistribution only slices)."""
    from torch.distributed.tensor import DTensor, Replicate

    for i in indices:
        p = params[i]
        whole = DTensor.from_local(
            updates[i], p.device_mesh, p.placements, shape=p.shape, stride=p.stride()
        ).full_tensor()
        o = DTensor.from_local(ns(whole), p.device_mesh, [Replicate()] * p.device_mesh.ndim)
        out[i] = o.redistribute(p.device_mesh, p.placements).to_local()
