"""The learning rate as a pure function of the step: ``Schedule`` (cosine or WSD) and ``CooldownClock``.

Two shapes (``--lr-schedule``), both after the same linear warm-up:

* ``cosine`` (the 2019 recipe): a half cosine from the peak down to ``--min-lr`` at the last step.
* ``wsd`` (warm-up, stable, decay; Hägele et al. 2024, "Scaling Laws and Compute-Optimal Training Beyond
  Fixed Training Durations"): the peak rate held until the last ``--cooldown-fraction`` of the steps,
  then a 1-sqrt cooldown to ``--min-lr``. The stable phase does not depend on the run's length, so a
  checkpoint taken before the cooldown is a branch point: resumed with a longer plan it simply stays
  stable for longer (``Schedule.replanned``).

The rate at step ``s`` depends only on ``s`` and on the schedule's fields, which every checkpoint stores
(``trainer_state.json``'s ``plan``). The one value that is decided while training runs, the step where a
``--time-budget`` started the WSD cooldown (``CooldownClock``), becomes one of those fields
(``cooldown_start``, with the new last step ``total``) and is checkpointed like the rest.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Callable

SCHEDULES = ("cosine", "wsd")


@dataclass(frozen=True)
class Schedule:
    """Linear warm-up to ``base``, then ``kind``: a cosine to ``min_lr`` at ``total`` or WSD.

    After a resume that changed the run's length (``aura.train.run.resume_plan``) a cosine is re-planned from
    ``replan_step``: it starts at the rate the old plan had there (``replan_lr``) and ends at ``min_lr`` at
    the new ``total``, so the rate never jumps. A WSD cooldown starts at ``cooldown_start`` when it is set
    (a time budget or a re-plan fixed it), else at ``total`` minus the cooldown fraction of the steps; it
    falls from ``replan_lr`` (or ``base``) with the 1-sqrt shape."""

    base: float
    min_lr: float
    warmup: int
    total: int
    replan_step: int | None = None
    replan_lr: float | None = None
    kind: str = "cosine"  # cosine | wsd (checkpoints written before WSD existed are cosine)
    cooldown_fraction: float = 0.2  # wsd: share of the steps spent cooling down
    cooldown_start: int | None = None  # wsd: the cooldown's first step once fixed (time budget, re-plan)

    def lr(self, step: int) -> float:
        if self.kind == "wsd":
            return wsd_lr(
                step,
                base=self.base,
                min_lr=self.min_lr,
                warmup=self.warmup,
                total=self.total,
                start=self.decay_start,
                start_lr=self.replan_lr,
            )
        if self.replan_step is None or step < self.replan_step:
            return lr_at(step, base=self.base, min_lr=self.min_lr, warmup=self.warmup, total=self.total)
        span = self.total - self.replan_step
        progress = min(1.0, (step - self.replan_step) / span) if span > 0 else 1.0
        start = float(self.replan_lr if self.replan_lr is not None else self.base)
        return self.min_lr + 0.5 * (start - self.min_lr) * (1.0 + math.cos(math.pi * progress))

    @property
    def decay_start(self) -> int:
        """WSD: the first step of the cooldown (``total`` when there is none)."""
        if self.cooldown_start is not None:
            return self.cooldown_start
        return cooldown_start_for(self.total, warmup=self.warmup, fraction=self.cooldown_fraction)

    def cooling(self, step: int) -> bool:
        """WSD: ``step`` is in the cooldown (a checkpoint before it is a branch point)."""
        return self.kind == "wsd" and step >= self.decay_start

    def replanned(self, *, step: int, total: int) -> "Schedule":
        """The same schedule continued from ``step`` towards a new ``total``."""
        if self.kind == "wsd":
            if not self.cooling(step):  # stable phase: only the cooldown moves (never before ``step``)
                new = dataclasses.replace(self, total=total, cooldown_start=None)
                return new if new.decay_start >= step else dataclasses.replace(new, cooldown_start=step)
            return dataclasses.replace(
                self, total=total, cooldown_start=step, replan_step=step, replan_lr=self.lr(step)
            )
        if step < self.warmup:  # still warming up: the ramp does not depend on the total
            return dataclasses.replace(self, total=total, replan_step=None, replan_lr=None)
        return dataclasses.replace(self, total=total, replan_step=step, replan_lr=self.lr(step))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "Schedule":
        """A checkpoint's schedule (unknown keys ignored, missing ones take today's defaults)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names})


