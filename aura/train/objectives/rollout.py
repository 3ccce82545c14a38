"""GRPO rollouts: the loop's batch source that samples completions, scores them and computes advantages.

``RolloutSource`` is a ``BatchSource`` (``aura.train.train_state``) like the SFT one, so GRPO runs on the one
training loop with its checkpoints, signals and resume. The work is organised as TRL's GRPOTrainer's:

* A *window* is one optimizer step: ``--batch-size`` completions per micro-batch x
  ``--gradient-accumulation-steps`` micro-batches x ranks. It holds ``window / G`` prompts (G =
  ``--num-generations``), each repeated G times in a row; rank r takes the r-th slice of that list, so
  a prompt's group may be spread over ranks. An epoch goes once over the prompts in an order fixed by
  the seed and the epoch (its last window filled from the start, as ``DistributedSampler`` does).
* On the first micro-batch of a window, this rank samples its completions in one batch
  (``aura.inference.decode``, Aura's fixed-shape engine, or vLLM, model in eval mode), scores them with
  every reward, shares (reward, length) rows with all ranks (one all-reduce) and computes the
  group-normalised advantages of the whole window (``aura.train.objectives.grpo.group_advantages``); with ``--beta`` > 0
  it also computes
  the reference's log-probabilities (the base with the adapter disabled, or a frozen copy).
* Every completion has a key, a hash of (seed, epoch, window, its index in the window), and its tokens
  are drawn from that key alone (``aura.inference.sampling``, keyed draws): a resumed run samples the
  very same completions, and 1 or N ranks sample the same ones for the same window.

Statistics of the window (reward mean and std, per reward, the groups with a reward signal, completion length,
truncated share, rollout seconds and the previous step's update seconds) travel with every micro-batch
(``rollout_stats``). A group whose G rewards are all equal has zero advantages: it teaches nothing. The run's
totals (``groups``, ``groups_with_signal``, ``groups_dropped``, ``groups_resampled``) are checkpointed with the
source, so a resumed run counts on.

DAPO's sampling rules (Yu et al. 2025), each optional:

* ``--dynamic-sampling resample``: after the rewards are shared, every group without a signal is sampled again
  with another prompt (drawn with a seed of (seed, epoch, window, round, group); its completions' keys carry the
  round), up to ``--resample-rounds`` times; what is still silent then is dropped. ``drop``: dropped at once.
  A dropped group's rows keep their place in the micro-batches but leave the loss and its units (``row_kept``,
  ``grpo.GRPO.count``): the step is the one the window without them would give (DAPO filters the batch);
* ``--mask-truncated-completions`` (TRL's option): a completion cut at ``--max-completion-length`` without a
  stop token counts in its group's advantage but none of its tokens is trained;
* the ``overlong`` reward (``aura.data.rewards``): DAPO's soft punishment of completions near the limit.

The log says what they did per step: ``groups_resampled`` (resamplings), ``groups_dropped`` and
``completions_masked`` (a share).
"""

from __future__ import annotations

import contextlib
import hashlib
import random
import time

import torch

from aura.core.errors import AuraError
from aura.core.i18n import Messages
from aura.train.lora_views import adapters_off, cast_view, compute_view, merged_view
from aura.train.objectives.grpo import completion_logps, group_advantages

M = Messages(
    "rollout",
    {
        "resume_mismatch": (
            "El checkpoint se hizo con otros datos de GRPO ({field}: {saved}; ahora: {now}). Reanuda "
            "con los mismos --data, --num-generations y --seed.",
            "The checkpoint was made with other GRPO data ({field}: {saved}; now: {now}). Resume with "
            "the same --data, --num-generations and --seed.",
        ),
    },
)


