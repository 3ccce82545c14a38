"""``aura export gguf`` for the architectures teams fine-tune beyond Llama/GPT-2 (issue 35, GGUF item):
Qwen2/2.5, Gemma 2, Gemma 3 (text), Phi-3, SmolLM3 and OLMo 2, each a tiny random model built with transformers' own
config and model classes and a tokenizer of its family trained here, exported, loaded in llama.cpp and
compared with transformers (tokenisation, logits, as tests/test_gguf.py does, same tolerances); a
LoRA-merged Qwen2, an Aura-trained tokenizer on Qwen2, llama.cpp's k-quant on Gemma 3; and the refusals of
what llama.cpp would compute differently.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import run_aura_here
from tests.evidence import importorskip, require_or_skip
from tests.test_gguf import _export, _roundtrip
from tests.tiny_models import LLAMA3_SPLIT, QWEN2_SPLIT, build_arch, train_spm_tokenizer, train_tokenizer

importorskip("llama_cpp", "llama-cpp")

TOL = {"f32": 0.01, "f16": 0.02, "q8_0": 0.08}  # tests/test_gguf.py's (and gguf_verify's) tolerances


@pytest.fixture(scope="module")
def toks(tmp_path_factory):
    """One tokenizer per family: Qwen2's and Llama 3's pre-tokeniser regex (byte-level BPE), Gemma's and
    Phi-3's SentencePiece-style vocabularies."""
    root = tmp_path_factory.mktemp("gguf-tok")
    return {
        "qwen2": train_tokenizer(root / "qwen2", split=QWEN2_SPLIT),
        "llama3": train_tokenizer(root / "llama3", split=LLAMA3_SPLIT),
        "gemma": train_spm_tokenizer(root / "gemma", family="gemma"),
        "phi3": train_spm_tokenizer(root / "phi3", family="phi3"),
    }


def _fields(path):
    import gguf

    reader = gguf.GGUFReader(str(path))
    return reader, {t.name for t in reader.tensors}


def _field(reader, key):
    f = reader.get_field(key)
    return None if f is None else f.contents()


