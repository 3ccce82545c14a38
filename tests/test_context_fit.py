"""Generation never runs past the model's context: a GPT-2 (learned positions) trained with a short
--seq-length used to crash with "index out of range" in `aura generate`, `aura chat` and the sample at the
end of `aura pretrain`; now the prompt, the chat's oldest turns or the answer's length give way, and say so."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_aura_here
from tests.evidence import importorskip
from tests.tiny_models import build_gpt2, train_tokenizer

CTX = 64


@pytest.fixture(scope="module")
def short_gpt2(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ctx")
    return build_gpt2(root / "gpt2", train_tokenizer(root / "tok", vocab_size=400), ctx=CTX)


LONG = "Había una vez un rey que vivía en un castillo muy grande, junto al río, y tenía tres hijas muy listas. " * 3


def test_generate_past_the_context_keeps_the_prompts_end_and_caps_the_answer(short_gpt2):
    r = run_aura_here("generate", "--model", short_gpt2, "--prompt", LONG, "--max-new-tokens", "100")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert f"does not fit the model's context ({CTX} tokens): its last {CTX // 2} tokens are used" in r.stderr
    assert f"leaves room for {CTX // 2} new tokens (100 were asked for)" in r.stderr
    assert f"[{CTX // 2} tokens," in r.stdout or f"[{CTX // 2} tokens," in r.stderr
    es = run_aura_here(
        "generate", "--model", short_gpt2, "--prompt", LONG, "--max-new-tokens", "100", env={"AURA_LANG": "es"}
    )
    assert es.returncode == 0 and "no cabe en el contexto del modelo" in es.stderr


def test_default_answer_length_is_fitted_silently_and_only_a_cut_request_is_said(short_gpt2):
    """Issue 25.14: every `aura generate` warned when the prompt plus the default --max-new-tokens (256)
    outgrew the context (by as little as one token): the default is an upper bound, fitted silently."""
    r = run_aura_here("generate", "--model", short_gpt2, "--prompt", "Había una vez", "--temperature", "0")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "context" not in r.stderr and "leaves room" not in r.stderr, r.stderr
    es = run_aura_here(
        "generate", "--model", short_gpt2, "--prompt", "Había una vez", "--temperature", "0", env={"AURA_LANG": "es"}
    )
    assert es.returncode == 0 and "contexto" not in es.stderr, es.stderr
    # what the user asked for and cannot get is still said: an explicit length, a prompt's cut start
    r = run_aura_here("generate", "--model", short_gpt2, "--prompt", "Había una vez", "--max-new-tokens", "300")
    assert r.returncode == 0 and "(300 were asked for)" in r.stderr, r.stderr
    r = run_aura_here("generate", "--model", short_gpt2, "--prompt", LONG)
    assert r.returncode == 0 and "does not fit the model's context" in r.stderr and "asked for" not in r.stderr


def test_chat_leaves_out_its_oldest_turns_but_keeps_the_system_and_the_last_message(short_gpt2):
    from aura.inference.backends import Sampling, fit_context, open_engine

    engine = open_engine(str(short_gpt2))
    system = {"role": "system", "content": "Sé breve."}
    turns = [
        {"role": "user", "content": "Primera pregunta, bastante larga, sobre los castillos. " * 4},
        {"role": "assistant", "content": "Una respuesta."},
        {"role": "user", "content": "¿Y los ríos?"},
    ]
    ids, max_new, kept = fit_context(lambda m: engine._encode(None, m), [system, *turns], 8, CTX)
    assert kept == [system, turns[2]]
    kept = engine.tok.decode(ids[0])
    assert "breve" in kept and "ríos" in kept and "castillos" not in kept
    assert ids.shape[1] + max_new <= CTX and max_new == 8
    # the real streaming call with the whole conversation and a long answer: no crash, within the context
    out: list = []
    text = "".join(engine.stream(messages=[system, *turns], sampling=Sampling(max_new_tokens=50), out=out))
    assert out[0].tokens <= CTX and isinstance(text, str)


def test_pretrain_sample_stays_within_the_seq_length(short_gpt2, capsys):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from aura.train.pretrain import _sample

    model = AutoModelForCausalLM.from_pretrained(short_gpt2)
    tok = AutoTokenizer.from_pretrained(short_gpt2)
    prompt_tokens = len(tok("Había una vez")["input_ids"])
    text = _sample(model, tok, "Había una vez", 80, device="cpu", seed=0)
    assert text.startswith("Había una vez")
    assert f"leaves room for {CTX - prompt_tokens} new tokens (80 were asked for)" in capsys.readouterr().err


def test_gguf_chat_and_prompt_longer_than_n_ctx_are_fitted(short_gpt2, tmp_path):
    """llama.cpp failed with "could not broadcast input array" once a prompt outgrew --n-ctx."""
    importorskip("llama_cpp", "llama-cpp")
    from aura.inference.backends import Sampling, open_engine
    from tests.conftest import run_aura_here

    gguf = tmp_path / "m.gguf"
    r = run_aura_here("export", "gguf", "--model", short_gpt2, "--outfile", gguf, "--quant", "f16")
    assert r.returncode == 0, r.stdout + r.stderr
    engine = open_engine(str(gguf), n_ctx=CTX)
    turns = [
        {"role": "user", "content": "Primera pregunta, bastante larga, sobre los castillos. " * 4},
        {"role": "assistant", "content": "Una respuesta."},
        {"role": "user", "content": "¿Y los ríos?"},
    ]
    for kw in (dict(messages=turns), dict(prompt=LONG), dict(messages=[{"role": "user", "content": LONG}])):
        out: list = []
        "".join(engine.stream(sampling=Sampling(max_new_tokens=50, temperature=0), out=out, **kw))
        assert 0 <= out[0].tokens < CTX, kw
