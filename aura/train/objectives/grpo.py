"""GRPO, the objective of ``aura finetune --objective grpo``: TRL's algorithm on Aura's one training loop.

A micro-batch holds B completions (``aura.train.objectives.rollout`` samples them, scores them and
computes their advantages): ``input_ids`` = the left-padded prompt then the right-padded completion,
``attention_mask``, ``position_ids`` (counted from each row's first real token, as when sampling),
``completion_mask`` (B, C), ``advantages`` (B,), ``ref_logps`` (B, C) when ``--beta`` > 0, optionally
``old_logps`` (B, C), ``sampler_logps`` (B, C) when another engine sampled the completions (vLLM), and
``rollout_stats`` (the window's reward statistics, logged as they are).

A sampler that is not the trainer's forward (vLLM's kernels, its bf16 merged weights) draws from a slightly
different distribution than the one the loss differentiates: each completion's loss is weighted by its
importance ratio exp(sum of old - sampler log-probs over its tokens), and a completion whose ratio exceeds
IS_MAX is dropped (weight 0): TRL's ``vllm_importance_sampling_correction`` in its default
``sequence_mask`` mode, after Yao et al. 2025 ("Your efficient RL framework secretly brings you off-policy
RL training"); tests/test_grpo_parity.py checks the loss and gradients against TRL's.

Per completion token, with ``r = exp(log pi - log pi_old)`` (``pi_old`` = the policy that sampled:
``log pi`` detached, so ``r = 1`` and only its gradient acts, when every rollout is used for one step):
``-min(r A, clip(r, 1 - eps, 1 + eps_high) A) + beta KL``, with the k3 estimator
``KL = exp(ref - log pi) - (ref - log pi) - 1``. Log-probabilities use the logits divided by the sampling
temperature, as TRL's do. Aggregation (``--loss-type``), with the loop normalising every window by the
objective's units on all ranks:

* ``grpo``: each completion's token mean, averaged over completions (unit: a completion);
* ``bnpo``: the token mean of each micro-batch, averaged over micro-batches (unit: a completion);
* ``dr_grpo``: the token sum over completions x ``--max-completion-length`` (unit: that many tokens);
* ``dapo``: the token sum over the tokens of the whole window, all ranks (unit: a completion token).

* ``cispo`` (MiniMax-M1's CISPO): the per-token loss is ``-sg(min(r, eps_high)) A log pi`` (the ratio, clipped
  from above only and detached, weights the log-probability's gradient: no token's gradient is dropped),
  aggregated as ``dapo``; ``eps_high`` is then an upper bound on the ratio itself (``--epsilon-high``, 5 by
  default, the value TRL's documentation recommends).

``--importance-sampling-level sequence`` (GSPO, Zheng et al. 2025) replaces every token's ratio by its
completion's, ``exp`` of the mean of ``log pi - log pi_old`` over the completion's tokens; ``token`` (the
default) keeps one ratio per token. The clipped-share statistic then counts completions, not tokens.

These are TRL GRPOTrainer's definitions (``tests/test_grpo_parity.py`` checks loss and gradients against
it). Logged besides the loss (per step, averaged over a log interval like every objective's statistics):
the rollout's reward statistics, the policy's entropy, the share of clipped tokens and, with ``--beta``,
the KL to the reference.
"""

from __future__ import annotations

import torch

from aura.train.objectives.objective import COUNT, Headline

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo")
IS_LEVELS = ("token", "sequence")
CISPO_EPSILON_HIGH = 5.0  # TRL's documentation: the ScaleRL paper's epsilon_max
ROLLOUT_STATS = (
    "reward",
    "reward_std",
    "frac_reward_zero_std",
    "groups_with_signal",
    "groups_resampled",
    "groups_dropped",
    "completion_length",
    "completions_truncated",
    "completions_masked",
    "time/rollout_s",
    "time/update_s",
)
TOOL_STATS = ("tool_calls", "tool_failures")  # after ROLLOUT_STATS with --tools (``tool_rollout``)


