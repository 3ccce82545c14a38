"""Reference-free preference tuning: the SimPO and CPO objectives of ``aura finetune --objective simpo|cpo``.

Both learn from the same pairs as DPO/ORPO (``aura.data.preference``: a batch holds the B chosen sequences
then the B rejected ones, one forward pass) and, like ORPO, need no reference model at all: no frozen copy,
no pass with the adapter disabled, nothing precomputed. Their unit is a pair (the loop divides a window's
summed loss by its pairs on all ranks). The definitions are TRL CPOTrainer's (``trl.experimental.cpo``),
checked against it in ``tests/test_simpo_parity.py``:

* **CPO** (Xu et al. 2024, ``loss_type="sigmoid"``): with ``s = log pi(c) - log pi(r)`` (sums over answer
  tokens), ``-(1 - e) log s(beta s) - e log s(-beta s)`` plus ``alpha`` times the chosen answer's NLL (a
  behaviour-cloning term, ``--cpo-alpha``, TRL's ``cpo_alpha``, default 1).
* **SimPO** (Meng et al. 2024, ``loss_type="simpo"``): the same with length-normalised log-probabilities
  (per-token means) and a target margin ``gamma`` (``--gamma``, TRL's ``simpo_gamma``):
  ``-log s(beta (mean log pi(c) - mean log pi(r)) - gamma)``; ``--cpo-alpha`` adds the NLL term (CPO-SimPO),
  off by default.

``e`` is ``--label-smoothing``. The NLL is the token mean of each chosen answer, averaged over pairs (TRL
averages over the tokens of a batch: the same with one pair per micro-batch), which keeps the loop's rule
that any split of the same pairs trains the same. Logged: rewards ``beta x`` the (mean or summed) log-prob of
each answer, their accuracy and margin, both log-probabilities, and with ``--cpo-alpha`` the NLL: TRL's
names, the columns DPO logs.
"""

from __future__ import annotations

import torch.nn.functional as F

from aura.train.objectives.objective import PREFERENCE_HEADLINE
from aura.train.objectives.preference import DPO_METRICS, count_pairs, pair_stats, sequence_logps


class SimPO:
    """SimPO (length-normalised, target margin ``gamma``) or CPO (summed log-probs) with an optional NLL term."""

    def __init__(
        self,
        *,
        name: str = "simpo",
        beta: float = 0.1,
        gamma: float = 0.5,
        cpo_alpha: float = 0.0,
        label_smoothing: float = 0.0,
    ):
        if name not in ("simpo", "cpo"):
            raise ValueError("name must be 'simpo' or 'cpo'")
        self.name, self.beta, self.gamma, self.cpo_alpha = name, beta, gamma, cpo_alpha
        self.label_smoothing = label_smoothing
        self.metric_names = DPO_METRICS + (("nll_loss",) if cpo_alpha else ())
        self.headline = PREFERENCE_HEADLINE

    def count(self, batch):
        return count_pairs(batch)

    def loss(self, model, batch):
        logps, n_tokens, _, _ = sequence_logps(model, batch)  # (2B,) sums over answer tokens
        means = logps / n_tokens.clamp(min=1)
        scores = means if self.name == "simpo" else logps  # (2B,) what the reward is made of
        chosen, rejected = scores.chunk(2)  # (B,)
        z = self.beta * (chosen - rejected)
        if self.name == "simpo":
            z = z - self.gamma  # TRL: beta * (logits - gamma / beta)
        eps = self.label_smoothing
        losses = -(1 - eps) * F.logsigmoid(z) - eps * F.logsigmoid(-z)  # (B,)
        stats = {}
        if self.cpo_alpha:
            nll = -means.chunk(2)[0]  # (B,) token-mean NLL of each chosen answer
            losses = losses + self.cpo_alpha * nll
            stats["nll_loss"] = nll.detach().sum()
        r_c, r_r = self.beta * chosen.detach(), self.beta * rejected.detach()
        return losses.sum(), {**pair_stats(r_c, r_r, chosen, rejected), **stats}
