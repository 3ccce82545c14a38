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
    """``sequence_scores`` of shared-prompt rows ``[prompt | chosen | rejected]`` (R, T, several pairs in a row
    where they fit), one forward under ``preference.pair_attention_mask``. Each answer's score is read where its
    own row would be read: at the last token of its pair's prompt and that answer that is not the pad token
    (transformers' rule). The head's output (R, T, 1) is replaced on its way out by every answer's score at
    every position (R, T, 2B), so the model's own pooling, whichever position it picks, returns them: the loss
    flows through the model's output, where FSDP2 gathers its root's parameters (the backbone's norm, the head)
    again for the backward pass."""
    from aura.data.preference import CHOSEN, REJECTED, SHARED
    from aura.train.objectives.preference import pair_attention_mask, peft_model

    input_ids, segments, pair = batch["input_ids"], batch["segments"], batch["pair"]  # (R, T)
    B = batch["pair_row"].shape[0]
    inner = peft_model(model)
    attn, dtype = inner.config._attn_implementation, inner.get_input_embeddings().weight.dtype
    mask = pair_attention_mask(segments, pair, implementation=attn, dtype=dtype)  # (R, 1, T, T)
    real = input_ids != inner.config.pad_token_id  # (R, T)
    flat = torch.arange(input_ids.numel(), device=input_ids.device).view(input_ids.shape)  # (R, T)
    last = []
    for part in (CHOSEN, REJECTED):
        seen = real & (pair >= 0) & ((segments == SHARED) | (segments == part))  # what this answer's own row holds
        slot = torch.where(seen, pair, B)  # (R, T): other positions go to a slot thrown away
        at = torch.full((B + 1,), -1, dtype=torch.long, device=flat.device)
        last.append(at.scatter_reduce(0, slot.reshape(-1), flat.reshape(-1), "amax")[:B])  # (B,)
    index = torch.cat(last)  # (2B,): the chosen answers', then the rejected ones'

    def every_score(module, args, out):  # out: (R, T, 1), the head at every position
        picked = out.reshape(-1)[index]  # (2B,)
        return picked.expand(*out.shape[:2], -1)  # (R, T, 2B)

    head = next(m for name, m in inner.named_modules() if name.rsplit(".", 1)[-1] == "score")
    hook = head.register_forward_hook(every_score)
    try:
        logits = model(input_ids=input_ids, attention_mask=mask, position_ids=batch["position_ids"], use_cache=False)
    finally:
        hook.remove()
    return logits.logits[0].float()  # (2B,): every row pooled the same scores


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