def rollout_stat_names(reward_names: list[str]) -> tuple[str, ...]:
    """The statistics a rollout attaches to its micro-batches, in their order in ``rollout_stats``."""
    per_reward = tuple(f"rewards/{n}/{k}" for n in reward_names for k in ("mean", "std"))
    return ROLLOUT_STATS[:2] + per_reward + ROLLOUT_STATS[2:]


def completion_logps(
    model, batch: dict[str, torch.Tensor], *, temperature: float, entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(log-prob of each completion token under ``model`` (B, C) fp32, and its entropy (B, C), no
    gradient, when asked). Logits exist only for the completion positions (``logits_to_keep``). When rows
    share a prompt (``prompt_rows``: GRPO's G completions of one prompt), see ``_shared_prompt_logits``."""
    c = batch["completion_mask"].shape[1]
    ids = batch["input_ids"]  # (B, P + C)
    if _can_share_prompts(model, batch):
        logits = _shared_prompt_logits(model, batch, c)
    else:
        logits = model(
            input_ids=ids,
            attention_mask=batch["attention_mask"],
            position_ids=batch["position_ids"],
            use_cache=False,
            logits_to_keep=c + 1,
        ).logits[:, :-1]  # (B, C, V): t predicts t + 1
    logits = logits.float() / temperature
    targets = ids[:, -c:].unsqueeze(-1)  # (B, C, 1)
    lse = logits.logsumexp(-1)  # (B, C)
    logps = logits.gather(-1, targets).squeeze(-1) - lse
    ent = None
    if entropy:
        with torch.no_grad():
            ent = lse - (logits.softmax(-1) * logits).sum(-1)
    return logps, ent


def _can_share_prompts(model, batch: dict[str, torch.Tensor]) -> bool:
    """Rows repeat a prompt, the model keeps a KV cache in this pass (activation checkpointing drops it when
    gradients flow), and it is not FSDP2-sharded (each forward gathers the weights with the other ranks, and
    their rows repeat prompts differently)."""
    from aura.distributed import strategy_of

    rows = batch.get("prompt_rows")
    if rows is None or rows.numel() == batch["input_ids"].shape[0]:
        return False
    if strategy_of(model) == "fsdp":  # two forwards on some ranks, one on others: their all-gathers would not pair
        return False
    if torch.is_grad_enabled() and model.training:
        return not any(getattr(m, "gradient_checkpointing", False) is True for m in model.modules())
    return True


def _shared_prompt_logits(model, batch: dict[str, torch.Tensor], c: int) -> torch.Tensor:
    """The (B, C, V) logits of the completion positions, each distinct prompt run once.

    ``prompt_rows`` (U,) is the first row of each distinct prompt, ``prompt_of_row`` (B,) each row's prompt.
    The U prompts run first, keeping their keys and values; every row takes its prompt's cache (an index,
    so gradients flow back into the one prompt pass) and the logits of its last prompt token, then the B
    completions run on top. The same computation as the whole rows, up to float rounding, with the prompt
    tokens computed U times instead of B (GRPO: once per group of G): ``tests/test_grpo_shared_prompt.py``
    checks log-probs and gradients against the whole rows. Under DDP the prompt pass runs on the module inside
    the wrapper, so DDP sees one forward per backward (its all-reduce hooks sit on the parameters, which sum
    both passes' gradients before they fire: ``tests/test_grpo_dist.py``)."""
    from aura.distributed import unwrap
    from aura.inference.sampling import new_cache

    ids, mask, pos = batch["input_ids"], batch["attention_mask"], batch["position_ids"]
    first, of_row = batch["prompt_rows"], batch["prompt_of_row"]
    p = ids.shape[1] - c
    cache, key = new_cache(model)
    prompt_logits = unwrap(model)(
        input_ids=ids[first, :p],
        attention_mask=mask[first, :p],
        position_ids=pos[first, :p],
        use_cache=True,
        logits_to_keep=1,
        **{key: cache},
    ).logits  # (U, 1, V): the last prompt token predicts the first
    prompt_logits = prompt_logits[of_row]
    if c == 1:
        return prompt_logits
    cache.batch_select_indices(of_row)
    logits = model(
        input_ids=ids[:, p : p + c - 1],
        attention_mask=mask[:, : p + c - 1],
        position_ids=pos[:, p : p + c - 1],
        use_cache=True,
        **{key: cache},
    ).logits  # (B, C - 1, V)
    return torch.cat([prompt_logits, logits], dim=1)


def group_advantages(rewards: torch.Tensor, *, num_generations: int, scale: str) -> tuple[torch.Tensor, torch.Tensor]:
    """TRL's advantages of N = groups x G rewards (consecutive rows of a group): reward minus its group's
    mean, divided by the group's (``group``) or the whole batch's (``batch``) standard deviation (Bessel's
    correction) plus 1e-4, or not divided (``none``). Also returns whether each row's std is zero."""
    grouped = rewards.view(-1, num_generations)  # (groups, G)
    mean = grouped.mean(1).repeat_interleave(num_generations)
    if scale == "batch":
        std = rewards.std().expand_as(rewards) if rewards.numel() > 1 else torch.zeros_like(rewards)
    else:  # group (and none, for the zero-std count)
        std = grouped.std(1).repeat_interleave(num_generations) if num_generations > 1 else torch.zeros_like(rewards)
    advantages = rewards - mean
    if scale != "none":
        advantages = advantages / (std + 1e-4)
    return advantages, torch.isclose(std, torch.zeros_like(std))


IS_MAX = 3.0  # a completion whose sampler/trainer importance ratio exceeds this is dropped (TRL's default)


class GRPO:
    """The clipped, optionally KL-regularised policy-gradient loss of GRPO and its variants."""

    name = "grpo"
    # its loss is about 0 by construction (advantages are centred per group): the reward is the number
    headline = (
        Headline("reward", "recompensa media", "mean reward"),
        Headline("reward", "cambio de la recompensa", "reward change", change=True),
    )

    def __init__(
        self,
        *,
        loss_type: str = "dapo",
        epsilon: float = 0.2,
        epsilon_high: float | None = None,
        beta: float = 0.0,
        temperature: float = 1.0,
        max_completion_length: int = 256,
        reward_names: list[str] | tuple[str, ...] = (),
        importance_sampling_level: str = "token",
        tools: bool = False,
    ):
        if loss_type not in LOSS_TYPES or importance_sampling_level not in IS_LEVELS:
            raise ValueError(f"loss_type must be one of {LOSS_TYPES}, importance_sampling_level one of {IS_LEVELS}")
        self.loss_type, self.beta, self.temperature = loss_type, beta, temperature
        self.level = importance_sampling_level
        default_high = CISPO_EPSILON_HIGH if loss_type == "cispo" else epsilon
        self.eps_low, self.eps_high = epsilon, default_high if epsilon_high is None else epsilon_high
        self.max_completion_length = max_completion_length
        self.stat_names = rollout_stat_names(list(reward_names)) + (TOOL_STATS if tools else ())
        self.metric_names = self.stat_names + ("entropy", "clip_ratio") + (("kl",) if beta else ())

    def count(self, batch: dict[str, torch.Tensor]) -> int:
        """Units of a CPU micro-batch (see the module docstring); a row dropped by dynamic sampling
        (``row_kept`` 0) is none."""
        n = int(batch["row_kept"].sum()) if "row_kept" in batch else int(batch["completion_mask"].shape[0])
        if self.loss_type in ("dapo", "cispo"):
            return int(batch["completion_mask"].sum())
        if self.loss_type == "dr_grpo":
            return n * self.max_completion_length
        return n

    def per_token_loss(
        self, logps: torch.Tensor, batch: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(per-token loss (B, C), clipped indicator (B, C), or (B, 1) per completion at sequence level,
        per-token KL (B, C) or None)."""
        old = batch.get("old_logps")
        old = logps.detach() if old is None else old
        advantages = batch["advantages"].to(logps.dtype).unsqueeze(1)  # (B, 1)
        log_ratio = logps - old  # (B, C)
        if self.level == "sequence":  # GSPO: one ratio per completion, its tokens' mean log ratio
            mask = batch["completion_mask"].to(logps.dtype)
            log_ratio = ((log_ratio * mask).sum(1) / mask.sum(1).clamp(min=1)).unsqueeze(1)  # (B, 1)
        ratio = torch.exp(log_ratio)
        if self.loss_type == "cispo":  # the clipped ratio weights log pi's gradient; nothing is dropped
            loss = -torch.clamp(ratio, max=self.eps_high).detach() * advantages * logps
            clipped = (ratio > self.eps_high) & (advantages > 0)
        else:
            clipped_ratio = torch.clamp(ratio, 1 - self.eps_low, 1 + self.eps_high)
            loss = -torch.min(ratio * advantages, clipped_ratio * advantages)
            clipped = ((ratio < 1 - self.eps_low) & (advantages < 0)) | ((ratio > 1 + self.eps_high) & (advantages > 0))
        sampler = batch.get("sampler_logps")
        if sampler is not None:  # another engine sampled: correct its distribution's mismatch (module docstring)
            mask = batch["completion_mask"].to(logps.dtype)  # (B, C)
            weight = torch.exp(((old - sampler.to(logps.dtype)) * mask).sum(1, keepdim=True))  # (B, 1)
            loss = loss * weight.masked_fill(weight > IS_MAX, 0.0)
        kl = None
        if self.beta:
            ref = batch["ref_logps"].to(logps.dtype)
            kl = torch.exp(ref - logps) - (ref - logps) - 1
            loss = loss + self.beta * kl
        return loss, clipped, kl

    def aggregate(self, per_token: torch.Tensor, mask: torch.Tensor, rows=None) -> torch.Tensor:
        """The micro-batch's loss summed over its units (``rows``: the rows that count, all by default)."""
        rows = mask.shape[0] if rows is None else rows
        if self.loss_type == "grpo":
            return ((per_token * mask).sum(1) / mask.sum(1).clamp(min=1)).sum()
        if self.loss_type == "bnpo":
            return (per_token * mask).sum() / mask.sum().clamp(min=1) * rows
        return (per_token * mask).sum()  # dr_grpo, dapo, cispo

    def loss(self, model, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        logps, entropy = completion_logps(model, batch, temperature=self.temperature, entropy=True)
        mask = batch["completion_mask"].to(logps.dtype)  # (B, C)
        per_token, clipped, kl = self.per_token_loss(logps, batch)
        rows = batch["row_kept"].sum() if "row_kept" in batch else mask.shape[0]
        total = self.aggregate(per_token, mask, rows)
        tokens = mask.sum().clamp(min=1)
        # statistics are summed per unit (the loop divides them by the units); no host sync here
        units = (
            mask.sum()
            if self.loss_type in ("dapo", "cispo")
            else rows * (self.max_completion_length if self.loss_type == "dr_grpo" else 1)
        )
        # the clipped share: of the tokens, or of the completions when a ratio is a completion's (as TRL)
        clip_share = (
            (clipped.to(mask.dtype) * mask).sum() / tokens if self.level == "token" else clipped.to(mask.dtype).mean()
        )
        stats = {"entropy": (entropy * mask).sum() / tokens * units, "clip_ratio": clip_share * units}
        if kl is not None:
            stats["kl"] = (kl.detach() * mask).sum() / tokens * units
        if "rollout_stats" in batch:  # the window's own values: a mean over micro-batches, even with no unit left
            for name, value in zip(self.stat_names, batch["rollout_stats"].double().unbind(0)):
                stats[name], stats[name + COUNT] = value, torch.ones((), dtype=torch.float64, device=value.device)
        return total, stats
