"""What a training run is at a step: the counters a checkpoint resumes (``TrainState``) and the
batch-source protocol the loop and the checkpoint policy share.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Protocol

import torch

from aura.core import console
from aura.core.errors import AuraError
from aura.core.i18n import Messages
from aura.train.optim.step_engine import StepOutcome

M = Messages(
    "train_state",
    {
        "bad_step": (
            "Paso {step}: pérdida o gradiente no finito ({loss}); se omite la actualización ({n}/{max} seguidos).",
            "Step {step}: non-finite loss or gradient ({loss}); the update is skipped ({n}/{max} in a row).",
        ),
        "too_many_bad": (
            "La pérdida fue NaN/inf en {n:paso seguido|pasos seguidos} (hasta el paso {step}). Se conserva el "
            "último checkpoint bueno{last}. Baja --learning-rate, usa --precision bf16 o fp32, o "
            "revisa los datos; súbelo con --max-bad-steps si es transitorio.",
            "The loss was NaN/inf for {n:step|steps} in a row (up to step {step}). The last good checkpoint "
            "is kept{last}. Lower --learning-rate, use --precision bf16 or fp32, or check the data; "
            "raise --max-bad-steps if it is transient.",
        ),
    },
)


class BatchSource(Protocol):
    """A resumable stream of micro-batches for this rank (see module docstring for the batch format)."""

    batches_per_epoch: int  # micro-batches per epoch on this rank (equal on every rank)
    epoch: int
    position: int  # micro-batches of the current epoch already handed out

    def next_batch(self) -> dict[str, torch.Tensor] | None: ...  # None once the epoch is exhausted
    def start_epoch(self, epoch: int) -> None: ...
    def state_dict(self) -> dict: ...
    def load_state_dict(self, state: dict) -> None: ...


@dataclass
class TrainState:
    """Counters that resume exactly (the data position lives in the batch source)."""

    step: int = 0
    epoch: int = 0
    tokens_seen: int = 0
    bad_steps_in_row: int = 0
    best_val_loss: float | None = None
    best_step: int | None = None
    last_val_loss: float | None = None
    val_rises_in_row: int = 0
    # running sums over all ranks (TrainMetrics.running_sums), so a resumed run's epoch means, epoch
    # duration and first log line cover the steps before the resume too
    epoch_loss_sum: float = 0.0
    epoch_targets: int = 0
    epoch_seconds: float = 0.0
    interval_loss_sum: float = 0.0
    interval_targets: int = 0
    interval_stats: dict = dataclasses.field(default_factory=dict)
    last_checkpoint: str | None = None
    train_seconds: float = 0.0  # training time of the whole run, resumes included (--time-budget)

    def state_dict(self) -> dict:
        return dict(self.__dict__)

    def load_state_dict(self, state: dict) -> None:
        for k in self.__dict__:
            if k in state:
                setattr(self, k, state[k])

    def count_step(self, outcome: StepOutcome, *, tokens: int, max_bad_steps: int) -> None:
        """One optimizer step done; a skipped (non-finite) one counts towards ``--max-bad-steps`` in a row."""
        if outcome.applied:
            self.bad_steps_in_row = 0
        else:
            self.bad_steps_in_row += 1
            console.warn(
                M("bad_step", step=self.step + 1, loss=outcome.loss, n=self.bad_steps_in_row, max=max_bad_steps)
            )
            if self.bad_steps_in_row >= max(max_bad_steps, 1):
                last = f": {self.last_checkpoint}" if self.last_checkpoint else ""
                raise AuraError(M("too_many_bad", n=self.bad_steps_in_row, step=self.step + 1, last=last))
        self.step += 1
        self.tokens_seen += tokens
