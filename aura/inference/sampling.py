"""Batched sampling with a KV cache: many prompts, many completions each, in one loop (GRPO rollouts, evals).

``sample_batch`` runs ``aura.inference.decode.decode_batch`` (fixed batch shape, preallocated KV cache,
no host sync per token; see that module). ``sample_batch_reference``, the engine before it, left-pads the
prompts, runs each distinct prompt once through the model (prefill, only the last position's logits; GRPO's
G rows of a prompt then share its cache, copied G times), then one token per step for every unfinished row,
reusing the cache. Positions are counted from each row's first real token (``position_ids`` from the
attention mask), so a left-padded row sees the same positions as it would alone, for learned position embeddings (GPT-2)
as for RoPE. Rows stop
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

import torch

from aura.inference.draws import SamplingParams, filter_logits, keyed_uniform, mix64, next_tokens, stop_cut  # noqa: F401 - re-exported


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


def sample_batch(
    model,
    prompts: list[list[int]],
    params: SamplingParams,
    *,
    pad_id: int,
    device,
    tokenizer=None,
    generator: torch.Generator | None = None,
    keys: list[int] | None = None,
) -> list[list[int]]:
    """The completion token ids of every prompt (``model`` in eval mode, no gradients), through the
    fixed-shape engine ``aura.inference.decode.decode_batch``.

    ``prompts`` may repeat (GRPO's G completions of a prompt are G rows). A completion ends with its stop
    id, or with the token that completes a stop string, or after ``max_new_tokens`` (truncated).
    ``keys``: one int64 per prompt row for keyed draws (see the module docstring): the same completions as
    ``sample_batch_reference`` for the same keys. Without keys, draws from ``generator`` are taken for every
    row at every step (finished rows keep their slot), so they follow another stream than the reference's.
    """
    from aura.inference.decode import decode_batch

    return decode_batch(
        model, prompts, params, pad_id=pad_id, device=device, tokenizer=tokenizer, generator=generator, keys=keys
    )


@torch.no_grad()
def sample_batch_reference(
    model,
    prompts: list[list[int]],
    params: SamplingParams,
    *,
    pad_id: int,
    device,
    tokenizer=None,
    generator: torch.Generator | None = None,
    keys: list[int] | None = None,
) -> list[list[int]]:
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
        ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
        mask[i, width - len(p) :] = 1
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
    logits = model(
        input_ids=ids_p, attention_mask=mask_p, position_ids=pos_p, use_cache=True, logits_to_keep=1, **{key: cache}
    ).logits[:, -1]  # (U, V)
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
                cut = stop_cut(tail, tokenizer, params.stop_strings)
                if cut is not None:  # keep the completion up to the token that completes the stop string
                    del done[r][len(done[r]) - len(tail) + cut :]
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
        logits = model(
            input_ids=tok[:, None], attention_mask=mask, position_ids=next_pos[:, None], use_cache=True, **{key: cache}
        ).logits[:, -1]
        next_pos = next_pos + 1
    return done
