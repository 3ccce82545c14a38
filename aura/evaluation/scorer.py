"""Aura's batched log-likelihood scorer for multiple-choice tasks (the aura-es suite).

It computes what lm-evaluation-harness's Hugging Face backend computes, request for request: the same
tokenisation (``tokenizer.encode`` of the context and of context + continuation, the continuation's tokens
being what follows the context's; an empty context becomes the BOS/EOS token), the same left truncation
to the model's context, the same metrics (``acc``: the choice with the highest summed log-probability;
``acc_norm``: the same divided by the choice's length in characters; ties go to the first choice; stderr
of the mean with n-1). What differs is the cost: the context of a document is run once and its KV cache
is shared by all its choices, and documents whose contexts have the same length run as one batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from aura.evaluation.suite import Doc, Task


@dataclass
class Encoded:
    """One document as token ids: the shared context and one continuation per choice."""

    context: list[int]
    continuations: list[list[int]]


def prefix_token_id(tok) -> int:
    return tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id


def _encode(tok, text: str, prefix_text: str) -> list[int]:
    if prefix_text and text.startswith(prefix_text):  # lm-eval: no second BOS on a string that has one
        return tok.encode(text, add_special_tokens=False)
    return tok.encode(text)


def encode_pair(tok, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """lm-eval's ``loglikelihood`` tokenisation of one (context, continuation) request."""
    if context == "":
        cont = tok.encode(continuation, add_special_tokens=False)
        prefix = prefix_token_id(tok)
        return ([prefix], cont) if prefix != cont[0] else (cont[:1], cont[1:])
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces:  # trailing spaces of the context belong to the continuation
        context, continuation = context[:-n_spaces], context[-n_spaces:] + continuation
    prefix_text = tok.decode([prefix_token_id(tok)])
    whole = _encode(tok, context + continuation, prefix_text)
    ctx = _encode(tok, context, prefix_text)
    return ctx, whole[len(ctx) :]


def encode_doc(tok, task: Task, doc: Doc, *, max_length: int) -> list[Encoded]:
    """The document's requests: one group when every choice has the same context ids (the usual
    case), else one group per choice."""
    pairs = []
    for context, continuation in task.requests(doc):
        ctx, cont = encode_pair(tok, context, continuation)
        whole = (ctx + cont)[-(max_length + 1) :]  # lm-eval's left truncation of the model input
        pairs.append((whole[: len(whole) - len(cont)], whole[len(whole) - len(cont) :]))
    if all(ctx == pairs[0][0] for ctx, _ in pairs):
        return [Encoded(pairs[0][0], [cont for _, cont in pairs])]
    return [Encoded(ctx, [cont]) for ctx, cont in pairs]


def model_max_length(model) -> int:
    cfg = model.config
    for name in ("max_position_embeddings", "n_positions", "n_ctx", "seq_length"):
        value = getattr(cfg, name, None)
        if value:
            return int(value)
    return 2048


@torch.no_grad()
def loglikelihoods(model, encoded: list[Encoded], *, batch_size: int = 16) -> list[list[float]]:
    """Summed log-probability of every continuation, in the order of ``encoded`` and its choices.

    Items with the same number of choices are sorted by context length and run ``batch_size`` at a time:
    one forward pass over the contexts, left-padded (B, Tc), builds the KV cache, which is repeated for
    every choice; one pass over the continuations (B*k, W), padded on the right (a causal model's real
    tokens never see the padding after them). Explicit position ids keep every row where it would be
    unpadded, so learned absolute positions (GPT-2) score as without padding.
    """
    device = next(model.parameters()).device
    out: list[list[float] | None] = [None] * len(encoded)
    by_k: dict[int, list[int]] = {}
    for i, e in enumerate(encoded):
        by_k.setdefault(len(e.continuations), []).append(i)
    for k, members in sorted(by_k.items()):
        members.sort(key=lambda i: len(encoded[i].context))
        for start in range(0, len(members), batch_size):
            idx = members[start : start + batch_size]
            for row, scores in zip(idx, _score_batch(model, [encoded[i] for i in idx], k, device)):
                out[row] = scores
    return out  # type: ignore[return-value]


def _cache_kwarg(model) -> str:
    """The forward's name for a past cache: ``cache`` from transformers 5.24 (``past_key_values`` is
    deprecated there), ``past_key_values`` before. ``model`` may be wrapped by peft."""
    import inspect

    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(type(inner).forward).parameters else "past_key_values"


