"""Reward models: the Bradley–Terry objective of ``aura finetune --objective reward``.

The model is the base's backbone under transformers' ``...ForSequenceClassification`` head with one output
(``aura.train.adapters.SEQ_CLS``): its score of a sequence is the head's value at the row's last token that
is not padding. A batch is the preference pairs' batch (``aura.data.preference``: the B chosen sequences, then
the B rejected ones, each whole: prompt and answer; or, where the model takes the 4D mask, one row per pair with
the prompt once, as DPO's, each answer read where its own row would be), and the loss of a pair is TRL
RewardTrainer's:

    -log s(r_c - r_r - m) + c (r_c + r_r)^2

with ``m`` the pair's ``margin`` column when the data has one (else 0) and ``c`` the
``--center-rewards-coefficient`` (Eisenstein et al. 2023: it keeps the scores centred on 0; off by default).
Its unit is a pair (TRL averages over a micro-batch's pairs: the same with equal micro-batches). Logged: the
mean scores of the chosen and the rejected answers, the accuracy (how often r_c > r_r) and the margin (mean
r_c - r_r), under DPO's column names, so the report card's preference headline applies as is. Checked against
TRL in ``tests/test_reward_model.py``; under FSDP2 and DeepSpeed ZeRO-2 against one process in
``tests/test_reward_dist.py``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from aura.train.objectives.objective import PREFERENCE_HEADLINE
from aura.train.objectives.preference import count_pairs

REWARD_METRICS = ("rewards/chosen", "rewards/rejected", "rewards/accuracy", "rewards/margin")


def sequence_scores(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """(2B,) the model's scores of the chosen sequences, then of the rejected ones (fp32), from two-row batches
    or from shared-prompt rows (``_shared_scores``)."""
    if "segments" in batch:
        return _shared_scores(model, batch)
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False).logits
    return logits.squeeze(-1).float()  # (2B, 1) -> (2B,)


def _shared_scores(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """``sequence_scores`` of shared-prompt rows ``[prompt | chosen | rejected]`` (B, T), one forward per pair
    under ``preference.pair_attention_mask``. Each answer's score is read where its own row would be read: at
    the last token of the prompt and that answer that is not the pad token (transformers' rule). The head's
    output (B, T, 1) is replaced on its way out by the two scores at every position (B, T, 2), so the model's
    own pooling, whichever position it picks, returns them: the loss flows through the model's output, where
    FSDP2 gathers its root's parameters (the backbone's norm, the head) again for the backward pass."""
    from aura.data.preference import CHOSEN, REJECTED, SHARED
    from aura.train.objectives.preference import pair_attention_mask, peft_model

    input_ids, segments = batch["input_ids"], batch["segments"]  # (B, T)
    inner = peft_model(model)
    mask = pair_attention_mask(
        segments, implementation=inner.config._attn_implementation, dtype=inner.get_input_embeddings().weight.dtype
    )  # (B, 1, T, T)
    real = input_ids != inner.config.pad_token_id  # (B, T)
    positions = torch.arange(input_ids.shape[1], device=input_ids.device)  # (T,)
    last = []
    for part in (CHOSEN, REJECTED):
        seen = real & ((segments == SHARED) | (segments == part))  # (B, T): what this answer's own row holds
        last.append((positions * seen).argmax(-1))  # (B,)
    index = torch.stack(last, -1)  # (B, 2)

    def both_scores(module, args, out):  # out: (B, T, 1), the head at every position
        picked = out.squeeze(-1).gather(1, index)  # (B, 2)
        return picked[:, None, :].expand(-1, out.shape[1], -1)  # (B, T, 2)

    head = next(m for name, m in inner.named_modules() if name.rsplit(".", 1)[-1] == "score")
    hook = head.register_forward_hook(both_scores)
    try:
        logits = model(input_ids=input_ids, attention_mask=mask, position_ids=batch["position_ids"], use_cache=False)
    finally:
        hook.remove()
    return logits.logits.float().T.reshape(-1)  # (B, 2) -> (2B,): the chosen answers', then the rejected ones'


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
