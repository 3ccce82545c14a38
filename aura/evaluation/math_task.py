"""``aura_es_matematicas``: the exact-answer math task of ``aura eval --suite aura-es`` (generation, not choices).

The items are the test split of Aura's Spanish math set (``aura/resources/math_es/test.jsonl``, written by
``scripts/build_math_es.py``; GRPO trains on the train split). Each problem is asked as a user message
(the model's chat template, or Aura's plain ``Usuario:/Asistente:`` format for a model without one), the
model answers greedily with Aura's batched sampler (KV cache, up to ``MAX_NEW_TOKENS`` tokens, stopped at
its end of turn), and the answer counts when its final number equals the reference by value (after
``Respuesta:`` or, without it, the last number; ``12,5`` = ``12.5``): the ``exact-answer`` reward's rule
(``aura.data.rewards``). Metric ``exact_match``, with its standard error.
"""

from __future__ import annotations

import json

import torch

from aura.data.prompts import MATH_DIR

MATH_TASK = "aura_es_matematicas"
MAX_NEW_TOKENS = 256


def load_problems(limit: int = 0) -> list[dict]:
    """The test split's problems ({"id", "prompt", "answer", ...}); ``limit`` keeps the first N."""
    rows = [
        json.loads(line) for line in (MATH_DIR / "test.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()
    ]
    return rows[:limit] if limit else rows


def prompt_ids(tok, question: str) -> list[int]:
    from aura.inference.backends import plain_chat_prompt

    messages = [{"role": "user", "content": question}]
    if getattr(tok, "chat_template", None):
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return tok(text, add_special_tokens=False)["input_ids"]
    return tok(plain_chat_prompt(messages))["input_ids"]


def score_answers(completions: list[str], answers: list) -> int:
    """How many completions give the reference answer."""
    from aura.data.rewards import answers_match, final_answer

    return sum(answers_match(final_answer(c), a) for c, a in zip(completions, answers))


@torch.no_grad()
def math_row(model, tok, *, limit: int = 0, batch_size: int = 16, max_new_tokens: int = MAX_NEW_TOKENS) -> dict:
    """The task's result row: {"task", "metric": "exact_match", "value", "stderr", "n", "items"} (each
    problem's id and 1 or 0)."""
    from aura.evaluation.scorer import mean_stderr, model_max_length
    from aura.inference.backends import PLAIN_STOPS
    from aura.inference.loading import end_of_turn_ids
    from aura.inference.sampling import SamplingParams, sample_batch

    problems = load_problems(limit)
    device = next(model.parameters()).device
    templated = bool(getattr(tok, "chat_template", None))
    encoded = [prompt_ids(tok, p["prompt"]) for p in problems]
    room = max(1, model_max_length(model) - max(map(len, encoded)))
    params = SamplingParams(
        max_new_tokens=min(max_new_tokens, room),
        temperature=0.0,
        stop_ids=tuple(end_of_turn_ids(tok)),
        stop_strings=() if templated else tuple(PLAIN_STOPS),
    )
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    hits = [0] * len(problems)
    order = sorted(range(len(problems)), key=lambda i: len(encoded[i]))  # similar lengths batch together
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        out = sample_batch(model, [encoded[i] for i in chunk], params, pad_id=pad, device=device, tokenizer=tok)
        texts = [tok.decode(ids, skip_special_tokens=True) for ids in out]
        for i, text in zip(chunk, texts):
            hits[i] = score_answers([text], [problems[i]["answer"]])
    n = len(problems)
    return {
        "task": MATH_TASK,
        "metric": "exact_match",
        "value": sum(hits) / n,
        "stderr": mean_stderr(sum(hits), n),
        "n": n,
        "items": {"ids": [str(p["id"]) for p in problems], "scores": hits},
    }