def _score_batch(model, items: list[Encoded], k: int, device) -> list[list[float]]:
    lengths = torch.tensor([len(e.context) for e in items], device=device)  # (B,)
    tc = int(lengths.max())
    ctx = torch.tensor([[0] * (tc - len(e.context)) + e.context for e in items], device=device)  # (B, Tc)
    ctx_mask = (torch.arange(tc, device=device)[None] >= (tc - lengths)[:, None]).long()  # (B, Tc)
    positions = (ctx_mask.cumsum(1) - 1).clamp(min=0)  # (B, Tc)
    padded = bool((lengths != tc).any())
    first = model(
        input_ids=ctx,
        attention_mask=ctx_mask if padded else None,
        position_ids=positions,
        use_cache=True,
        logits_to_keep=1,
    )  # only the last position's logits: (B, 1, V)
    last = torch.log_softmax(first.logits[:, -1].float(), -1)  # (B, V)
    conts = [c for e in items for c in e.continuations]  # B*k lists
    first_targets = torch.tensor([c[0] for c in conts], device=device)
    scores = last.repeat_interleave(k, 0).gather(1, first_targets[:, None])[:, 0].double()  # (B*k,)
    width = max(len(c) for c in conts) - 1
    if width > 0:
        cache = first.past_key_values
        cache.batch_repeat_interleave(k)
        inp = torch.tensor([c[:-1] + [c[-1]] * (width + 1 - len(c)) for c in conts], device=device)  # (B*k, W)
        pos = lengths.repeat_interleave(k)[:, None] + torch.arange(width, device=device)[None]  # (B*k, W)
        mask = None
        if padded:
            mask = torch.cat(
                [ctx_mask.repeat_interleave(k, 0), torch.ones(len(conts), width, dtype=torch.long, device=device)], 1
            )
        logp = torch.log_softmax(
            model(
                input_ids=inp, attention_mask=mask, position_ids=pos, use_cache=False, **{_cache_kwarg(model): cache}
            ).logits.float(),
            -1,
        )  # (B*k, W, V)
        tgt = torch.tensor([c[1:] + [0] * (width + 1 - len(c)) for c in conts], device=device)  # (B*k, W)
        keep = torch.tensor([[1.0] * (len(c) - 1) + [0.0] * (width + 1 - len(c)) for c in conts], device=device)
        scores += (logp.gather(2, tgt[..., None])[..., 0] * keep).double().sum(1)
    scores = scores.cpu()
    return [scores[r * k : (r + 1) * k].tolist() for r in range(len(items))]


def choice_scores(model, tok, task: Task, *, batch_size: int = 16, docs=None) -> list[list[float]]:
    """Per document, the summed log-probability of each choice."""
    docs = task.docs if docs is None else docs
    max_length = model_max_length(model)
    encoded, owner = [], []
    for d, doc in enumerate(docs):
        for e in encode_doc(tok, task, doc, max_length=max_length):
            encoded.append(e)
            owner.append(d)
    flat = loglikelihoods(model, encoded, batch_size=batch_size)
    per_doc: list[list[float]] = [[] for _ in docs]
    for d, scores in zip(owner, flat):
        per_doc[d] += scores
    return per_doc


def _argmax(values: list[float]) -> int:
    return max(range(len(values)), key=lambda i: (values[i], -i))  # ties: the first, like numpy


def correct_counts(task: Task, scores: list[list[float]], docs=None) -> tuple[int, int]:
    """(acc hits, acc_norm hits) of the documents ``scores`` belongs to."""
    docs = task.docs if docs is None else docs
    acc = norm = 0
    for doc, s in zip(docs, scores):
        acc += _argmax(s) == doc.gold
        norm += _argmax([v / len(c) for v, c in zip(s, doc.choices)]) == doc.gold
    return acc, norm


def mean_stderr(hits: int, n: int) -> float:
    if n < 2:
        return float("nan")
    p = hits / n
    return math.sqrt(p * (1 - p) * n / (n - 1) / n)


def task_result(task: Task, acc_hits: int, norm_hits: int, n: int) -> dict:
    return {
        "task": task.name,
        "n": n,
        "acc": acc_hits / n,
        "acc_stderr": mean_stderr(acc_hits, n),
        "acc_norm": norm_hits / n,
        "acc_norm_stderr": mean_stderr(norm_hits, n),
    }


def item_hits(task: Task, scores: list[list[float]]) -> tuple[list[int], list[int]]:
    """Per document, 1 when ``acc`` (and ``acc_norm``) picks the right choice, else 0."""
    acc = [int(_argmax(s) == doc.gold) for doc, s in zip(task.docs, scores)]
    norm = [int(_argmax([v / len(c) for v, c in zip(s, doc.choices)]) == doc.gold) for doc, s in zip(task.docs, scores)]
    return acc, norm


def score_suite(model, tok, tasks: list[Task], *, batch_size: int = 16) -> list[dict]:
    """Each task's result, with its per-item hits (``ids``, ``acc_items``, ``acc_norm_items``: what a paired
    comparison of two models reads, ``aura.evaluation.significance``)."""
    results = []
    for task in tasks:
        acc, norm = item_hits(task, choice_scores(model, tok, task, batch_size=batch_size))
        results.append(
            {
                **task_result(task, sum(acc), sum(norm), len(task.docs)),
                "ids": [d.id for d in task.docs],
                "acc_items": acc,
                "acc_norm_items": norm,
            }
        )
    return results
