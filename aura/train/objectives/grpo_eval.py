"""GRPO's validation reward (``--val-fraction`` > 0): the mean reward of greedy completions of the validation
prompts, every ``--eval-interval`` steps (else once per epoch); with ``--tools`` the completions go on after
their tool calls as in training (``aura.train.objectives.tool_rollout.converse``) and the rewards read the
final turn."""

from __future__ import annotations

import dataclasses


class RewardEvaluator:
    """The mean reward (and each reward's) of greedy completions of the validation prompts (all ranks); with
    ``tools`` (``converse``'s tools, max_turns and end_of_turn) each completion goes on after its tool calls as
    in training, and the rewards read its final turn."""

    def __init__(
        self,
        prompts: list,
        *,
        model,
        rewards,
        tokenizer,
        sampling,
        batch_size: int,
        interval: int,
        limit: int = 0,
        tools: dict | None = None,
    ):
        self.prompts = prompts[:limit] if limit else prompts
        self.model, self.rewards, self.tok, self.batch_size, self.interval = (
            model,
            rewards,
            tokenizer,
            batch_size,
            interval,
        )
        self.sampling = dataclasses.replace(sampling, temperature=0.0)
        self.tools = tools
        self.names = ("val_reward",) + tuple(f"val_reward/{n}" for n in rewards.names)

    def __call__(self, model, *, dist) -> dict[str, float]:
        import torch

        from aura.distributed import whole_weights

        mine = self.prompts[dist.rank :: dist.world_size]
        sums = torch.zeros(len(self.rewards.rewards) + 1, dtype=torch.float64)
        with whole_weights(self.model):  # FSDP2: each rank samples its own lengths and turns, no collective inside
            completions = [
                ids
                for start in range(0, len(mine), self.batch_size)
                for ids in self.complete(
                    [p.input_ids for p in mine[start : start + self.batch_size]], device=dist.device
                )
            ]
        for start in range(0, len(mine), self.batch_size):
            chunk = mine[start : start + self.batch_size]
            for p, ids in zip(chunk, completions[start : start + self.batch_size]):
                ids = ids[getattr(ids, "final", 0) :]  # after the last tool turn
                text = self.tok.decode(ids, skip_special_tokens=True)
                scores = [
                    s[0]
                    for s in self.rewards.scores(
                        prompt_text=p.item.text,
                        prompt_messages=p.item.messages,
                        where=p.item.where,
                        completions=[text],
                        completion_ids=[ids],
                        fields={**p.item.fields, "answer": p.item.answer},
                    )
                ]
                sums[0] += sum(r.weight * s for r, s in zip(self.rewards.rewards, scores))
                sums[1:] += torch.tensor(scores, dtype=torch.float64)
        count = torch.tensor([float(len(mine))], dtype=torch.float64)
        if dist.is_distributed:
            sums = dist.all_reduce(sums.to(dist.comm_device), "sum").cpu()
            count = dist.all_reduce(count.to(dist.comm_device), "sum").cpu()
        values = (sums / count.clamp(min=1)).tolist()
        return dict(zip(self.names, values))

    def complete(self, prompt_ids: list[list[int]], *, device) -> list[list[int]]:
        """The greedy completions of ``prompt_ids``, through the tool calls when there are tools."""
        from aura.inference.sampling import sample_batch

        def sample(prompts: list[list[int]], sampling) -> list[list[int]]:
            return sample_batch(
                self.model, prompts, sampling, pad_id=self.tok.pad_token_id, device=device, tokenizer=self.tok
            )

        completions = sample(prompt_ids, self.sampling)
        if self.tools is None:
            return completions
        from aura.train.objectives.tool_rollout import Conversation, converse

        conversations = [Conversation(c) for c in completions]

        def more(live, prompts, turn, budget):
            return sample(prompts, dataclasses.replace(self.sampling, max_new_tokens=max(1, budget))), None

        converse(
            conversations,
            prompt_ids,
            more=more,
            tokenizer=self.tok,
            max_new=self.sampling.max_new_tokens,
            **self.tools,
        )
        return conversations


def evaluators(cfg, tok, model, val_ex: list, source, *, steps_per_epoch: int) -> list:
    """The validation-reward evaluator (none without validation prompts)."""
    if not val_ex:
        return []
    limit = cfg.eval_batches * cfg.batch_size if cfg.eval_batches else 0
    return [
        RewardEvaluator(
            val_ex,
            model=model,
            rewards=source.rewards,
            tokenizer=tok,
            sampling=source.sampling,
            batch_size=cfg.batch_size,
            interval=cfg.eval_interval or steps_per_epoch,
            limit=limit,
            tools=dict(tools=source.tools, max_turns=source.max_turns, end_of_turn=source.end_of_turn)
            if cfg.tools
            else None,
        )
    ]
