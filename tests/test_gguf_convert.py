"""``aura export gguf`` through llama.cpp's own converter (``convert_hf_to_gguf.py`` from the installed
llama-cpp-python's sdist, the same llama.cpp that verifies): a tiny Llama with a real SentencePiece
``tokenizer.model`` exported by the converter and by Aura's writer, both verified in llama.cpp, with the same
tokens and close logits; ``auto`` keeps Aura's writer for an Aura-trained byte-level BPE tokenizer (a
pre-tokeniser hash llama.cpp cannot know) and says why; what ``--converter llama.cpp`` refuses.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import run_aura_here
from tests.evidence import importorskip, require_or_skip
from tests.test_gguf import _export, _llama, _roundtrip
from tests.tiny_models import SPANISH_PROBES, build_llama, train_sentencepiece

importorskip("llama_cpp", "llama-cpp")


@pytest.fixture(scope="module")
def converter():
    """llama.cpp's converter folder, as Aura finds it (fetched once into Aura's cache when missing)."""
    from aura.core.errors import AuraError
    from aura.export.gguf_convert import locate

    importorskip("sentencepiece", "llama-cpp-converter")
    try:
        return locate(fetch=True)
    except AuraError as e:
        require_or_skip("llama-cpp-converter", str(e))


@pytest.fixture(scope="module")
def llama2(tmp_path_factory):
    root = tmp_path_factory.mktemp("gguf-convert")
    return build_llama(root / "llama2", train_sentencepiece(root / "spm"))


@pytest.mark.slow  # two verified exports, one through the converter's subprocess (and its first fetch)
def test_llama_through_llama_cpp_converter_equals_aura_writer(converter, llama2, tmp_path):
    conv, ours = tmp_path / "conv.gguf", tmp_path / "aura.gguf"
    r = _export(llama2, conv, "f16", "--converter", "llama.cpp")  # verified in llama.cpp by the command
    assert f"llama.cpp's converter writes the GGUF ({converter})" in r.stdout, r.stdout
    assert "LlamaForCausalLM -> llama.cpp" in r.stdout and "identical tokens from the start: 12 of 12" in r.stdout
    _export(llama2, ours, "f16", "--converter", "aura")
    for path, writer in ((conv, "llama.cpp"), (ours, "aura")):
        assert json.loads(path.with_name(path.stem + ".verify.json").read_text())["writer"] == writer
    _roundtrip(llama2, conv, rel_tol=0.02)  # independent of the command's own verification
    a, b = _llama(conv, vocab_only=True), _llama(ours, vocab_only=True)
    for text in SPANISH_PROBES:
        assert a.tokenize(text.encode(), special=True) == b.tokenize(text.encode(), special=True), text
    ids = a.tokenize(SPANISH_PROBES[0].encode())
    logits = []
    for path in (conv, ours):
        llm = _llama(path, n_ctx=64, logits_all=True)
        llm.eval(ids)
        logits.append(np.asarray(llm.scores[: len(ids)]))
    assert (logits[0].argmax(-1) == logits[1].argmax(-1)).all()
    assert np.abs(logits[0] - logits[1]).max() <= 0.01 * (logits[1].max() - logits[1].min())
    import gguf

    reader = gguf.GGUFReader(str(conv))
    assert reader.get_field("tokenizer.ggml.model").contents() == "llama"  # read from tokenizer.model
    assert "convert_hf_to_gguf" not in str(list(tmp_path.iterdir()))
    assert not list(tmp_path.glob(".tmp-*"))


def test_auto_keeps_aura_writer_for_an_aura_trained_tokenizer_and_says_why(converter, tiny_zoo, tmp_path):
    out = tmp_path / "q.gguf"
    r = run_aura_here(
        "export",
        "gguf",
        "--model",
        tiny_zoo["llama"],
        "--outfile",
        out,
        "--quant",
        "f16",
        "--no-verify",
        env={"AURA_LLAMA_CPP_DIR": str(converter)},
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert (
        "Aura's writer writes the GGUF: llama.cpp's converter does not recognise this BPE tokenizer's "
        "pre-tokeniser (hash" in r.stdout
    ), r.stdout
    assert "LlamaForCausalLM -> llama" in r.stdout and out.is_file()


def test_converter_refusals_before_anything_is_written(converter, tiny_zoo, tmp_path):
    out = tmp_path / "x.gguf"
    r = run_aura_here(
        "export",
        "gguf",
        "--model",
        tiny_zoo["llama"],
        "--outfile",
        out,
        "--converter",
        "llama.cpp",
        "--llama-cpp-dir",
        converter,
    )
    assert r.returncode == 2 and "llama.cpp's converter cannot export" in r.stdout + r.stderr
    assert "pre-tokeniser (hash" in r.stdout + r.stderr and "--converter aura" in r.stdout + r.stderr
    r = run_aura_here("export", "gguf", "--model", tiny_zoo["llama"], "--outfile", out, "--llama-cpp-dir", tmp_path)
    said = r.stdout + r.stderr
    assert r.returncode == 2 and "convert_hf_to_gguf.py is missing" in said and str(tmp_path) in said, said
    r = run_aura_here("export", "gguf", "--model", tiny_zoo["llama"], "--outfile", out, "--converter", "ollama")
    assert r.returncode == 2 and "'auto', 'aura', 'llama.cpp'" in r.stdout + r.stderr
    assert not list(tmp_path.iterdir())
