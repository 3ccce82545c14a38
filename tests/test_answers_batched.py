"""The report's fixed prompts (aura.evaluation.answers) answered in batches through Aura's engine: the same answers
as each prompt alone (greedy), ragged prompts together, in fewer forward passes."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("templated", [True, False], ids=["chat_template", "plain"])
def test_batched_answers_equal_one_at_a_time_in_fewer_forwards(tiny_zoo, templated):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from aura.evaluation.answers import answer_prompts

    tok = AutoTokenizer.from_pretrained(tiny_zoo["tokenizer"])
    if not templated:
        tok.chat_template = None
    model = AutoModelForCausalLM.from_pretrained(tiny_zoo["llama"]).eval()
    prompts = [
        "Hola",
        "¿Cuál es la capital de España?",
        "Escribe un poema corto sobre el mar y la lluvia.",
        "Dos más dos",
        "¿Qué es un gato?",
    ]
    calls = []
    hook = model.register_forward_hook(lambda *_: calls.append(1))
    alone = answer_prompts(model, tok, prompts, max_new_tokens=12, batch_size=1)
    one_by_one, calls[:] = len(calls), []
    batched = answer_prompts(model, tok, prompts, max_new_tokens=12, batch_size=8)
    hook.remove()
    assert batched == alone
    assert [a["prompt"] for a in batched] == prompts
    assert len({a["answer"] for a in batched}) > 1
    assert len(calls) * 3 <= one_by_one  # one batch of 5 prompts: about a fifth of the forward passes