def schedule_for(args, total_steps: int) -> Schedule:
    """The schedule the flags ask for: --lr-schedule (default cosine), --learning-rate, --min-lr (default
    10 % of the peak for the cosine, 0 for WSD), --warmup-steps (default 3 %), --cooldown-fraction."""
    kind = getattr(args, "lr_schedule", None) or "cosine"
    base = float(args.learning_rate or 1e-3)
    if args.min_lr is not None:
        min_lr = float(args.min_lr)
    else:
        min_lr = 0.0 if kind == "wsd" else base * 0.1
    warmup = default_warmup(total_steps) if args.warmup_steps is None else int(args.warmup_steps)
    return Schedule(
        base=base,
        min_lr=min_lr,
        warmup=warmup,
        total=total_steps,
        kind=kind,
        cooldown_fraction=float(getattr(args, "cooldown_fraction", 0.2)),
    )


def default_warmup(total_steps: int) -> int:
    return max(1, round(0.03 * total_steps)) if total_steps > 1 else 0


def lr_at(step: int, *, base: float, min_lr: float, warmup: int, total: int) -> float:
    """Learning rate for optimizer step ``step`` (0-based): linear warm-up, then cosine to ``min_lr``."""
    if warmup > 0 and step < warmup:
        return base * (step + 1) / warmup
    if total <= warmup:
        return base
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return min_lr + 0.5 * (base - min_lr) * (1.0 + math.cos(math.pi * progress))


def cooldown_start_for(total: int, *, warmup: int, fraction: float) -> int:
    """WSD: the cooldown's first step for ``total`` steps (never inside the warm-up; ``total``: none)."""
    if fraction <= 0:
        return total
    return max(warmup, total - max(1, round(fraction * total)))


def wsd_lr(
    step: int, *, base: float, min_lr: float, warmup: int, total: int, start: int, start_lr: float | None = None
) -> float:
    """Warm-up, stable at ``base``, then from ``start`` a 1-sqrt cooldown from ``start_lr`` (default
    ``base``) to ``min_lr`` at ``total``: lr = min + (start_lr - min) (1 - sqrt(progress)). A cooldown that
    a time budget started inside the warm-up wins over it (from the rate reached, ``start_lr``)."""
    if step >= start:
        top = float(base if start_lr is None else start_lr)
        progress = min(1.0, (step - start) / max(1, total - start))
        return min_lr + (top - min_lr) * (1.0 - math.sqrt(progress))
    if warmup > 0 and step < warmup:
        return base * (step + 1) / warmup
    return base


class CooldownClock:
    """``--time-budget`` for a WSD run: start the cooldown when the budget left is the cooldown's share.

    At each log step the loop asks ``due``: once the time left (``budget_s`` minus the training time so
    far, resumed runs included) is at most ``fraction`` of the budget, the cooldown starts at this step
    and lasts as many steps as the time left allows at the throughput measured since the process started
    training (evaluations and checkpoints included: they spend the budget too). The answer is a new
    ``Schedule`` (``cooldown_start``, ``total``), so the run ends cooled down when the budget ends and
    the decision is checkpointed. ``clock`` is injectable (tests use a fake one)."""

    def __init__(
        self,
        *,
        budget_s: float,
        fraction: float,
        elapsed_s: float = 0.0,
        step: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.budget, self.fraction, self.clock = float(budget_s), float(fraction), clock
        self._elapsed0, self._step0, self._t0 = float(elapsed_s), int(step), clock()

    def elapsed(self) -> float:
        """Training seconds of the whole run (before the resume and since)."""
        return self._elapsed0 + (self.clock() - self._t0)

    def due(self, schedule: Schedule, step: int) -> Schedule | None:
        """The schedule with its cooldown starting at ``step``, when the budget says so; else None."""
        if schedule.kind != "wsd" or self.budget <= 0 or step <= self._step0 or schedule.cooling(step):
            return None
        left = self.budget - self.elapsed()
        if left > self.fraction * self.budget:
            return None
        per_step = (self.clock() - self._t0) / (step - self._step0)
        steps = max(1, int(left // per_step)) if per_step > 0 and left > 0 else 1
        return dataclasses.replace(
            schedule,
            cooldown_start=step,
            total=min(schedule.total, step + steps),
            replan_step=step,
            replan_lr=schedule.lr(step),
        )  # from the rate reached
