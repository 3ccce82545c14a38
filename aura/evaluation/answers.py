"""``aura eval --prompts FILE``: the same fixed prompts answered by each model, greedily, stored in its results.

Each prompt is asked as a user message (the model's chat template, or Aura's plain ``Usuario:/Asistente:``
format for a model without one, as the math task asks its problems), and answered with Aura's batched
sampler (``aura.inference.sampling``: KV cache, greedy, stopped at the model's end of turn or at the plain
format's next ``Usuario:``) for at most ``--max-new-tokens`` tokens. The prompts run in batches of prompts of close
lengths (``aura.inference.decode``: a padded row attends to its own tokens only, so an answer is the one
the prompt gets alone, up to float rounding; tests/test_answers_batched.py checks it). Greedy
decoding makes the answers a fixed point of each model: the pipeline's report card puts them side by side,
stage after stage (base -> SFT -> DPO -> GRPO). ``aura/resources/eval/prompts_es.txt`` is the shipped list.
Torch is imported inside ``answer_prompts``: the report card reads answers (``shown``) without it.

A small model decodes on one CPU thread: one token's forward is a few MFLOP, and on a busy machine the
second OpenMP thread only adds waiting at every barrier (the demo's 3-million-parameter model answered the
four prompts in 84 s on two threads and 6 s on one, 2-core Intel Xeon @ 2.50GHz at load ~12).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

ONE_THREAD_BELOW = 20_000_000  # parameters: a smaller model decodes on one CPU thread
BATCH = 8  # prompts answered together


def read_prompt_file(path: str | Path) -> list[str]:
    """The prompts of a text file (one per non-empty line) or a JSONL file with ``"prompt"``: the same
    reader and messages as ``aura generate --prompts-file``."""
    from aura.inference.generate import read_prompts

    return read_prompts(Path(path))


def answer_prompts(model, tok, prompts: list[str], *, max_new_tokens: int, batch_size: int = BATCH) -> list[dict]:
    """[{"prompt", "answer", "tokens", "chat_template"}] for every prompt, in order (greedy; ``sample_batch``
    runs without gradients), ``batch_size`` prompts of close lengths at a time."""
    import torch

    from aura.evaluation.math_task import prompt_ids
    from aura.evaluation.scorer import model_max_length
    from aura.inference.backends import PLAIN_STOPS, fit_context
    from aura.inference.loading import end_of_turn_ids
    from aura.inference.sampling import SamplingParams, sample_batch

    device = next(model.parameters()).device
    templated = bool(getattr(tok, "chat_template", None))
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    stop_ids = tuple(end_of_turn_ids(tok))
    fitted = []  # (ids, room): within the model's context, as `aura generate` fits a prompt
    for prompt in prompts:  # (its start dropped, said, only if needed)
        ids, room, _ = fit_context(
            lambda _m, p=prompt: torch.tensor([prompt_ids(tok, p)]),
            None,
            max_new_tokens,
            model_max_length(model),
            asked=False,
        )
        fitted.append((ids[0].tolist(), max(1, room)))
    order = sorted(range(len(prompts)), key=lambda i: (fitted[i][1], len(fitted[i][0])))
    new: dict[int, list[int]] = {}
    with _decode_threads(model, device):
        start = 0
        while start < len(order):  # one batch: prompts of one room, at most batch_size of them
            room = fitted[order[start]][1]
            chunk = [i for i in order[start : start + batch_size] if fitted[i][1] == room]
            params = SamplingParams(
                max_new_tokens=room,
                temperature=0.0,
                stop_ids=stop_ids,
                stop_strings=() if templated else tuple(PLAIN_STOPS),
            )
            out = sample_batch(model, [fitted[i][0] for i in chunk], params, pad_id=pad, device=device, tokenizer=tok)
            new.update(zip(chunk, out))
            start += len(chunk)
    return [_answer(tok, prompt, new[i], templated=templated) for i, prompt in enumerate(prompts)]


def _answer(tok, prompt: str, new: list[int], *, templated: bool) -> dict:
    from aura.inference.backends import PLAIN_STOPS

    text = tok.decode(new, skip_special_tokens=True)
    if not templated:
        for stop in PLAIN_STOPS:  # the plain format's next turn is where the answer ends, not part of it
            text = text.split(stop)[0]
    return {"prompt": prompt, "answer": text.strip(), "tokens": len(new), "chat_template": templated}


@contextlib.contextmanager
def _decode_threads(model, device):
    """One intra-op thread while a small model decodes on a CPU (see the module's docstring), restored after."""
    import torch

    if device.type != "cpu" or sum(p.numel() for p in model.parameters()) >= ONE_THREAD_BELOW:
        yield
        return
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


def shown(text: str) -> str:
    """An answer on one line for a table: line breaks as ``⏎``, other control characters (a model can emit
    a terminal's escape code) as ``�``; the JSON keeps the text as generated."""
    import unicodedata

    text = text.replace("\r\n", "\n").replace("\n", " ⏎ ")
    return "".join("�" if unicodedata.category(c) == "Cc" else c for c in text)
