"""Reward models: the Bradley–Terry objective of ``aura finetune --objective reward``.

The model is the base's backbone under transformers' ``...ForSequenceClassification`` head with one output
(``aura.train.adapters.SEQ_CLS``): its score of a sequence is the head's value at the row's last token that
is not padding. A batch is the preference pairs' batch (``aura.data.preference``: the B chosen sequences, then
the B rejected ones, each whole: prompt and answer), and the loss of a pair is TRL RewardTrainer's:

    -log s(r_c - r_r - m) + c (r_c + r_r)^2

with ``m`` the pair's ``margin`` column when the data has one (else 0) and ``c`` the
``--center-rewards-coefficient`` (Eisenstein et al. 2023: it keeps the scores centred on 0; off by default).
Its unit is a pair (TRL averages over a micro-batch's pairs: the same with equal micro-batches). Logged: the
mean scores of the chosen and the rejected answers, the accuracy (how often r_c > r_r) and the margin (mean
r_c - r_r), under DPO's column names, so the report card's preference headline applies as is. Checked against
TRL in ``tests/test_reward_model.py``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from aura.train.objectives.objective import PREFERENCE_HEADLINE
from aura.train.objectives.preference import count_pairs

REWARD_METRICS = ("rewards/chosen", "rewards/rejected", "rewards/accuracy", "rewards/margin")


def sequence_scores(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """(rows,) the model's score of each row (fp32)."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False).logits
    return logits.squeeze(-1).float()  # (rows, 1) -> (rows,)


class BradleyTerry:
    """``-log s(r_c - r_r - margin)`` (+ ``center`` x ``(r_c + r_r)^2``) per pair, summed."""

    name = "reward"
    metric_names = REWARD_METRICS
    headline = PREFERENCE_HEADLINE

    def __init__(self, *, center: float = 0.0):
        self.center = center

    def count(self, batch):
        return count_pairs(batch)

    def loss(self, model, batch):
        r_c, r_r = sequence_scores(model, batch).chunk(2)  # (B,), (B,)
        z = r_c - r_r
        if "margin" in batch:
            z = z - batch["margin"].to(z)  # (B,)
        losses = -F.logsigmoid(z)  # (B,)
        if self.center:
            losses = losses + self.center * (r_c + r_r) ** 2
        c, r = r_c.detach(), r_r.detach()
        return losses.sum(), {
            "rewards/chosen": c.sum(),
            "rewards/rejected": r.sum(),
            "rewards/accuracy": (c > r).float().sum(),
            "rewards/margin": (c - r).sum(),
        }
