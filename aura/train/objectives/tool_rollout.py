"""Multi-turn GRPO rollouts with tools (``aura finetune --objective grpo --tools FILE``).

``ToolRolloutSource`` is the ``RolloutSource`` (``aura.train.objectives.rollout``) whose draw goes on after a
tool call, turn after turn (TRL GRPOTrainer's ``tools`` loop, ``_tool_call_loop``):

1. every completion is sampled as usual; the sampler stops a completion at ``</tool_call>`` (a stop string
   ``grpo_setup`` adds) or at the end of its turn;
2. a completion whose latest turn holds ``<tool_call>`` blocks (``aura.inference.tools.parse_tool_calls``) has
   them run in the sandbox (``aura.inference.tools.ToolBox``); the tool turn's tokens (the end of the
   assistant turn, the tool messages, the opening of the next assistant turn, as the chat template renders
   them: ``tool_turn_ids``) are appended to it, and it is sampled again from the whole conversation;
3. up to ``--max-tool-turns`` times. A completion's tokens = model tokens + tool tokens, never more than
   ``--max-completion-length`` in all (as TRL: a tool turn that would pass it is not appended and the
   completion ends there; a continuation is cut at the limit).

``tool_mask`` (0 on the tool turns' tokens, which the model did not generate) multiplies ``completion_mask``:
the loss trains only the model's tokens, and ``--loss-type dapo``'s units count only them. The key of a
continuation is derived from its completion's key and the turn (``turn_key``): a resumed run, and 1 or N
ranks, draw the very same conversations. The rewards read the *final* turn: the text after the last tool
turn (the whole completion when no tool was called); TRL passes the whole conversation, as messages, to a
reward (a difference by design: Aura's built-in rewards read a final answer from text). ``tool_calls`` and
``tool_failures`` (the window's calls and failed calls, all ranks) are logged per step.
"""

from __future__ import annotations

import dataclasses
import hashlib

import torch

from aura.inference.tools import ToolBox, parse_tool_calls, tool_turn_ids
from aura.train.objectives.rollout import RolloutSource


