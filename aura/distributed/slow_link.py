"""The step engine a distributed run drives: the plain engine, or the wrapper of a slow-link mode
(``--ddp-comm`` timing and PowerSGD state, ``--local-steps`` DiLoCo)."""

from __future__ import annotations

from aura.distributed.comm_hooks import CommEngine
from aura.distributed.local_sgd import LocalSGDEngine


def wrap_engine(engine, *, model, args, dist, total_steps: int):
    """The step engine the loop drives: ``engine`` itself, or a wrapper for ``--ddp-comm`` (any DDP run
    under torchrun) or ``--local-steps`` (``aura.distributed.local_sgd``)."""
    if getattr(args, "local_steps", None) and dist.world_size > 1:
        return LocalSGDEngine(
            engine,
            model=model,
            dist=dist,
            local_steps=args.local_steps,
            outer_lr=args.outer_lr,
            outer_momentum=args.outer_momentum,
            total_steps=total_steps,
        )
    hook = getattr(model, "_aura_comm", None)
    if hook is not None:
        return CommEngine(engine, hook=hook, dist=dist, log_interval=args.log_interval)
    return engine