COMPUTE_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def row_key(seed: int, epoch: int, window: int, row: int, attempt: int = 0) -> int:
    """The sampling key of completion ``row`` of ``window`` (a non-negative int64); ``attempt`` > 0: its
    resampling round (``--dynamic-sampling resample``)."""
    again = f":{attempt}" if attempt else ""
    digest = hashlib.sha256(f"aura-grpo:{seed}:{epoch}:{window}:{row}{again}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


class RolloutSource:
    """Resumable, rank-aware GRPO micro-batches (see the module docstring)."""

    def __init__(
        self,
        prompts: list,
        *,
        policy,
        rewards,
        tokenizer,
        sampling,
        num_generations: int,
        batch_size: int,
        accumulation: int,
        scale_rewards: str,
        temperature: float,
        beta: float,
        dist,
        precision: str,
        seed: int = 0,
        reference=None,
        generate=None,
        mask_truncated: bool = False,
        dynamic_sampling: str = "off",
        resample_rounds: int = 3,
    ):
        """``policy``: the model being trained, unwrapped (peft model or plain); ``reference``: a frozen
        copy, or None (the policy with its adapter disabled); ``generate``: (prompt id lists, their keys) ->
        completion id lists, default Aura's sampler; ``sampling``: ``aura.inference.sampling.SamplingParams``;
        ``mask_truncated``, ``dynamic_sampling`` and ``resample_rounds``: DAPO's rules (module docstring)."""
        self.prompts, self.policy, self.rewards, self.tok = prompts, policy, rewards, tokenizer
        self.sampling, self.G, self.batch_size, self.accum = sampling, num_generations, batch_size, accumulation
        self.scale, self.temperature, self.beta, self.reference = scale_rewards, temperature, beta, reference
        self.dist, self.precision, self.seed = dist, precision, seed
        self.mask_truncated, self.dynamic, self.rounds = mask_truncated, dynamic_sampling, resample_rounds
        self.generate = generate or self._sample
        self.per_rank = batch_size * accumulation  # completions per window on this rank
        total = self.per_rank * dist.world_size
        if total % num_generations:
            raise ValueError("batch_size x accumulation x world_size must be a multiple of num_generations")
        self.prompts_per_window = total // num_generations
        self.windows_per_epoch = -(-len(prompts) // self.prompts_per_window)
        self.batches_per_epoch = self.windows_per_epoch * accumulation  # micro-batches per epoch on this rank
        self.rows = prompts  # what the fine-tuning setup measures (tokens per row)
        self.epoch, self.position = 0, 0
        self._buffer: list[dict] = []
        self._ready_at: float | None = None  # when the last window's rollout finished (update time)
        self.groups, self.groups_with_signal = 0, 0  # the run's totals (module docstring)
        self.groups_dropped, self.groups_resampled = 0, 0

    # -- BatchSource ---------------------------------------------------------------------------------

    def next_batch(self) -> dict | None:
        if self.position >= self.batches_per_epoch:
            return None
        if not self._buffer or self.position % self.accum == 0:
            self._buffer = self.window(self.epoch, self.position // self.accum)[self.position % self.accum :]
        self.position += 1
        return self._buffer.pop(0)

    def start_epoch(self, epoch: int) -> None:
        self.epoch, self.position, self._buffer = epoch, 0, []

    def state_dict(self) -> dict:
        return {
            "epoch": self.epoch,
            "position": self.position,
            "seed": self.seed,
            "prompts": len(self.prompts),
            "num_generations": self.G,
            "batch_size": self.batch_size,
            "world_size": self.dist.world_size,
            "groups": self.groups,
            "groups_with_signal": self.groups_with_signal,
            "groups_dropped": self.groups_dropped,
            "groups_resampled": self.groups_resampled,
        }

    def load_state_dict(self, state: dict) -> None:
        for key, now in (("seed", self.seed), ("prompts", len(self.prompts)), ("num_generations", self.G)):
            if state.get(key, now) != now:
                raise AuraError(M("resume_mismatch", field=key, saved=state.get(key), now=now))
        self.epoch = int(state["epoch"])
        self.groups, self.groups_with_signal = int(state.get("groups", 0)), int(state.get("groups_with_signal", 0))
        self.groups_dropped = int(state.get("groups_dropped", 0))
        self.groups_resampled = int(state.get("groups_resampled", 0))
        position = int(state["position"])
        if state.get("world_size") != self.dist.world_size or state.get("batch_size") != self.batch_size:
            # another layout: resume at the same number of windows done
            position = position // self.accum * self.accum
        self.position, self._buffer = min(position, self.batches_per_epoch), []

    # -- One window ----------------------------------------------------------------------------------

    def order(self, epoch: int) -> list[int]:
        """Prompt indices of ``epoch``, padded to whole windows by repeating the start."""
        order = list(range(len(self.prompts)))
        random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
        need = self.windows_per_epoch * self.prompts_per_window
        return (order * (-(-need // len(order))))[:need]

    def my_rows(self, epoch: int, window: int) -> list[int]:
        """The prompt index of each completion this rank samples in ``window``."""
        start = window * self.prompts_per_window
        chosen = self.order(epoch)[start : start + self.prompts_per_window]
        rows = [p for p in chosen for _ in range(self.G)]
        r = self.dist.rank
        return rows[r * self.per_rank : (r + 1) * self.per_rank]

    def _sample(self, prompt_ids: list[list[int]], keys: list[int]):
        return sample_completions(
            self.policy,
            prompt_ids,
            keys,
            sampling=self.sampling,
            tokenizer=self.tok,
            precision=self.precision,
            device=self.dist.device,
        )

    @torch.no_grad()
    def window(self, epoch: int, window: int) -> list[dict]:
        """The micro-batches of ``window``: sampled, scored, with advantages (and reference log-probs)."""
        from aura.distributed import whole_weights
        from aura.train.optim.step_engine import autocast_context

        started = time.perf_counter()
        update_s = started - self._ready_at if self._ready_at is not None else 0.0
        rows = self.my_rows(epoch, window)
        first = self.dist.rank * self.per_rank  # this rank's first row in the window
        keys = [row_key(self.seed, epoch, window, first + i) for i in range(len(rows))]
        was_training = self.policy.training
        self.policy.eval()
        own = self.generate == self._sample  # an external engine (vLLM) keeps its own dtypes: no autocast
        try:
            # FSDP2: gathered once for every draw of the window (a rank may draw more turns or groups than another)
            with whole_weights(self.policy) if own else contextlib.nullcontext():
                completions, sampler_logps = self._draw(rows, keys, own=own)
                with autocast_context(self.precision, self.dist.device):
                    scores = self._score(rows, completions)  # (R, n) this rank's raw rewards
                resampled = 0
                for attempt in range(1, self.rounds + 1 if self.dynamic == "resample" else 1):
                    again = self._groups_to_resample(epoch, window, scores, attempt)
                    if not again:
                        break
                    resampled += len(again)
                    self._resample(epoch, window, attempt, again, rows, completions, sampler_logps, scores, own=own)
            with autocast_context(self.precision, self.dist.device):
                advantages, stats, kept = self._advantages(scores, completions, resampled=resampled)
                batches = [
                    self._collate(
                        rows[i : i + self.batch_size],
                        completions[i : i + self.batch_size],
                        advantages[i : i + self.batch_size],
                        kept[i : i + self.batch_size],
                    )
                    for i in range(0, len(rows), self.batch_size)
                ]
                if sampler_logps is not None:
                    for i, b in enumerate(batches):
                        b["sampler_logps"] = pad_rows(
                            sampler_logps[i * self.batch_size : (i + 1) * self.batch_size],
                            width=b["completion_mask"].shape[1],
                        )
                if self.beta:
                    for b in batches:
                        b["ref_logps"] = self._reference_logps(b)
        finally:
            if was_training:
                self.policy.train()
        self._ready_at = time.perf_counter()
        stats += [self._ready_at - started, update_s]
        for b in batches:
            b["rollout_stats"] = torch.tensor(stats, dtype=torch.float64)
        return batches

    def _draw(self, rows: list[int], keys: list[int], *, own: bool) -> tuple[list, list | None]:
        """(completions, the sampler's log-probs or None) of ``rows`` drawn with ``keys``."""
        return self._generate([self.prompts[p].input_ids for p in rows], keys, own=own)

    def _generate(self, prompt_ids: list[list[int]], keys: list[int], *, own: bool) -> tuple[list, list | None]:
        """(completions, the sampler's log-probs or None) of ``prompt_ids`` drawn with ``keys``."""
        from aura.train.optim.step_engine import autocast_context

        with autocast_context(self.precision, self.dist.device) if own else contextlib.nullcontext():
            sampled = self.generate(prompt_ids, keys)
        # an external engine may also return its log-probs of the sampled tokens (GRPO's IS correction)
        completions, sampler_logps = sampled if isinstance(sampled, tuple) else (sampled, None)
        return list(completions), None if sampler_logps is None else list(sampler_logps)

    def _everyone(self, mine: torch.Tensor) -> torch.Tensor:
        """(k, n) values of this rank's rows -> (k, n x world) of the whole window (one all-reduce)."""
        n, world, rank = mine.shape[1], self.dist.world_size, self.dist.rank
        everyone = torch.zeros((mine.shape[0], n * world), dtype=torch.float64)
        everyone[:, rank * n : (rank + 1) * n] = mine
        if self.dist.is_distributed:
            everyone = self.dist.all_reduce(everyone.to(self.dist.comm_device), "sum").cpu()
        return everyone

    def _weighted(self, raw: torch.Tensor) -> torch.Tensor:
        weights = torch.tensor([r.weight for r in self.rewards.rewards], dtype=torch.float64)
        return (raw * weights[:, None]).sum(0)

    def _groups_to_resample(self, epoch: int, window: int, scores: torch.Tensor, attempt: int) -> dict[int, int]:
        """{group of the window: the prompt that replaces it} for every group whose G rewards are all equal
        (the same on every rank: the rewards are shared first). The new prompt is drawn from the whole set
        with a seed of (seed, epoch, window, attempt, group): a resumed run draws the same."""
        grouped = self._weighted(self._everyone(scores)).view(-1, self.G)
        flat = (grouped.amax(1) == grouped.amin(1)).nonzero().flatten().tolist()
        return {
            g: random.Random(f"aura-grpo-resample:{self.seed}:{epoch}:{window}:{attempt}:{g}").randrange(
                len(self.prompts)
            )
            for g in flat
        }

    def _resample(self, epoch, window, attempt, again, rows, completions, sampler_logps, scores, *, own) -> None:
        """Replace, in place, this rank's rows of the groups in ``again`` by new completions of their new prompts."""
        first = self.dist.rank * self.per_rank
        mine = [i for i in range(len(rows)) if (first + i) // self.G in again]
        if not mine:
            return
        for i in mine:
            rows[i] = again[(first + i) // self.G]
        keys = [row_key(self.seed, epoch, window, first + i, attempt) for i in mine]
        new, new_logps = self._draw([rows[i] for i in mine], keys, own=own)
        from aura.train.optim.step_engine import autocast_context

        with autocast_context(self.precision, self.dist.device):
            new_scores = self._score([rows[i] for i in mine], new)
        for j, i in enumerate(mine):
            completions[i] = new[j]
            if sampler_logps is not None and new_logps is not None:
                sampler_logps[i] = new_logps[j]
            scores[:, i] = new_scores[:, j]

    def _score(self, rows: list[int], completions: list[list[int]]) -> torch.Tensor:
        """(rewards, completions) raw scores; every run of completions of one prompt is scored together."""
        scores = torch.zeros((len(self.rewards.rewards), len(rows)), dtype=torch.float64)
        start = 0
        while start < len(rows):
            end = start
            while end < len(rows) and rows[end] == rows[start]:
                end += 1
            item = self.prompts[rows[start]].item
            ids = completions[start:end]
            texts = self.tok.batch_decode(ids, skip_special_tokens=True)
            values = self.rewards.scores(
                prompt_text=item.text,
                prompt_messages=item.messages,
                where=item.where,
                completions=texts,
                completion_ids=ids,
                fields={**item.fields, "answer": item.answer},
            )
            scores[:, start:end] = torch.tensor(values, dtype=torch.float64)
            start = end
        return scores

    def _advantages(
        self, scores: torch.Tensor, completions: list[list[int]], *, resampled: int = 0
    ) -> tuple[list[float], list[float], list[int]]:
        """(this rank's advantages, the window's statistics in ``grpo.rollout_stat_names`` order without the
        two timings, and each of this rank's rows' fate: 0 trained, 1 masked (truncated, under
        ``--mask-truncated-completions``: no token in the loss, still a completion of the mean), 2 dropped (a
        group without signal under ``--dynamic-sampling``: out of the loss and of its units). Rewards,
        lengths and truncation of every rank are shared with one all-reduce."""
        n, rank = scores.shape[1], self.dist.rank
        stops = set(self.sampling.stop_ids)
        lengths = torch.tensor([len(c) for c in completions], dtype=torch.float64)
        truncated = torch.tensor(
            [float(len(c) >= self.sampling.max_new_tokens and (not c or c[-1] not in stops)) for c in completions],
            dtype=torch.float64,
        )
        everyone = self._everyone(torch.cat([scores, lengths[None], truncated[None]]))  # (R + 2, N)
        raw, lengths, truncated = everyone[:-2], everyone[-2], everyone[-1]
        total = self._weighted(raw)  # (N,)
        advantages, zero_std = group_advantages(total, num_generations=self.G, scale=self.scale)
        stats = [total.mean().item(), total.std().item() if total.numel() > 1 else 0.0]
        for row in raw:
            stats += [row.mean().item(), row.std().item() if row.numel() > 1 else 0.0]
        grouped = total.view(-1, self.G)  # (groups, G): a group with a signal has two different rewards
        silent = grouped.amax(1) == grouped.amin(1)
        signal = int((~silent).sum())
        dropped = (
            silent.repeat_interleave(self.G)
            if self.dynamic != "off"
            else torch.zeros_like(silent).repeat_interleave(self.G)
        )
        masked = (truncated > 0) & ~dropped if self.mask_truncated else torch.zeros_like(dropped)
        fate = (masked.long() + 2 * dropped.long())[rank * n : (rank + 1) * n].tolist()
        n_dropped = int(silent.sum()) if self.dynamic != "off" else 0
        self.groups, self.groups_with_signal = self.groups + grouped.shape[0], self.groups_with_signal + signal
        self.groups_dropped, self.groups_resampled = self.groups_dropped + n_dropped, self.groups_resampled + resampled
        stats += [zero_std.double().mean().item(), float(signal), float(resampled), float(n_dropped)]
        stats += [lengths.mean().item(), truncated.mean().item(), masked.double().mean().item()]
        return advantages[rank * n : (rank + 1) * n].tolist(), stats, fate

    def _collate(self, rows: list[int], completions: list[list[int]], advantages: list[float], fate: list[int]) -> dict:
        batch = collate(
            [self.prompts[p].input_ids for p in rows], completions, advantages, pad_id=self.tok.pad_token_id
        )
        if any(fate):
            batch["completion_mask"][torch.tensor([f > 0 for f in fate])] = 0
        if self.dynamic != "off":  # the objective's units: the rows not dropped (grpo.GRPO.count)
            batch["row_kept"] = torch.tensor([float(f < 2) for f in fate], dtype=torch.float32)
        return batch

    def _reference_logps(self, batch: dict) -> torch.Tensor:
        """The reference's completion log-probs (B, C) on the CPU: a frozen copy, or the base with the
        adapter disabled (LoRA/QLoRA: no second copy in memory; without peft's wrappers where
        ``aura.train.lora_views.base_view`` covers the model: the same log-probs bit for bit, sooner)."""
        device_batch = {k: v.to(self.dist.device) for k, v in batch.items()}
        if self.reference is not None:
            model, context = self.reference, contextlib.nullcontext()
        else:
            model, context = self.policy, adapters_off(self.policy)
        with context:
            logps, _ = completion_logps(model, device_batch, temperature=self.temperature)
        return logps.float().cpu()


def sample_completions(policy, prompt_ids: list[list[int]], keys: list[int], *, sampling, tokenizer, precision, device):
    """Keyed completions of ``prompt_ids`` by ``policy`` with Aura's engine (``aura.inference.decode``): each
    completion's tokens come from its key alone, so a resumed run samples the same ones. In fp32 on the CPU
    a LoRA policy samples from its merged weights (``aura.train.lora_views.merged_view``): the same tokens up
    to fp32 rounding, sooner; a model the engine's lean step does not run (``aura.inference.lean``: GPT-2,
    Gemma...) has its linear layers packed for oneDNN as well (``aura.inference.packed``).
    Elsewhere (bf16/fp16, CUDA) it samples from a merged copy in the compute dtype, without peft's wrappers
    or autocast (``compute_view``; a fully fine-tuned policy the lean step runs, from a copy in that dtype:
    ``cast_view``), and returns the sampler's log-probs with the completions when that copy
    is not fp32 (GRPO's truncated importance-sampling correction). An FSDP2-sharded policy samples from its
    whole weights, gathered once for the call (``aura.distributed.whole_weights``): each rank's completions end
    at their own lengths, so no collective may run while they are drawn."""
    from aura.distributed import strategy_of, whole_weights
    from aura.inference.decode import causal_lm, decode_batch
    from aura.inference.lean import covers
    from aura.inference.packed import packed_view

    # no CUDA graphs through FSDP2's hooks: its gathered weights need not keep their addresses from one rollout
    # to the next, which a captured graph assumes (not run on a GPU yet: the conservative path)
    graphs = strategy_of(policy) != "fsdp"
    common = dict(pad_id=tokenizer.pad_token_id, device=device, tokenizer=tokenizer, keys=keys, graphs=graphs)
    with contextlib.ExitStack() as views:
        views.enter_context(whole_weights(policy))  # FSDP2: gathered once, then no collective while sampling
        merged = merged_view(policy, precision=precision, device=device)
        if merged is None:
            dtype = COMPUTE_DTYPES.get(precision, torch.float32)
            view = compute_view(policy, dtype=dtype)
            if view is None and dtype != torch.float32 and _lean_without_autocast(policy, device):
                view = cast_view(policy, dtype=dtype)  # full fine-tuning: a copy in bf16/fp16 for the lean step
            if view is not None:
                views.enter_context(view)
                views.enter_context(torch.autocast(device_type=device.type, enabled=False))
                return decode_batch(policy, prompt_ids, sampling, logps=dtype != torch.float32, **common)
        else:
            views.enter_context(merged)
        packed = None if covers(causal_lm(policy)) else packed_view(policy, precision=precision, device=device)
        if packed is not None:  # with the lean step, packed layers were slower (bench_rollout's fp32 row)
            views.enter_context(packed)
        return decode_batch(policy, prompt_ids, sampling, **common)


def _lean_without_autocast(policy, device) -> bool:
    """Whether the engine's lean step would run ``policy`` once autocast is off (a cast copy pays only there:
    other architectures keep autocast's path, which needs no copy)."""
    from aura.inference.decode import causal_lm
    from aura.inference.lean import covers

    with torch.autocast(device_type=device.type, enabled=False):
        return covers(causal_lm(policy))


def pad_rows(rows: list[list[float]], *, width: int) -> torch.Tensor:
    """Per-token values of each completion, right-padded with 0 to ``width`` (B, width) fp32."""
    out = torch.zeros((len(rows), width), dtype=torch.float32)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r[:width], dtype=torch.float32)
    return out


def collate(prompts: list[list[int]], completions: list[list[int]], advantages: list[float], *, pad_id: int) -> dict:
    """One micro-batch (CPU tensors): left-padded prompts then right-padded completions (``input_ids``,
    ``attention_mask``, ``position_ids`` counted from each row's first token), ``completion_mask``,
    ``advantages``, and for ``grpo.completion_logps`` the first row of each distinct prompt (``prompt_rows``)
    and each row's prompt among them (``prompt_of_row``)."""
    width_p, width_c = max(map(len, prompts)), max(1, max(map(len, completions)))
    n = len(prompts)
    ids = torch.full((n, width_p + width_c), pad_id, dtype=torch.long)
    attention = torch.zeros((n, width_p + width_c), dtype=torch.long)
    completion_mask = torch.zeros((n, width_c), dtype=torch.long)
    for i, (p, c) in enumerate(zip(prompts, completions)):
        ids[i, width_p - len(p) : width_p] = torch.tensor(p, dtype=torch.long)
        attention[i, width_p - len(p) : width_p + len(c)] = 1
        if c:
            ids[i, width_p : width_p + len(c)] = torch.tensor(c, dtype=torch.long)
        completion_mask[i, : len(c)] = 1
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    first: dict[tuple[int, ...], int] = {}  # each distinct prompt -> its first row
    for i, p in enumerate(prompts):
        first.setdefault(tuple(p), i)
    order = {key: j for j, key in enumerate(first)}
    return {
        "input_ids": ids,
        "attention_mask": attention,
        "position_ids": positions,
        "completion_mask": completion_mask,
        "advantages": torch.tensor(advantages, dtype=torch.float32),
        "prompt_rows": torch.tensor(list(first.values()), dtype=torch.long),
        "prompt_of_row": torch.tensor([order[tuple(p)] for p in prompts], dtype=torch.long),
    }