def turn_key(key: int, turn: int) -> int:
    """The sampling key of turn ``turn`` (>= 1) of the completion drawn with ``key``."""
    digest = hashlib.sha256(f"aura-grpo-tool:{key}:{turn}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


class Conversation(list):
    """A completion's token ids (model and tool tokens), with ``tool_mask`` (1 model, 0 tool) and ``final``
    (where its last model turn starts)."""

    def __init__(self, ids, tool_mask=None, final: int = 0):
        super().__init__(ids)
        self.tool_mask = list(tool_mask) if tool_mask is not None else [1] * len(self)
        self.final = final


def converse(
    conversations: list[Conversation],
    prompt_ids: list[list[int]],
    *,
    more,
    tokenizer,
    tools: ToolBox,
    max_turns: int,
    end_of_turn: list[int],
    max_new: int,
    logps: list | None = None,
) -> tuple[int, int]:
    """Go on with each conversation (its first turn sampled from ``prompt_ids``) after its tool calls, up to
    ``max_turns`` times, ``max_new`` tokens in all (the module docstring): ``more(live, prompts, turn, budget)``
    samples the next turn of the ``live`` conversations from their whole ``prompts``, at most ``budget``
    tokens, and returns (their new ids, their log-probs or None). The conversations (and ``logps``) grow in
    place; returns (calls made, calls failed)."""
    calls = failures = 0
    live = list(range(len(conversations)))
    for turn in range(1, max_turns + 1):
        live, made, failed = _call_tools(conversations, logps, live, tokenizer, tools, end_of_turn, max_new)
        calls, failures = calls + made, failures + failed
        if not live:
            break
        budget = [max_new - len(conversations[i]) for i in live]
        new, new_logps = more(live, [prompt_ids[i] + list(conversations[i]) for i in live], turn, max(budget))
        for j, i in enumerate(live):
            ids = list(new[j])[: budget[j]]
            c = conversations[i]
            c.final = len(c)
            c.extend(ids)
            c.tool_mask.extend([1] * len(ids))
            if logps is not None and new_logps is not None:
                logps[i] = list(logps[i]) + list(new_logps[j])[: budget[j]]
    return calls, failures


def _last_turn(conversation, tok) -> str:
    """The text of a conversation's latest model turn (where its tool calls are)."""
    return tok.decode(conversation[conversation.final :], skip_special_tokens=False)


def _call_tools(conversations, logps, live, tok, tools, end_of_turn, max_new) -> tuple[list[int], int, int]:
    """Run the calls of the latest turn of each ``live`` conversation and append their tool turns: (the
    conversations that go on: a call made, and its tool turn within the length limit; calls; failed calls).
    Every conversation's calls go to one ``ToolBox.run`` (its pool of sandboxed processes), results in order."""
    go_on, calls, failures = [], 0, 0
    made = [(i, found) for i in live if (found := parse_tool_calls(_last_turn(conversations[i], tok)))]
    every = iter(tools.run([call for _, found in made for call in found]))  # one pool for the whole turn's calls
    for i, found in made:
        c = conversations[i]
        results = [next(every) for _ in found]
        calls, failures = calls + len(found), failures + sum(not r.ok for r in results)
        closing, suffix = tool_turn_ids(tok, found, results, end_of_turn=end_of_turn)
        if c and c[-1] not in end_of_turn:  # stopped at </tool_call>: the template's end of turn first
            suffix = closing + suffix
        if len(c) + len(suffix) > max_new:
            continue  # no room for the tool turn and an answer: the completion ends here (as TRL)
        c.extend(suffix)
        c.tool_mask.extend([0] * len(suffix))
        if logps is not None:
            logps[i] = list(logps[i]) + [0.0] * len(suffix)
        go_on.append(i)
    return go_on, calls, failures


class ToolRolloutSource(RolloutSource):
    """GRPO rollouts in which the model may call tools (the module docstring)."""

    def __init__(self, prompts: list, *, tools: ToolBox, max_tool_turns: int, end_of_turn: list[int], **kwargs):
        super().__init__(prompts, **kwargs)
        self.tools, self.max_turns, self.end_of_turn = tools, max_tool_turns, list(end_of_turn)
        self.calls, self.failures = 0, 0  # this rank's, in the current window

    def window(self, epoch: int, window: int) -> list[dict]:
        self.calls, self.failures = 0, 0
        batches = super().window(epoch, window)
        totals = self._everyone(torch.tensor([[self.calls], [self.failures]], dtype=torch.float64)).sum(1)
        for b in batches:
            b["rollout_stats"] = torch.cat([b["rollout_stats"], totals])
        return batches

    def _draw(self, rows: list[int], keys: list[int], *, own: bool) -> tuple[list, list | None]:
        completions, logps = super()._draw(rows, keys, own=own)
        conversations = [Conversation(c) for c in completions]

        def more(live: list[int], prompts: list[list[int]], turn: int, budget: int):
            return self._continue(prompts, [turn_key(keys[i], turn) for i in live], budget, own=own)

        calls, failures = converse(
            conversations,
            [self.prompts[r].input_ids for r in rows],
            more=more,
            tokenizer=self.tok,
            tools=self.tools,
            max_turns=self.max_turns,
            end_of_turn=self.end_of_turn,
            max_new=self.sampling.max_new_tokens,
            logps=logps,
        )
        self.calls, self.failures = self.calls + calls, self.failures + failures
        return conversations, logps

    def _continue(self, prompts, keys, budget: int, *, own: bool):
        """The next turn of every live conversation, at most ``budget`` tokens (the sampler's own limit
        lowered for this draw)."""
        full = self.sampling
        self.sampling = dataclasses.replace(full, max_new_tokens=max(1, budget))
        try:
            return self._generate(prompts, keys, own=own)
        finally:
            self.sampling = full

    def _score(self, rows: list[int], completions: list[list[int]]) -> torch.Tensor:
        finals = [c[c.final :] if isinstance(c, Conversation) else c for c in completions]
        return super()._score(rows, finals)

    def _collate(self, rows: list[int], completions: list[list[int]], advantages: list[float], fate: list[int]) -> dict:
        batch = super()._collate(rows, completions, advantages, fate)
        mask = batch["completion_mask"]  # (B, C)
        for i, c in enumerate(completions):
            if isinstance(c, Conversation) and 0 in c.tool_mask:
                mask[i, : len(c)] *= torch.tensor(c.tool_mask, dtype=mask.dtype)
        return batch
