"""``aura generate --prompts-file`` on a transformers model: its prompts run in batches through Aura's engine
(``HFEngine.batch``): greedy answers equal to each prompt's own streamed answer (transformers' ``generate``), in
fewer forward passes; sampled answers that depend on the seed and the prompt's place, not on the batch."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

PROMPTS = ["Hola, ¿qué tal?", "El pingüino 🐧 de Logroño", "Érase una vez", "Dos", "¿Qué hora es en Madrid ahora?"]


@pytest.mark.parametrize("chat", [True, False], ids=["chat", "text"])
def test_batched_prompts_answer_as_streamed_one_by_one_in_fewer_forwards(tiny_zoo, chat):
    from aura.inference.backends import Sampling, open_engine

    engine = open_engine(str(tiny_zoo["llama"]))
    greedy = Sampling(max_new_tokens=10, temperature=0.0)
    chats = [[{"role": "user", "content": p}] for p in PROMPTS] if chat else None
    calls = []
    hook = engine.model.register_forward_hook(lambda *_: calls.append(1))
    streamed = []
    for i, p in enumerate(PROMPTS):
        out: list = []
        for _ in engine.stream(prompt=p, messages=None if chats is None else chats[i], sampling=greedy, out=out):
            pass
        streamed.append(out[0])
    one_by_one, calls[:] = len(calls), []
    batched: dict[int, object] = {}
    for chunk, results, seconds in engine.batch(PROMPTS, chats=chats, sampling=greedy):
        assert seconds > 0
        batched.update(zip(chunk, results))
    hook.remove()
    assert [batched[i] for i in range(len(PROMPTS))] == streamed
    assert len({r.text for r in streamed}) > 1
    assert len(calls) * 3 <= one_by_one


def test_sampled_batches_draw_per_prompt_keys(tiny_zoo):
    from aura.inference.backends import Sampling, open_engine

    engine = open_engine(str(tiny_zoo["llama"]))
    sampling = Sampling(max_new_tokens=12, temperature=1.0, top_k=0, top_p=1.0, seed=3)

    def answers(batch_size: int, seed: int = 3) -> list[str]:
        got: dict[int, str] = {}
        for chunk, results, _ in engine.batch(
            PROMPTS[:3] * 2, chats=None, batch_size=batch_size, sampling=Sampling(**{**sampling.__dict__, "seed": seed})
        ):
            got.update((i, r.text) for i, r in zip(chunk, results))
        return [got[i] for i in range(6)]

    together = answers(16)
    assert together == answers(1)  # a prompt's draws do not depend on its batch
    assert together[:3] != together[3:]  # the same prompt at another place draws again
    assert answers(16, seed=4) != together
