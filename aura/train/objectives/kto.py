"""KTO: the objective of ``aura finetune --objective kto``, on single answers rated good or bad.

Kahneman-Tversky Optimisation (Ethayarajh et al. 2024), TRL ``KTOTrainer``'s ``kto`` loss: with the log ratio
``r = log pi(y|x) - log ref(y|x)`` of an answer (summed over its tokens) and the reference point ``z``,
a desirable answer costs ``w_d (1 - s(beta (r - z)))`` and an undesirable one ``w_u (1 - s(beta (z - r)))``
(``--desirable-weight``, ``--undesirable-weight``, ``--beta``). ``z`` estimates KL(pi || ref) from the
*mismatched* sequences of the batch (each prompt with another example's answer, ``aura.data.kto``): the mean
of their log ratios over the micro-batch on every rank (one all-reduce, like TRL's gather), clamped at 0 and
detached. The unit is an example: the loop divides the summed loss of a window by its examples on all ranks
(TRL: the mean over a micro-batch; the same when the micro-batches are equal).

The reference is the base with the adapter disabled (LoRA/QLoRA), a frozen copy (full) or log-probabilities
computed once before training (``--precompute-ref``), as for DPO. Per step the policy runs the mismatched
sequences without gradients and the real ones with; the reference runs both in one forward pass, and where
the model takes the mask (``preference.shares_prompt``) as one row per example, the prompt once (the
``ref_pair_`` rows of ``aura.data.kto``). The policy's two passes stay apart: in one row with the real
sequence, the mismatched answer would join the backward pass (about twice its forward) to save one forward
of the prompt, which costs more than it saves when prompts and answers have similar lengths. Each pass packs
its answers padding-free where the model keeps packed sequences apart (``collate_unpaired(padding_free=True)``,
SFT's rule): the same log-probs per answer from fewer computed tokens.

Logged (TRL's names): ``rewards/chosen`` and ``logps/chosen`` averaged over the desirable answers,
``rewards/rejected`` and ``logps/rejected`` over the undesirable ones (their own denominators, ``#n``), and
``kl``, the reference point.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from aura.train.lora_views import adapters_off
from aura.train.objectives.objective import COUNT, Headline
from aura.train.objectives.preference import peft_model, sequence_logps

KTO_METRICS = ("rewards/chosen", "rewards/rejected", "logps/chosen", "logps/rejected", "kl")


def _kl_view(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The mismatched sequences of a batch under the plain names."""
    return {k[len("kl_") :]: v for k, v in batch.items() if k.startswith("kl_")}


