"""Batched sampling with a KV cache: many prompts, many completions each, in one loop (GRPO rollouts, evals).

``sample_batch`` runs ``aura.inference.decode.decode_batch`` (fixed batch shape, preallocated KV cache,
no host sync per token; see that module). ``sample_batch_reference``, the engine before it, left-pads the
prompts, runs each distinct prompt once through the model (prefill, only the last position's logits; GRPO's
G rows of a prompt then share its cache, copied G times), then one token per step for every unfinished row,
reusing the cache. Positions are counted from each row's first real token (``position_ids`` from the
attention mask), so a left-padded row sees the same positions as it would alone, for learned position embeddings (GPT-2) as for RoPE. Rows stop
at an end-of-turn id (kept as the completion's last token, as TRL keeps the EOS) or once a stop string
appears in their text (the completion keeps the token that completes it); finished rows leave the batch
when a quarter of it is done (``Cache.batch_select_indices``), so long stragglers do not pay for the rest.

Sampling: logits / temperature, then top-k, then top-p (nucleus), then one draw; ``temperature == 0`` is
greedy. Logits are fp32 whatever the model's dtype. The draw takes its uniform number either from a
generator (``torch.multinomial``) or, with ``keys``, from a counter-based hash of (the row's key, the
token's index) (splitmix64, inverse CDF): then a completion depends only on its key and the model, not on
which batch, rank or device samples it: GRPO's rollouts give the same completions on 1 or N ranks and
after a resume.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0: off
    stop_ids: tuple[int, ...] = ()
    stop_strings: tuple[str, ...] = ()


def filter_logits(logits: torch.Tensor, *, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """(N, V) fp32 logits -> the sampling distribution's logits (masked entries at -inf)."""
    logits = logits / temperature
    if top_k and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]  # (N, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = sorted_logits.softmax(-1)
        # drop a token once the ones before it already hold top_p of the mass (the first always stays)
        drop = probs.cumsum(-1) - probs > top_p
        logits = logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    return logits


_MASK64 = (1 << 64) - 1


def _signed(x: int) -> int:
    x &= _MASK64
    return x - (1 << 64) if x >= 1 << 63 else x


_GOLDEN, _MIX1, _MIX2 = _signed(0x9E3779B97F4A7C15), _signed(0xBF58476D1CE4E5B9), _signed(0x94D049BB133111EB)


def mix64(z: torch.Tensor) -> torch.Tensor:
    """splitmix64's finaliser on int64 tensors (wrapping products, logical shifts)."""
    z = z + _GOLDEN
    z = (z ^ ((z >> 30) & ((1 << 34) - 1))) * _MIX1
    z = (z ^ ((z >> 27) & ((1 << 37) - 1))) * _MIX2
    return z ^ ((z >> 31) & ((1 << 33) - 1))


def keyed_uniform(keys: torch.Tensor, step: int) -> torch.Tensor:
    """(N,) uniform numbers in [0, 1), a pure function of each row's int64 key and ``step``."""
    z = mix64(mix64(keys) ^ step)
    return ((z >> 11) & ((1 << 53) - 1)).double() / float(1 << 53)


def next_tokens(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None,
                keys: torch.Tensor | None = None, step: int = 0) -> torch.Tensor:
    """(N, V) -> (N,) sampled (or greedy) token ids."""
    logits = logits.float()
    if params.temperature <= 0:
        return logits.argmax(-1)
    probs = filter_logits(logits, temperature=params.temperature, top_k=params.top_k, top_p=params.top_p).softmax(-1)
    if keys is None:
        return torch.multinomial(probs, 1, generator=generator).squeeze(1)
    cdf = probs.double().cumsum(-1)  # (N, V)
    u = keyed_uniform(keys, step).to(cdf.device).unsqueeze(1) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).squeeze(1).clamp(max=probs.shape[-1] - 1)


def _stop_cut(ids: list[int], tokenizer, stops: tuple[str, ...]) -> int | None:
    """Tokens to keep when one of ``stops`` appears in the decoded ``ids`` (None when none does)."""
    text = tokenizer.decode(ids, skip_special_tokens=False)
    if not any(s in text for s in stops):
        return None
    for n in range(1, len(ids) + 1):  # the shortest prefix that already holds a stop string
        if any(s in tokenizer.decode(ids[:n], skip_special_tokens=False) for s in stops):
            return n
    return len(ids)


def new_cache(model):
    """(an empty DynamicCache, the forward's name for it: ``cache`` from transformers 5.24, else
    ``past_key_values``), for a transformers model, possibly inside peft."""
    import inspect

    from transformers import DynamicCache

    inner = getattr(model, "module", model)
    if hasattr(inner, "get_base_model"):
        inner = inner.get_base_model()
    key = "cache" if "cache" in inspect.signature(type(inner).forward).parameters else "past_key_values"
    return DynamicCache(config=inner.config), key