# (arch, tokenizer family, build_arch options, quant): sliding windows of 8 tokens, shorter than the texts
# compared, so that llama.cpp's local layers are exercised; Gemma 3 with 6 layers (5 local, 1 global) and
# linear RoPE scaling on the global one; SmolLM3 with 4 layers (the 4th without RoPE); Phi-3 with partial
# rotary dimensions and tied embeddings.
CASES = {
    "qwen2": ("qwen2", {"tied": True}, "f16"),
    "gemma2": ("gemma", {"sliding_window": 8}, "f16"),
    "gemma3": (
        "gemma",
        {
            "sliding_window": 8,
            "layers": 6,
            "rope_parameters": {
                "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1e6},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            },
        },
        "f16",
    ),
    "phi3": (
        "phi3",
        {
            "tied": True,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
        },
        "q8_0",
    ),
    "smollm3": ("llama3", {"layers": 4}, "f16"),
    "olmo2": ("llama3", {}, "f16"),
}


@pytest.mark.parametrize("arch", list(CASES))
def test_architecture_roundtrip(toks, tmp_path, arch):
    family, options, quant = CASES[arch]
    # a fine-tune's folder is named final/, not after its architecture (llama.cpp reads Phi-3's name)
    model = build_arch(tmp_path / "run" / "final", toks[family], arch, **options)
    if arch == "smollm3":  # SmolLM3's own template copies its messages with `[:]`, which llama.cpp cannot run
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(model)
        tok.chat_template = tok.chat_template.replace("in messages", "in messages[:]")
        tok.save_pretrained(model)
    out = tmp_path / f"{arch}.gguf"
    r = _export(model, out, quant)
    assert f"-> {arch}" in r.stdout, r.stdout
    if quant != "q8_0":  # q8_0's rounding may flip a near tie a few tokens in; f16 must not
        assert "identical tokens from the start: 12 of 12" in r.stdout, r.stdout
    _roundtrip(model, out, rel_tol=TOL[quant])
    reader, tensors = _fields(out)
    assert _field(reader, "general.architecture") == arch
    from transformers import AutoConfig

    # a tied head is the embedding, which llama.cpp reuses; an untied one (OLMo 2's) is written
    assert ("output.weight" in tensors) != AutoConfig.from_pretrained(model).tie_word_embeddings
    if arch == "qwen2":
        assert _field(reader, "tokenizer.ggml.pre") == "qwen2"
        assert {"blk.0.attn_q.bias", "blk.0.attn_k.bias", "blk.0.attn_v.bias"} <= tensors
    elif arch == "olmo2":
        assert {"blk.0.attn_q_norm.weight", "blk.0.post_attention_norm.weight", "blk.0.post_ffw_norm.weight"} <= tensors
        assert "blk.0.attn_norm.weight" not in tensors
    elif arch == "smollm3":
        assert _field(reader, "tokenizer.ggml.pre") == "llama-bpe"
        assert "[:]" not in _field(reader, "tokenizer.chat_template")
    elif arch.startswith("gemma"):
        assert "# Chat format: gemma" in (tmp_path / f"{arch}.Modelfile").read_text()  # tests/test_modelfile.py
        assert _field(reader, "tokenizer.ggml.model") == "llama"
        assert _field(reader, f"{arch}.attention.sliding_window") == 8
        assert {"blk.0.post_attention_norm.weight", "blk.0.post_ffw_norm.weight"} <= tensors
        if arch == "gemma2":
            assert _field(reader, "gemma2.attn_logit_softcapping") == pytest.approx(50.0)
            assert _field(reader, "gemma2.final_logit_softcapping") == pytest.approx(30.0)
        else:
            assert _field(reader, "gemma3.rope.scaling.factor") == pytest.approx(4.0)
            assert {"blk.0.attn_q_norm.weight", "blk.0.attn_k_norm.weight"} <= tensors
    elif arch == "phi3":
        assert "# Chat format: phi3" in (tmp_path / f"{arch}.Modelfile").read_text()
        assert {"blk.0.attn_qkv.weight", "blk.0.ffn_up.weight"} <= tensors and "blk.0.ffn_gate.weight" not in tensors
        assert _field(reader, "phi3.rope.dimension_count") == 8  # half of head_dim 16
        assert _field(reader, "general.name") == "final (phi-3)"


def test_gemma3_image_text_checkpoint_exports_its_language_model(toks, tmp_path):
    """Gemma 3 4B/12B/27B are Gemma3ForConditionalGeneration checkpoints: the GGUF is their language model
    (llama.cpp's gemma3), without the vision tower, compared with the whole model's logits."""
    model = build_arch(tmp_path / "g3v", toks["gemma"], "gemma3", vision=True, sliding_window=8)
    r = _export(model, tmp_path / "g3v.gguf", "f16")
    assert "Gemma3ForConditionalGeneration -> gemma3" in r.stdout
    assert "identical tokens from the start: 12 of 12" in r.stdout, r.stdout
    _roundtrip(model, tmp_path / "g3v.gguf", rel_tol=TOL["f16"])
    _, tensors = _fields(tmp_path / "g3v.gguf")
    assert "token_embd.weight" in tensors and not [t for t in tensors if "v." in t[:2] or "mm" in t]


def test_smollm2_tokenizer(tmp_path):
    """SmolLM2 is a Llama with its own pre-tokeniser (single digits, then GPT-2's regex): llama.cpp's "smollm"."""
    from tests.tiny_models import build_llama

    model = build_llama(tmp_path / "smollm2", train_tokenizer(tmp_path / "tok", digits=True), hidden=32, layers=1)
    _export(model, tmp_path / "s.gguf", "f16")
    _roundtrip(model, tmp_path / "s.gguf", rel_tol=TOL["f16"])
    assert _field(_fields(tmp_path / "s.gguf")[0], "tokenizer.ggml.pre") == "smollm"


def test_gemma2_untied_head_is_not_written(toks, tmp_path):
    """Gemma's head is its embedding (llama.cpp reads token_embd); an lm_head in the files is skipped as
    llama.cpp's converter skips it, not written as a tensor llama.cpp would ignore."""
    model = build_arch(tmp_path / "g", toks["gemma"], "gemma2", tied=False, layers=1)
    r = run_aura_here("export", "gguf", "--model", model, "--outfile", tmp_path / "g.gguf", "--no-verify")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "output.weight" not in _fields(tmp_path / "g.gguf")[1]


def test_qwen2_with_an_aura_tokenizer_and_lora_merged(tiny_zoo, toks, tmp_path):
    """The README's example: a Qwen2 with an Aura-trained byte-level BPE, and a Qwen2 whose LoRA adapter was
    merged by `aura merge` (Qwen2's own tokenizer family)."""
    from aura.export.merge import MergeConfig, merge
    from tests.tiny_models import make_lora_adapter

    aura_tok = build_arch(tmp_path / "aura-tok", tiny_zoo["tokenizer"], "qwen2")
    _export(aura_tok, tmp_path / "aura-tok.gguf", "q8_0")
    _roundtrip(aura_tok, tmp_path / "aura-tok.gguf", rel_tol=TOL["q8_0"])
    # transformers 5 runs any tokenizer.json beside a Qwen2 through Qwen2Tokenizer, with Qwen2's pre-tokeniser:
    # the GGUF follows the tokenizer as it runs (written from its tokenizer.json, it tokenised "2024" apart)
    assert _field(_fields(tmp_path / "aura-tok.gguf")[0], "tokenizer.ggml.pre") == "qwen2"

    base = build_arch(tmp_path / "base", toks["qwen2"], "qwen2", tied=True)
    adapter = make_lora_adapter(base, tmp_path / "adapter")
    merge(MergeConfig(base_model=str(base), adapter=str(adapter), output_dir=str(tmp_path / "merged")))
    _export(tmp_path / "merged", tmp_path / "merged.gguf", "f16")
    _roundtrip(tmp_path / "merged", tmp_path / "merged.gguf", rel_tol=TOL["f16"])


def test_gemma3_llama_cpp_kquant(toks, tmp_path):
    from aura.export.gguf import find_quantizer

    if find_quantizer() is None:
        require_or_skip("llama-cpp", "llama.cpp's quantiser is not available")
    model = build_arch(tmp_path / "g3", toks["gemma"], "gemma3")
    r = run_aura_here("export", "gguf", "--model", model, "--outfile", tmp_path / "g3.gguf", "--quant", "q4_k_m")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Tokenisation identical" in r.stdout and "Logits (q4_k_m)" in r.stdout
    assert _field(_fields(tmp_path / "g3.gguf")[0], "general.file_type") == 15  # MOSTLY_Q4_K_M


def test_phi3_sliding_window_llama_cpp_ignores_is_caught(toks, tmp_path):
    """llama.cpp runs phi3 without its sliding window: the export warns, and where the verification's texts
    are longer than the window the logits differ and nothing is left behind."""
    model = build_arch(tmp_path / "p", toks["phi3"], "phi3", sliding_window=8, layers=1)
    r = run_aura_here("export", "gguf", "--model", model, "--outfile", tmp_path / "p.gguf", "--quant", "f32")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stdout + r.stderr
    assert "sliding window of 8 tokens, which llama.cpp does not apply to phi3" in r.stderr
    assert "logits differ too much" in r.stderr
    assert not list(tmp_path.glob("*.gguf")) and not list(tmp_path.glob(".tmp-*"))


def test_gemma3_config_as_transformers_4_wrote_it():
    """Gemma 3 checkpoints on the Hub predate transformers 5's per-layer-type ``rope_parameters``: ``rope_scaling``
    (linear, factor 8) is the global layers', ``rope_local_base_freq`` the local layers' base."""
    from pathlib import Path

    from aura.export.gguf_arch import plan_arch

    config = {
        "architectures": ["Gemma3ForCausalLM"],
        "num_hidden_layers": 12,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "hidden_size": 2560,
        "intermediate_size": 10240,
        "max_position_embeddings": 131072,
        "query_pre_attn_scalar": 256,
        "rope_theta": 1000000.0,
        "rope_local_base_freq": 10000.0,
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
        "sliding_window": 1024,
        "sliding_window_pattern": 6,
        "vocab_size": 262208,
    }
    hp = plan_arch(Path("gemma-3-4b"), config).hparams
    assert (hp["rope_freq_base"], hp["rope_scaling_linear"], hp["rope_freq_base_swa"]) == (1e6, 8.0, 1e4)
    assert hp["sliding_window"] == 1024


def test_refusals_name_the_field_and_the_supported_architectures(toks, tmp_path):
    """What llama.cpp would compute differently is refused before anything is written, in es and en."""
    import json
    import shutil

    cases = [
        ("gemma2", toks["gemma"], {"layer_types": ["full_attention", "full_attention"]}, "layer_types"),
        ("smollm3", toks["llama3"], {"layers": 4, "no_rope_layers": [1, 1, 1, 1]}, "no_rope_layers"),
        ("gemma3", toks["gemma"], {"query_pre_attn_scalar": 64}, "query_pre_attn_scalar"),
        (
            "qwen2",
            toks["qwen2"],
            {"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "beta_fast": 16.0, "rope_theta": 10000.0}},
            "beta_fast",
        ),
    ]
    for arch, tok, options, what in cases:
        model = build_arch(tmp_path / arch, tok, arch, layers=options.pop("layers", 2), **options)
        r = run_aura_here("export", "gguf", "--model", model, "--outfile", tmp_path / f"{arch}.gguf")
        assert r.returncode == 2 and what in r.stderr and "Traceback" not in r.stderr, (arch, r.stderr)
        assert "Writing" not in r.stdout and not list(tmp_path.glob("*.gguf"))
    es = run_aura_here(
        "export", "gguf", "--model", tmp_path / "gemma2", "--outfile", tmp_path / "x.gguf", env={"AURA_LANG": "es"}
    )
    assert es.returncode == 2 and "El campo 'layer_types'" in es.stderr, es.stderr

    odd = tmp_path / "falcon"  # a real model folder of an architecture Aura cannot export
    shutil.copytree(tmp_path / "qwen2", odd)
    config = json.loads((odd / "config.json").read_text(encoding="utf-8"))
    (odd / "config.json").write_text(json.dumps({**config, "architectures": ["FalconForCausalLM"]}), encoding="utf-8")
    for lang, phrase in (
        ("en", "cannot be exported to GGUF by Aura. Supported:"),
        ("es", "no se puede exportar a GGUF con Aura. Compatibles:"),
    ):
        r = run_aura_here("export", "gguf", "--model", odd, "--outfile", tmp_path / "o.gguf", env={"AURA_LANG": lang})
        assert r.returncode == 2 and "FalconForCausalLM" in r.stderr and phrase in r.stderr, r.stderr
        for name in (
            "Qwen2ForCausalLM",
            "Gemma2ForCausalLM",
            "Gemma3ForCausalLM",
            "Phi3ForCausalLM",
            "SmolLM3ForCausalLM",
        ):
            assert name in r.stderr


# RoPE scaling llama.cpp applies as transformers does: Phi-3's LongRoPE (Phi-3-128k, Phi-3.5, Phi-4-mini: long and
# short per-dimension factors; the short ones apply below the original context, which llama.cpp decides from its
# loaded context rounded up to 256, so the original context here is 512) and Qwen2.5's YaRN (factor 4).
SCALED = {
    "phi3-longrope": (
        "phi3",
        "phi3",
        {
            "tied": True,
            "ctx": 2048,
            "original_max_position_embeddings": 512,
            "rope_parameters": {
                "rope_type": "longrope",
                "rope_theta": 10000.0,
                "original_max_position_embeddings": 512,
                "long_factor": [1.0 + 0.7 * i for i in range(8)],
                "short_factor": [1.0 + 0.2 * i for i in range(8)],
            },
        },
    ),
    "qwen2-yarn": (
        "qwen2",
        "qwen2",
        {
            "tied": True,
            "ctx": 256,
            "rope_parameters": {
                "rope_type": "yarn",
                "rope_theta": 10000.0,
                "factor": 4.0,
                "original_max_position_embeddings": 64,
            },
        },
    ),
}


@pytest.mark.parametrize("case", list(SCALED))
def test_rope_scaling_exports_as_llama_cpp_applies_it(toks, tmp_path, case):
    import torch
    from transformers import AutoModelForCausalLM

    arch, family, options = SCALED[case]
    model = build_arch(tmp_path / "final", toks[family], arch, **options)
    out = tmp_path / f"{case}.gguf"
    r = _export(model, out, "f16", "--converter", "aura")
    assert "identical tokens from the start: 12 of 12" in r.stdout, r.stdout
    _roundtrip(model, out, rel_tol=TOL["f16"])
    reader, tensors = _fields(out)
    if arch == "phi3":
        assert "LongRoPE" in r.stdout + r.stderr  # the warning about llama.cpp's choice of factors
        assert {"rope_factors_long.weight", "rope_factors_short.weight"} <= tensors
        assert _field(reader, "phi3.rope.scaling.attn_factor") == pytest.approx((1 + np.log(4) / np.log(512)) ** 0.5)
    else:
        assert _field(reader, "qwen2.rope.scaling.type") == "yarn"
        assert _field(reader, "qwen2.rope.scaling.factor") == pytest.approx(4.0)
        assert _field(reader, "qwen2.rope.scaling.original_context_length") == 64
    # the scaling matters: the same weights with plain RoPE compute other logits
    ids = torch.arange(3, 60).unsqueeze(0)
    scaled = AutoModelForCausalLM.from_pretrained(model).eval()
    plain = AutoModelForCausalLM.from_pretrained(
        model, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}
    ).eval()
    with torch.no_grad():
        assert (scaled(ids).logits - plain(ids).logits).abs().max() > 0.05


# llama.cpp's Phi-3 rule (llama-vocab.cpp) is keyed on the GGUF's general.name, not on its architecture: every
# architecture Aura exports, with Aura's byte-level BPE (it has <|endoftext|>, not <s>, </s>, <unk>), in a folder
# named after Phi-3
@pytest.mark.parametrize("arch", ["phi3", "llama", "gpt2", "qwen2", "gemma2", "gemma3", "smollm3", "olmo2"])
def test_a_phi3_name_with_an_aura_tokenizer_loads_in_llama_cpp(tiny_zoo, tmp_path, arch):
    """Issue 51: llama.cpp gives every special token Phi-3's rstrip when the name says phi-3 or phi3, and looks
    up <s>, </s>, <unk> and <|endoftext|> by their text: without them the file did not load ("error loading model
    vocabulary: unordered_map::at"). A tokenizer that does not ask for that behaviour gets a name without the
    mark (said in a warning): the GGUF loads, tokenises and computes as transformers."""
    import shutil

    folder = tmp_path / "phi3-es"
    if arch in ("llama", "gpt2"):
        shutil.copytree(tiny_zoo[arch], folder)
    else:
        build_arch(folder, tiny_zoo["tokenizer"], arch, layers=1)
    out = tmp_path / "m.gguf"
    r = _export(folder, out, "f16")
    assert "would trigger llama.cpp's Phi-3 rule" in r.stderr, r.stderr
    assert _field(_fields(out)[0], "general.name") == "phi 3-es"
    if arch == "phi3":
        _roundtrip(folder, out, rel_tol=TOL["f16"])


def test_phi3_chat_tokens_that_rstrip_without_the_rules_tokens_are_refused_before_writing(tiny_zoo, tmp_path):
    """An Aura tokenizer given Phi-3's <|end|> (rstrip, as Phi-3's) on a Phi-3: the whitespace-swallowing it asks
    for exists in llama.cpp only through the Phi-3 rule, which cannot load without <s>, </s>, <unk>: refused before
    a byte is written, with that reason and what works, in es and en."""
    from tokenizers import AddedToken
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_zoo["tokenizer"])
    tok.add_special_tokens(
        {"additional_special_tokens": [AddedToken("<|end|>", rstrip=True, special=True, normalized=False)]}
    )
    tok.save_pretrained(tmp_path / "tok")
    model = build_arch(tmp_path / "final", tmp_path / "tok", "phi3", layers=1)
    for lang, phrases in (
        ("en", ("lacks <s>, </s>, <unk>", "unordered_map::at", "Nothing is written")),
        ("es", ("le falta: <s>, </s>, <unk>", "unordered_map::at", "No se escribe nada")),
    ):
        r = run_aura_here("export", "gguf", "--model", model, "--outfile", tmp_path / "p.gguf", env={"AURA_LANG": lang})
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stdout + r.stderr
        assert all(p in r.stderr for p in phrases), r.stderr
        assert not list(tmp_path.glob("*.gguf")) and not list(tmp_path.glob(".tmp-*"))


def test_a_file_llama_cpp_cannot_load_says_llama_cpps_reason(tiny_zoo, tmp_path):
    """A GGUF named phi3 whose vocabulary lacks the rule's tokens (as Aura wrote them before issue 51): the load
    error quotes llama.cpp's own line and the name rule, not a guess about llama-cpp-python's version."""
    from aura.core.errors import AuraError
    from aura.inference.loading import load_llama

    out = tmp_path / "old.gguf"
    r = run_aura_here(
        "export", "gguf", "--model", tiny_zoo["llama"], "--outfile", out, "--name", "xphi 3", "--no-verify"
    )
    assert r.returncode == 0, r.stdout + r.stderr
    data = out.read_bytes()
    assert data.count(b"xphi 3") == 1
    out.write_bytes(data.replace(b"xphi 3", b"x-phi3"))  # the name an older Aura wrote, same length
    with pytest.raises(AuraError) as e:
        load_llama(out, vocab_only=True)
    assert "unordered_map::at" in str(e.value) and "Phi-3 rule" in str(e.value), str(e.value)
    assert "version supports" not in str(e.value)