def reference_view(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Both sequences for the reference: the shared-prompt rows when the batch has them, else the two stacked."""
    if "ref_pair_segments" in batch:
        return {k[len("ref_pair_") :]: v for k, v in batch.items() if k.startswith("ref_pair_")}
    return _stacked(batch, _kl_view(batch))


def _stacked(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Two batches as one (rows of ``a`` then ``b``, padded to the wider one): right-padded rows as they are, or,
    when either is packed padding-free, both as packed rows (sequences of ``a``, then of ``b``)."""
    width = max(a["input_ids"].shape[1], b["input_ids"].shape[1])
    fill = {"input_ids": 0, "labels": -100, "attention_mask": 0}
    if "sequence" in a or "sequence" in b:
        a, b = _as_packed(a), _as_packed(b)
        b = {**b, "sequence": torch.where(b["sequence"] >= 0, b["sequence"] + a["sequence_row"].numel(), -1)}
        fill = {"input_ids": 0, "labels": -100, "position_ids": 0, "sequence": -1}
        rows = {"sequence_row": torch.cat([a["sequence_row"], b["sequence_row"] + a["input_ids"].shape[0]])}
    else:
        rows = {}
    pad = {k: torch.cat([F.pad(x[k], (0, width - x[k].shape[1]), value=fill[k]) for x in (a, b)]) for k in fill}
    return {**pad, **rows}


def _as_packed(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A batch in the packed form of ``collate_padding_free(owners=True)``: as it is when packed, else each
    right-padded row one sequence (positions counted from its start, padding its own)."""
    if "sequence" in batch:
        return batch
    mask = batch["attention_mask"]  # (N, T)
    n, width = mask.shape
    columns = torch.arange(width, device=mask.device).expand(n, width)
    lengths = mask.sum(1, keepdim=True)  # (N, 1)
    return {
        "input_ids": batch["input_ids"],
        "labels": batch["labels"],
        "position_ids": torch.where(mask.bool(), columns, columns - lengths),
        "sequence": torch.where(mask.bool(), torch.arange(n, device=mask.device)[:, None], -1),
        "sequence_row": torch.arange(n, device=mask.device),
    }


class KTO:
    """Kahneman-Tversky Optimisation against a reference model, with TRL's KL estimate."""

    name = "kto"
    metric_names = KTO_METRICS
    headline = (
        Headline("kl", "KL", "KL"),  # the reference point of its value function, and the rewards
        Headline("rewards/chosen", "recompensa (deseables)", "reward (desirable)"),
        Headline("rewards/rejected", "recompensa (no deseables)", "reward (undesirable)"),
    )
    counted_metrics = ("rewards/chosen", "rewards/rejected", "logps/chosen", "logps/rejected")

    def __init__(
        self,
        *,
        beta: float = 0.1,
        desirable_weight: float = 1.0,
        undesirable_weight: float = 1.0,
        ref_model=None,
        dist=None,
    ):
        """``ref_model``: a frozen copy (full fine-tuning); None: the policy with its adapter disabled, unless
        the batch brings ``ref_logps`` (precomputed). ``dist``: the ranks the KL estimate is averaged over."""
        self.beta, self.desirable_weight, self.undesirable_weight = beta, desirable_weight, undesirable_weight
        self.ref_model, self.dist = ref_model, dist

    def count(self, batch):
        return int(batch["label"].shape[0])  # examples, not rows: packed rows hold several

    @torch.no_grad()
    def reference_logps(self, model, batch) -> tuple[torch.Tensor, torch.Tensor]:
        """The reference's log-probs of the answers (B,) and of the mismatched answers (B,)."""
        if "ref_logps" in batch:
            return batch["ref_logps"], batch["ref_kl_logps"]
        both = reference_view(batch)  # one forward pass for both
        if self.ref_model is not None:
            return sequence_logps(self.ref_model, both)[0].chunk(2)
        with adapters_off(peft_model(model)):
            return sequence_logps(model, both)[0].chunk(2)

    def _kl(self, kl_ratios: torch.Tensor) -> torch.Tensor:
        """The mean of the mismatched log ratios over this micro-batch on every rank, clamped at 0."""
        total = torch.stack(
            [
                kl_ratios.double().sum(),
                torch.tensor(float(kl_ratios.numel()), dtype=torch.float64, device=kl_ratios.device),
            ]
        )
        if self.dist is not None and self.dist.world_size > 1:
            total = self.dist.all_reduce(total.to(self.dist.comm_device), "sum").to(kl_ratios.device)
        return (total[0] / total[1]).float().clamp(min=0)

    def loss(self, model, batch):
        ref, ref_kl = (t.float() for t in self.reference_logps(model, batch))  # (B,) each, nothing traced
        with torch.no_grad():
            kl_logps = sequence_logps(model, _kl_view(batch))[0]  # (B,)
        kl = self._kl(kl_logps - ref_kl)  # () detached
        logps = sequence_logps(model, batch)[0]  # (B,)
        ratio = logps - ref
        good = batch["label"].to(logps.device)  # (B,) bool
        losses = torch.where(
            good,
            self.desirable_weight * (1 - torch.sigmoid(self.beta * (ratio - kl))),
            self.undesirable_weight * (1 - torch.sigmoid(self.beta * (kl - ratio))),
        )
        rewards, logps_d = self.beta * ratio.detach(), logps.detach()
        g, b = good.float(), (~good).float()
        n_good, n_bad = g.sum(), b.sum()
        return losses.sum(), {
            "rewards/chosen": (rewards * g).sum(),
            "rewards/chosen" + COUNT: n_good,
            "rewards/rejected": (rewards * b).sum(),
            "rewards/rejected" + COUNT: n_bad,
            "logps/chosen": (logps_d * g).sum(),
            "logps/chosen" + COUNT: n_good,
            "logps/rejected": (logps_d * b).sum(),
            "logps/rejected" + COUNT: n_bad,
            "kl": kl * logps.shape[0],
        }