def sample_batch(model, prompts: list[list[int]], params: SamplingParams, *, pad_id: int, device,
                 tokenizer=None, generator: torch.Generator | None = None,
                 keys: list[int] | None = None) -> list[list[int]]:
    """The completion token ids of every prompt (``model`` in eval mode, no gradients), through the
    fixed-shape engine ``aura.inference.decode.decode_batch``.

    ``prompts`` may repeat (GRPO's G completions of a prompt are G rows). A completion ends with its stop
    id, or with the token that completes a stop string, or after ``max_new_tokens`` (truncated).
    ``keys``: one int64 per prompt row for keyed draws (see the module docstring): the same completions as
    ``sample_batch_reference`` for the same keys. Without keys, draws from ``generator`` are taken for every
    row at every step (finished rows keep their slot), so they follow another stream than the reference's.
    """
    from aura.inference.decode import decode_batch

    return decode_batch(model, prompts, params, pad_id=pad_id, device=device, tokenizer=tokenizer,
                        generator=generator, keys=keys)


@torch.no_grad()
def sample_batch_reference(model, prompts: list[list[int]], params: SamplingParams, *, pad_id: int, device,
                           tokenizer=None, generator: torch.Generator | None = None,
                           keys: list[int] | None = None) -> list[list[int]]:
    """The previous engine (a growing DynamicCache, finished rows compacted, one host sync per token), kept
    as the reference of ``sample_batch``'s tests and benchmark.

    ``prompts`` may repeat (GRPO's G completions of a prompt are G rows). A completion ends with its stop
    id, or with the token that completes a stop string, or after ``max_new_tokens`` (truncated).
    ``keys``: one int64 per prompt row for keyed draws (see the module docstring).
    """
    n = len(prompts)
    width = max(len(p) for p in prompts)
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    mask = torch.zeros((n, width), dtype=torch.long)
    for i, p in enumerate(prompts):  # left padding: every row's last prompt token is at the same column
        ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
        mask[i, width - len(p):] = 1
    ids, mask = ids.to(device), mask.to(device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # (N, W)
    cache, key = new_cache(model)  # filled in place by every forward
    place: dict[tuple[int, ...], int] = {}  # each distinct prompt -> its row in the prefill: repeats run once
    of_row = [place.setdefault(tuple(p), len(place)) for p in prompts]
    if len(place) < n:
        first = torch.tensor([of_row.index(u) for u in range(len(place))], device=device)  # (U,)
        ids_p, mask_p, pos_p = ids[first], mask[first], positions[first]
    else:
        ids_p, mask_p, pos_p = ids, mask, positions
    logits = model(input_ids=ids_p, attention_mask=mask_p, position_ids=pos_p, use_cache=True, logits_to_keep=1,
                   **{key: cache}).logits[:, -1]  # (U, V)
    if len(place) < n:  # every row takes a copy of its prompt's cache and logits
        expand = torch.tensor(of_row, device=device)  # (N,)
        cache.batch_select_indices(expand)
        logits = logits[expand]  # (N, V)
    next_pos = positions[:, -1] + 1  # (N,)
    rows = torch.arange(n, device=device)  # which prompt each row of the live batch is
    row_keys = torch.tensor(keys, dtype=torch.long, device=device) if keys is not None else None
    done: list[list[int]] = [[] for _ in range(n)]
    live = [True] * n
    stop_ids = torch.tensor(params.stop_ids or [-1], device=device)
    check_strings = bool(params.stop_strings) and tokenizer is not None
    window = 8 + max(map(len, params.stop_strings), default=0)  # tokens enough to hold any stop string
    for step in range(params.max_new_tokens):
        tok = next_tokens(logits, params, generator, None if row_keys is None else row_keys[rows], step)  # (n_live,)
        ended = torch.isin(tok, stop_ids)
        tok_list, ended_list, row_list = tok.tolist(), ended.tolist(), rows.tolist()  # one host sync per token
        keep = []
        for j, (r, t, end) in enumerate(zip(row_list, tok_list, ended_list)):
            if not live[r]:  # finished, still in the batch until the next compaction
                continue
            done[r].append(t)
            if not end and check_strings:
                tail = done[r][-window:]
                cut = _stop_cut(tail, tokenizer, params.stop_strings)
                if cut is not None:  # keep the completion up to the token that completes the stop string
                    del done[r][len(done[r]) - len(tail) + cut:]
                    end = True
            live[r] = not end
            if not end:
                keep.append(j)
        if not keep or step == params.max_new_tokens - 1:
            break
        mask = torch.cat([mask, torch.ones((mask.shape[0], 1), dtype=mask.dtype, device=device)], dim=1)
        if len(keep) <= 0.75 * len(row_list):  # drop the finished rows from the batch and the cache
            idx = torch.tensor(keep, device=device)
            cache.batch_select_indices(idx)
            tok, mask, next_pos, rows = tok[idx], mask[idx], next_pos[idx], rows[idx]
        logits = model(input_ids=tok[:, None], attention_mask=mask, position_ids=next_pos[:, None], use_cache=True,
                       **{key: cache}).logits[:, -1]
        next_pos = next_pos + 1
    return done
