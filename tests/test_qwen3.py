"""The ``qwen3-*`` presets (transformers' own ``Qwen3ForCausalLM``): the block is Qwen3's (QK-norm, GQA,
untied head), output projections start at zero, and a Qwen3 model passes what the other presets pass:
``aura pretrain`` (Muon + WSD) writes a final/ transformers loads with equal logits, ``aura merge`` of a
LoRA, ``aura generate`` and ``aura eval`` against transformers, and ``aura export gguf`` verified in
llama.cpp (same tokens, same greedy next token, close logits)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from tests.conftest import run_aura_here
from tests.evidence import importorskip
from tests.test_pretrain import TINY_FLAGS
from tests.tiny_models import SPANISH_PROBES, _save_model, _scale_up, make_lora_adapter


@pytest.fixture(scope="module")
def qwen3_dir(tiny_zoo, tmp_path_factory):
    """A random tiny Qwen3 from Aura's own config (weights widened so top-1 comparisons mean something)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from aura.models.presets import hf_config, resolve_spec

    tok = AutoTokenizer.from_pretrained(str(tiny_zoo["tokenizer"]))
    spec = resolve_spec(
        "manual",
        arch="qwen3",
        embed_size=64,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        seq_length=256,
        intermediate_size=256,
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(
        hf_config(
            spec, len(tok), bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id
        )
    )
    _scale_up(model)
    return _save_model(model, tiny_zoo["tokenizer"], tmp_path_factory.mktemp("qwen3") / "model")


def test_presets_are_qwen3_blocks_that_start_as_the_identity():
    from aura.models.presets import PRESETS, build_model, count_parameters, spec_parameters

    spec = PRESETS["qwen3-tiny"]
    torch.manual_seed(0)
    model = build_model(spec, 800).eval()
    assert type(model).__name__ == "Qwen3ForCausalLM"
    assert model.config.num_key_value_heads == 2 and not model.config.tie_word_embeddings
    assert model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr()
    for layer in model.model.layers:
        assert layer.self_attn.q_norm.weight.shape == (spec.head_dim,)  # QK-norm, per head
        assert layer.self_attn.k_norm.weight.shape == (spec.head_dim,)
        assert not layer.self_attn.o_proj.weight.any() and not layer.mlp.down_proj.weight.any()
        assert layer.self_attn.q_proj.weight.std() > 0.01
    assert count_parameters(model) == spec_parameters(spec, 800)
    ids = torch.randint(0, 800, (2, 16))
    with torch.no_grad():  # every block adds zero: the logits are the head over the normed embeddings
        ref = model.lm_head(model.model.norm(model.model.embed_tokens(ids)))
        assert torch.allclose(model(ids).logits, ref, atol=1e-5)
    for name in ("qwen3-small", "qwen3-72h"):
        assert PRESETS[name].arch == "qwen3" and PRESETS[name].intermediate_size % 256 == 0


def test_pretrain_qwen3_with_muon_wsd_final_loads_with_equal_logits(prepared_corpus, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from aura.models.presets import build_model, resolve_spec
    from aura.train.run.session import load_hf_weights

    run = tmp_path / "run"
    r = run_aura_here(
        "pretrain",
        "--data",
        prepared_corpus,
        "--output-dir",
        run,
        *TINY_FLAGS,
        "--arch",
        "qwen3",
        "--optimizer",
        "muon",
        "--lr-schedule",
        "wsd",
        "--max-steps",
        "4",
        "--save-steps",
        "0",
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Recipe: Muon (hidden matrices) + AdamW (the rest)" in r.stdout, r.stdout
    hf = AutoModelForCausalLM.from_pretrained(run / "final").eval()
    assert type(hf).__name__ == "Qwen3ForCausalLM"
    state = json.loads((run / "checkpoint-step-4" / "trainer_state.json").read_text())
    assert state["plan"]["flags"]["optimizer"] == "muon" and state["plan"]["schedule"]["kind"] == "wsd"
    spec = resolve_spec(
        "manual", arch="qwen3", embed_size=64, num_layers=2, num_heads=4, seq_length=32, intermediate_size=256
    )
    ours = build_model(spec, hf.config.vocab_size).eval()
    load_hf_weights(ours, run / "checkpoint-step-4")
    ids = AutoTokenizer.from_pretrained(run / "final")("¿Dónde está el niño?", return_tensors="pt").input_ids
    with torch.no_grad():
        assert torch.equal(hf(ids).logits, ours(ids).logits)
    assert hf.model.layers[0].self_attn.o_proj.weight.any()  # it learned away from zero


def test_merge_generate_and_eval_match_transformers(qwen3_dir, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    adapter = make_lora_adapter(qwen3_dir, tmp_path / "adapter")
    merged = tmp_path / "merged"
    r = run_aura_here("merge", "--base-model", qwen3_dir, "--adapter", adapter, "--output-dir", merged)
    assert r.returncode == 0, r.stdout + r.stderr
    tok = AutoTokenizer.from_pretrained(str(qwen3_dir))
    ids = tok(SPANISH_PROBES[0], return_tensors="pt").input_ids
    with torch.no_grad():
        ref = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(str(qwen3_dir)), str(adapter))(ids).logits
        got = AutoModelForCausalLM.from_pretrained(str(merged))(ids).logits
    assert torch.allclose(got, ref, atol=1e-4)

    r = run_aura_here(
        "generate", "--model", merged, "--prompt", "Buenos días", "--temperature", "0", "--max-new-tokens", "6"
    )
    assert r.returncode == 0, r.stdout + r.stderr
    model = AutoModelForCausalLM.from_pretrained(str(merged)).eval()
    prompt = tok("Buenos días", return_tensors="pt").input_ids
    out = model.generate(prompt, max_new_tokens=6, do_sample=False, pad_token_id=tok.pad_token_id)
    assert r.stdout.startswith("Buenos días" + tok.decode(out[0, prompt.shape[1] :], skip_special_tokens=True))

    text = tmp_path / "texto.txt"
    text.write_text(SPANISH_PROBES[0], encoding="utf-8")
    r = run_aura_here("eval", "--model", merged, "--data", text, "--seq-len", "128", "--output", tmp_path / "e.json")
    assert r.returncode == 0, r.stdout + r.stderr
    row = json.loads((tmp_path / "e.json").read_text())["results"][0]
    ids = [tok.eos_token_id] + tok(text.read_text(encoding="utf-8"), add_special_tokens=False)["input_ids"]
    with torch.no_grad():  # the text fits in one window: one forward pass is the reference
        assert len(ids) <= 129
        logits = model(torch.tensor([ids])).logits[0, :-1]
        nll = torch.nn.functional.cross_entropy(logits, torch.tensor(ids[1:]), reduction="sum").item()
    assert row["perplexity"] == pytest.approx(math.exp(nll / (len(ids) - 1)), rel=1e-4)


@pytest.mark.parametrize("quant,tol", [("f16", 0.02), ("q8_0", 0.08)])
def test_gguf_round_trip_in_llama_cpp(qwen3_dir, tmp_path, quant, tol):
    importorskip("llama_cpp", "llama-cpp")
    from tests.test_gguf import _roundtrip

    out = tmp_path / f"qwen3-{quant}.gguf"
    r = run_aura_here("export", "gguf", "--model", qwen3_dir, "--outfile", out, "--quant", quant)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Tokenisation identical" in r.stdout and "End of generation recognised" in r.stdout, r.stdout
    assert "Qwen3ForCausalLM -> qwen3" in r.stdout
    _roundtrip(qwen3_dir, out, rel_tol=tol)
