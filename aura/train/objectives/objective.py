"""What the loop minimises: an ``Objective`` turns a micro-batch into a summed loss.

The loop (``aura.train.loop``) normalises the summed loss of a whole accumulation window by the number of
*units* of that window on all ranks, so every unit weighs the same whatever the batch or world size. For
language modelling a unit is a target token (``CausalLM``); a preference objective counts pairs. An
objective may also return summed statistics (``metrics``: e.g. DPO's rewards); they are averaged per unit
over each log interval and logged beside the loss (console, ``training_log.csv`` columns, TensorBoard),
under the names in ``metric_names``. A statistic ``x`` may bring its own denominator as ``x#n`` (``COUNT``, a
summed count that is not logged): KTO averages the rewards of its desirable answers over those answers only.

An objective also declares its ``headline``: the statistics a reader should compare between stages instead of
the loss (DPO's loss reaches 0 when it overfits, GRPO's is about 0 by construction). The run writes them to
``run.json`` and the pipeline's report card shows them (the last validation value, else the last logged
interval; or the change from the first logged interval to the last); an empty headline means the loss.

Periodic evaluators (``Evaluator``) are the other extension point: every ``interval`` optimizer steps the
loop calls them on every rank (in eval mode, without gradients) and logs the values they return.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Protocol

import torch
import torch.nn.functional as F

COUNT = "#n"  # suffix of a statistic's own denominator (see the module docstring)


def unit_means(sums: dict[str, float], units: float) -> dict[str, float | None]:
    """Summed statistics -> their means: per unit, or per their own ``COUNT`` (None when it is 0)."""
    out: dict[str, float | None] = {}
    for name, value in sums.items():
        if name.endswith(COUNT):
            continue
        n = sums.get(name + COUNT, units)
        out[name] = value / n if n else None
    return out


@dataclass(frozen=True)
class Headline:
    """One number a report shows for a stage trained with an objective (see the module docstring)."""

    metric: str  # one of the objective's ``metric_names`` (a training_log.csv column)
    es: str  # its name for a reader, in Spanish
    en: str  # and in English
    change: bool = False  # its change from the first logged interval to the last, not its last value

    def to_dict(self) -> dict:
        return asdict(self)


PREFERENCE_HEADLINE = (
    Headline("rewards/accuracy", "precisión de recompensa", "reward accuracy"),
    Headline("rewards/margin", "margen de recompensa", "reward margin"),
)


class Objective(Protocol):
    name: str
    metric_names: tuple[str, ...]  # the keys ``loss`` returns besides the loss (may be empty)
    headline: tuple[Headline, ...]  # what a report compares instead of the loss (empty: the loss)

    def count(self, batch: dict[str, torch.Tensor]) -> int:
        """Units of a CPU batch the loss is normalised by (no device sync)."""
        ...

    def loss(self, model, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """(the batch's loss summed over its units, {metric: value summed over its units}), on the device."""
        ...


class Evaluator(Protocol):
    interval: int  # optimizer steps between two runs (>0)
    names: tuple[str, ...]  # the keys it returns (CSV columns, TensorBoard tags)

    def __call__(self, model, *, dist) -> dict[str, float]:
        """Evaluate ``model`` (already in eval mode, under no_grad); every rank calls it, every rank gets
        the same values."""
        ...


class CausalLM:
    """Next-token cross entropy over the targets that are not -100 (fp32)."""

    name = "causal_lm"
    metric_names: tuple[str, ...] = ()
    headline: tuple[Headline, ...] = ()  # the token loss is the number to compare

    def count(self, batch: dict[str, torch.Tensor]) -> int:
        return count_targets(batch)

    def loss(self, model, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        return token_loss_sum(model, batch), {}


def count_inputs(batch: dict[str, torch.Tensor]) -> int:
    """Input tokens of a CPU batch that are not padding (throughput and MFU count only these): the
    attention mask's ones when the batch has one (padded SFT), the packed rows' count (``input_tokens``), else
    every position (pretraining)."""
    if "input_tokens" in batch:
        return int(batch["input_tokens"])
    if "attention_mask" in batch:
        return int(batch["attention_mask"].sum())
    return batch["input_ids"].numel()


def count_targets(batch: dict[str, torch.Tensor]) -> int:
    """Target tokens of a CPU batch (no device sync)."""
    if "shift_labels" in batch:
        return int((batch["shift_labels"] != -100).sum())
    return int((batch["labels"][:, 1:] != -100).sum())


def token_loss_sum(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Sum of token cross-entropies of one micro-batch (fp32), ignoring -100 targets.

    ``labels`` are aligned with the inputs as in Hugging Face (shifted here); ``shift_labels`` are already
    the target of each position. Where the model allows it (``aura.train.objectives.chunked_loss``), the head and the
    cross entropy run in chunks of tokens so the (B, T, V) logits never exist; elsewhere, the plain path.
    """
    from aura.train.objectives.chunked_loss import chunked_token_loss_sum, head_for_chunked_loss

    head = head_for_chunked_loss(model)
    if head is not None:
        return chunked_token_loss_sum(model, head, batch)
    return plain_token_loss_sum(model, batch)


def plain_token_loss_sum(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """``token_loss_sum`` from the model's full (B, T, V) logits."""
    kwargs = {k: batch[k] for k in ("attention_mask", "position_ids") if k in batch}
    logits = model(input_ids=batch["input_ids"], use_cache=False, **kwargs).logits  # (B, T, V)
    if "shift_labels" in batch:
        targets = batch["shift_labels"]  # (B, T)
    else:
        logits, targets = logits[:, :-1], batch["labels"][:, 1:]  # (B, T-1, V), (B, T-1)
    return F.cross_entropy(
        logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1), ignore_index=-100, reduction="sum"
    )
