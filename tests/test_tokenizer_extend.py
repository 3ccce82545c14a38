"""`aura tokenizer extend` and continued pretraining with the extended tokenizer, through the real CLI:
round trip, never more tokens than the base, mean-of-pieces rows, the new-rows-only phase, GGUF parity."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.conftest import run_aura, run_aura_here
from tests.evidence import importorskip
from tests.tiny_models import CORPUS_DIR, SPANISH_PROBES, build_llama, train_tokenizer

ADD = 150


@pytest.fixture(scope="module")
def adapted(tmp_path_factory) -> dict[str, Path]:
    """A base (tokenizer + tiny Llama), its extension, the corpus prepared with it, and a run that trained
    only the new rows for its 2 steps."""
    from aura.data.prepare import PrepareConfig, prepare

    root = tmp_path_factory.mktemp("extend")
    tok = train_tokenizer(root / "tok", vocab_size=700)
    base = build_llama(root / "base", tok)
    ext = root / "ext"
    r = run_aura(
        "tokenizer", "extend", base, CORPUS_DIR, "--add-tokens", ADD, "--output-dir", ext, "--heldout-fraction", "0.1"
    )
    assert r.returncode == 0, r.stderr + r.stdout
    prepare(
        PrepareConfig(
            inputs=[str(CORPUS_DIR)], tokenizer=str(ext), output_dir=str(root / "data"), workers=1, val_fraction=0.05
        )
    )
    run = root / "run"
    t = run_aura(
        "pretrain",
        "--init-from",
        base,
        "--tokenizer",
        ext,
        "--data",
        root / "data",
        "-o",
        run,
        "--batch-size",
        "2",
        "--seq-length",
        "64",
        "--precision",
        "fp32",
        "--max-steps",
        "2",
        "--train-new-tokens-only",
        "2",
        "--learning-rate",
        "1e-2",
        "--sample-tokens",
        "0",
    )
    assert t.returncode == 0, t.stderr + t.stdout
    return {"tok": tok, "base": base, "ext": ext, "run": run, "extend_out": r.stdout, "pretrain_out": t.stdout}


def test_extension_round_trips_and_never_cuts_more_than_the_base(adapted):
    from transformers import AutoTokenizer

    base, ext = AutoTokenizer.from_pretrained(adapted["base"]), AutoTokenizer.from_pretrained(adapted["ext"])
    assert len(ext) == len(base) + ADD
    ext_vocab = ext.get_vocab()
    assert all(ext_vocab[t] == i for t, i in base.get_vocab().items())  # every base token keeps its id
    assert ext.chat_template == base.chat_template and ext.eos_token == base.eos_token
    lines = [
        ln for f in sorted(CORPUS_DIR.glob("*.txt")) for ln in f.read_text(encoding="utf-8").splitlines() if ln.strip()
    ]
    english = ["The quick brown fox jumps over the lazy dog 🦊.", "It's 3.14 o'clock; naïve café 😀!"]
    fewer = 0
    for text in [*SPANISH_PROBES, *english, *lines]:
        ids = ext(text, add_special_tokens=False).input_ids
        assert ext.decode(ids) == text  # accents, ñ, ¿¡, emoji, spaces
        b = base(text, add_special_tokens=False, return_offsets_mapping=True)
        e = ext(text, add_special_tokens=False, return_offsets_mapping=True)
        # the extension only joins the base's pieces: its cuts are a subset of the base's
        assert {o[1] for o in e["offset_mapping"]} <= {o[1] for o in b["offset_mapping"]}, text
        fewer += len(e.input_ids) < len(b.input_ids)
    assert fewer > len(lines) // 2
    meta = json.loads((adapted["ext"] / "aura_tokenizer.json").read_text())
    fert = meta["fertility"]
    assert fert["extended"]["tokens_per_word"] < fert["base"]["tokens_per_word"]
    assert fert["extended"]["bytes_per_token"] > fert["base"]["bytes_per_token"]
    assert "Fertility (tokens/word)" in adapted["extend_out"] and "Bytes per token" in adapted["extend_out"]
    assert meta["extends"]["added_tokens"] == ADD


def test_new_rows_start_as_the_mean_of_their_pieces(adapted):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from aura.train.init_from import mean_of_pieces, new_token_ids

    base_tok, ext = AutoTokenizer.from_pretrained(adapted["base"]), AutoTokenizer.from_pretrained(adapted["ext"])
    model = AutoModelForCausalLM.from_pretrained(adapted["base"])
    emb0 = model.get_input_embeddings().weight.detach().clone()
    head0 = model.get_output_embeddings().weight.detach().clone()
    new = new_token_ids(base_tok, ext, base_name="base", ext_name="ext")
    assert new == list(range(len(base_tok), len(ext)))
    mean_of_pieces(model, base_tok, ext, new)
    emb, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    assert emb.shape[0] == len(ext) and head.shape[0] == len(ext)
    assert torch.equal(emb[: len(base_tok)], emb0) and torch.equal(head[: len(base_tok)], head0)
    for i in new:
        text = ext.decode([i])
        pieces = base_tok(text, add_special_tokens=False).input_ids if "\ufffd" not in text else None
        if pieces is None:
            continue  # a partial UTF-8 sequence: checked through the byte-level pieces below
        assert torch.allclose(emb[i], emb0[pieces].mean(0)) and torch.allclose(head[i], head0[pieces].mean(0))
    # byte-level pieces of every new token (the BPE model's own split)
    backend = base_tok.backend_tokenizer
    for i in new:
        ids = [t.id for t in backend.model.tokenize(ext.convert_ids_to_tokens(i))]
        assert len(ids) >= 2 and torch.allclose(emb[i], emb0[ids].mean(0))


def test_new_rows_only_phase_leaves_every_base_weight_unchanged(adapted):
    from safetensors.torch import load_file

    assert "Steps 1-2: only the new tokens' rows train" in adapted["pretrain_out"]
    base = load_file(str(adapted["base"] / "model.safetensors"))
    final = load_file(str(adapted["run"] / "final" / "model.safetensors"))
    n = base["model.embed_tokens.weight"].shape[0]
    for name, w in base.items():
        if name in ("model.embed_tokens.weight", "lm_head.weight"):
            assert torch.equal(final[name][:n], w), name  # old rows unchanged
            assert final[name].shape[0] == n + ADD
        else:
            assert torch.equal(final[name], w), name
    assert not torch.equal(
        final["model.embed_tokens.weight"][n:], torch.zeros_like(final["model.embed_tokens.weight"][n:])
    )


def test_embeddings_scope_trains_whole_embedding_matrices_and_nothing_else(adapted, tmp_path):
    """`--new-tokens-scope embeddings`: during --train-new-tokens-only the whole input embedding and output head
    learn (old rows too, unlike new-rows), every other weight stays bit-identical to the base."""
    from safetensors.torch import load_file

    run = tmp_path / "emb"
    t = run_aura(
        "pretrain",
        "--init-from",
        adapted["base"],
        "--tokenizer",
        adapted["ext"],
        "--data",
        adapted["run"].parent / "data",
        "-o",
        run,
        "--batch-size",
        "2",
        "--seq-length",
        "64",
        "--precision",
        "fp32",
        "--max-steps",
        "2",
        "--train-new-tokens-only",
        "2",
        "--new-tokens-scope",
        "embeddings",
        "--learning-rate",
        "1e-2",
        "--sample-tokens",
        "0",
    )
    assert t.returncode == 0, t.stderr + t.stdout
    base = load_file(str(adapted["base"] / "model.safetensors"))
    final = load_file(str(run / "final" / "model.safetensors"))
    n = base["model.embed_tokens.weight"].shape[0]
    for name, w in base.items():
        if name in ("model.embed_tokens.weight", "lm_head.weight"):
            moved = (final[name][:n] != w).any(dim=1)  # (n,) old rows that learnt
            assert int(moved.sum()) >= 10, (name, int(moved.sum()))
        else:
            assert torch.equal(final[name], w), name
    # the new-rows scope of the fixture's run, from the same start, left every old row as it was
    rows_only = load_file(str(adapted["run"] / "final" / "model.safetensors"))
    assert torch.equal(rows_only["lm_head.weight"][:n], base["lm_head.weight"])


def test_final_model_and_gguf_tokenize_like_the_extended_tokenizer(adapted, tmp_path):
    importorskip("llama_cpp", "llama-cpp")
    from llama_cpp import Llama
    from transformers import AutoTokenizer

    from aura.tokenizer.loading import tokenizer_hash

    final = adapted["run"] / "final"
    assert tokenizer_hash(AutoTokenizer.from_pretrained(final)) == tokenizer_hash(adapted["ext"])
    gguf = tmp_path / "m.gguf"
    r = run_aura_here("export", "gguf", "--model", final, "--outfile", gguf, "--quant", "f32")
    assert r.returncode == 0, r.stderr + r.stdout
    ext = AutoTokenizer.from_pretrained(adapted["ext"])
    llm = Llama(str(gguf), vocab_only=True, verbose=False)
    lines = [ln for ln in (CORPUS_DIR / "dialogos.txt").read_text(encoding="utf-8").splitlines() if ln.strip()]
    for text in [*SPANISH_PROBES, *lines[:200]]:
        assert (
            llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)
            == ext(text, add_special_tokens=False).input_ids
        ), text


def test_extend_refusals(adapted, tmp_path):
    out = tmp_path / "ext"
    r = run_aura_here(
        "tokenizer",
        "extend",
        adapted["base"],
        CORPUS_DIR,
        "--add-tokens",
        "500",
        "--max-vocab",
        "1000",
        "--output-dir",
        out,
    )
    assert r.returncode == 2 and "--add-tokens 500 would give 1,200 tokens" in r.stderr, r.stderr
    assert not out.exists()
    r = run_aura_here("tokenizer", "extend", adapted["base"], "--output-dir", out)
    assert r.returncode == 2 and "texts after the base tokenizer" in r.stderr, r.stderr
    r = run_aura_here("tokenizer", "extend", adapted["base"], CORPUS_DIR, "--add-tokens", "0", "--output-dir", out)
    assert r.returncode == 2 and "--add-tokens must be greater than 0" in r.stderr, r.stderr
    assert not out.exists()


@pytest.mark.slow
def test_sentencepiece_base_extension_is_never_longer_round_trips_and_llama_cpp_agrees(tmp_path):
    """A Llama 2 / Mistral 7B layout (SentencePiece BPE: "▁" for spaces, byte fallback, no pre-tokeniser)
    extended from three of the corpus files: its new pieces are words or word starts ("▁" only first), on the
    fourth file (held out) no line takes more tokens than with the base, most take fewer, every line decodes back to
    itself, and after a GGUF export llama.cpp (its
    SentencePiece tokenizer, merging by score) cuts every held-out line as the extended tokenizer does."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from aura.train.init_from import mean_of_pieces, new_token_ids
    from tests.tiny_models import train_spm_tokenizer

    held_out = "narrativa.txt"
    texts = tmp_path / "texts"
    texts.mkdir()
    for f in sorted(CORPUS_DIR.glob("*.txt")):
        if f.name != held_out:
            (texts / f.name).write_text(f.read_text(encoding="utf-8"), encoding="utf-8")
    base_dir = build_llama(tmp_path / "base", train_spm_tokenizer(tmp_path / "spm", vocab_size=600), arch="mistral")
    ext_dir = tmp_path / "ext"
    r = run_aura_here("tokenizer", "extend", base_dir, texts, "--add-tokens", ADD, "--output-dir", ext_dir)
    assert r.returncode == 0, r.stderr + r.stdout
    base, ext = AutoTokenizer.from_pretrained(base_dir), AutoTokenizer.from_pretrained(ext_dir)
    assert len(ext) == len(base) + ADD and ext.backend_tokenizer.pre_tokenizer is None  # the SentencePiece layout
    assert all(ext.get_vocab()[t] == i for t, i in base.get_vocab().items())
    added = [t for t, i in ext.get_vocab().items() if i >= len(base)]
    # pieces as SentencePiece makes them: "▁" only at a piece's start (58 of 150 new tokens had it inside or at
    # the end, "que▁se▁", before continue_bpe cut the base's whole normalised text into words)
    assert len(added) == ADD and not [t for t in added if "▁" in t[1:]], [t for t in added if "▁" in t[1:]]
    lines = [ln for ln in (CORPUS_DIR / held_out).read_text(encoding="utf-8").splitlines() if ln.strip()]
    assert len(lines) > 50
    fewer = total_base = total_ext = 0
    for text in [*SPANISH_PROBES, *lines]:
        ids = ext(text, add_special_tokens=False).input_ids
        assert ext.decode(ids) == text, text  # accents, ñ, ¿¡, emoji (byte fallback), spaces
        n_base = len(base(text, add_special_tokens=False).input_ids)
        assert len(ids) <= n_base, text
        fewer += len(ids) < n_base
        total_base, total_ext = total_base + n_base, total_ext + len(ids)
    assert fewer > len(lines) // 2 and total_ext < 0.99 * total_base

    # the base model grown to the extension (mean of pieces, as `aura pretrain --init-from` does), in llama.cpp
    model = AutoModelForCausalLM.from_pretrained(base_dir)
    mean_of_pieces(model, base, ext, new_token_ids(base, ext, base_name="base", ext_name="ext"))
    grown = tmp_path / "grown"
    model.save_pretrained(grown)
    ext.save_pretrained(grown)
    importorskip("llama_cpp", "llama-cpp")
    from llama_cpp import Llama

    gguf = tmp_path / "grown.gguf"
    r = run_aura_here("export", "gguf", "--model", grown, "--outfile", gguf, "--quant", "f32")
    assert r.returncode == 0, r.stderr + r.stdout
    assert "Tokenisation identical" in r.stdout
    llm = Llama(str(gguf), vocab_only=True, verbose=False)
    for text in [*SPANISH_PROBES, *lines]:
        assert (
            llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)
            == ext(text, add_special_tokens=False).input_ids
        ), text
