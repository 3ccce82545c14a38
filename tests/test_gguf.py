"""``aura export gguf`` proven in llama.cpp: identical tokenisation, close logits, EOS, Modelfile;
Llama, GPT-2, Mistral, a LoRA-merged model, padded vocabularies; and the refusals.

The round-trip checks here are independent of ``gguf_verify`` (which the CLI also runs): the test
loads the GGUF in llama.cpp itself and compares with transformers.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from tests.conftest import run_aura, run_aura_here
from tests.evidence import importorskip
from tests.tiny_models import SPANISH_PROBES, build_llama, train_spm_tokenizer, train_tokenizer

llama_cpp = importorskip("llama_cpp", "llama-cpp")


@pytest.fixture(scope="module")
def zoo(tiny_zoo, tiny_adapter, tmp_path_factory):
    from aura.export.merge import MergeConfig, merge

    root = tmp_path_factory.mktemp("gguf")
    merge(MergeConfig(base_model=str(tiny_zoo["llama"]), adapter=str(tiny_adapter), output_dir=str(root / "merged")))
    return {**tiny_zoo, "merged": root / "merged"}


def _llama(path, **kw):
    from aura.inference.loading import llama_cpp_weights_plain

    with llama_cpp_weights_plain():  # llama.cpp's AMX matmul segfaults on Q8_0 (its issue 20824)
        return llama_cpp.Llama(model_path=str(path), verbose=False, **kw)


def _roundtrip(model_dir, gguf_path, *, rel_tol: float):
    """Independent check: tokenisation of the probes and next-token logits against transformers."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    vocab = _llama(gguf_path, vocab_only=True)
    chat = tok.apply_chat_template(
        [{"role": "user", "content": "¿Qué tal, Íñigo?"}], tokenize=False, add_generation_prompt=True
    )
    for text in [*SPANISH_PROBES, chat]:
        assert (
            vocab.tokenize(text.encode(), add_bos=False, special=True)
            == tok(text, add_special_tokens=False)["input_ids"]
        ), text
    assert vocab.token_eos() == tok.eos_token_id
    ids = tok(SPANISH_PROBES[0] + SPANISH_PROBES[2])["input_ids"]
    llm = _llama(gguf_path, n_ctx=128, logits_all=True)
    llm.eval(ids)
    got = np.asarray(llm.scores[: len(ids)])[:, : len(tok)]
    with torch.no_grad():
        ref = AutoModelForCausalLM.from_pretrained(str(model_dir)).eval()(torch.tensor([ids])).logits[0].numpy()
    ref = ref[:, : len(tok)]
    assert (got.argmax(-1) == ref.argmax(-1)).mean() >= 0.9
    assert np.abs(got - ref).max() <= rel_tol * (ref.max() - ref.min())


def _export(model, out, quant, *extra):
    r = run_aura_here("export", "gguf", "--model", model, "--outfile", out, "--quant", quant, *extra)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Tokenisation identical" in r.stdout and "End of generation recognised" in r.stdout
    return r


@pytest.mark.parametrize("quant,tol", [("f16", 0.02), ("q8_0", 0.08)])
def test_llama_roundtrip(zoo, tmp_path, quant, tol):
    out = tmp_path / f"llama-{quant}.gguf"
    _export(zoo["llama"], out, quant)
    _roundtrip(zoo["llama"], out, rel_tol=tol)
    modelfile = (tmp_path / f"llama-{quant}.Modelfile").read_text()
    assert f"FROM ./{out.name}" in modelfile
    assert 'PARAMETER stop "<|im_end|>"' in modelfile and 'PARAMETER stop "<|endoftext|>"' in modelfile
    assert "<|im_start|>{{ .Role }}" in modelfile
    assert not list(tmp_path.glob(".tmp-*"))


def test_gpt2_roundtrip(zoo, tmp_path):
    _export(zoo["gpt2"], tmp_path / "gpt2.gguf", "q8_0")
    _roundtrip(zoo["gpt2"], tmp_path / "gpt2.gguf", rel_tol=0.08)


def test_lora_merged_roundtrip(zoo, tmp_path):
    _export(zoo["merged"], tmp_path / "merged.gguf", "f16")
    _roundtrip(zoo["merged"], tmp_path / "merged.gguf", rel_tol=0.02)


def test_mistral_with_padded_vocab(zoo, tmp_path):
    import gguf

    model = build_llama(tmp_path / "mistral", zoo["tokenizer"], arch="mistral", vocab_pad=64)
    out = tmp_path / "mistral.gguf"
    r = _export(model, out, "f32")
    assert "unused reserved tokens" in r.stderr
    reader = gguf.GGUFReader(str(out))
    assert reader.get_field("general.architecture").contents() == "llama"
    assert len(reader.get_field("tokenizer.ggml.tokens").contents()) == 800 + 64
    _roundtrip(model, out, rel_tol=0.01)


def test_sentencepiece_style_tokenizer(tmp_path):
    """Llama 2 / Mistral 7B tokenizers (Metaspace "▁", byte fallback) -> tokenizer.ggml.model "llama"."""
    import gguf

    model = build_llama(tmp_path / "spm", train_spm_tokenizer(tmp_path / "spm_tok"), arch="mistral")
    out = tmp_path / "spm.gguf"
    _export(model, out, "f16")
    assert gguf.GGUFReader(str(out)).get_field("tokenizer.ggml.model").contents() == "llama"
    _roundtrip(model, out, rel_tol=0.02)
    assert "[INST]" in (tmp_path / "spm.Modelfile").read_text()


@pytest.mark.slow
def test_q4_k_m_of_a_briefly_trained_model_predicts_as_pytorch_does(zoo, tmp_path):
    """q4_k_m through llama.cpp's own quantiser, on a model trained for a few steps (random weights predict
    nothing worth agreeing on) of 256-wide rows (k-quants need multiples of 256: narrower rows fall back to
    other types): its tensors are Q4_K/Q6_K, and on held-out Spanish text llama.cpp's next token is PyTorch's
    at >= 85 % of the positions; a greedy continuation in llama.cpp starts as PyTorch's and every token of it
    is among PyTorch's 3 likeliest at its position (>= 85 % its likeliest)."""
    import gguf
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from aura.export.gguf import find_quantizer
    from tests.tiny_models import CORPUS_DIR, train_briefly

    if find_quantizer() is None:
        out = tmp_path / "q4.gguf"
        r = run_aura("export", "gguf", "--model", zoo["llama"], "--outfile", out, "--quant", "q4_k_m")
        assert r.returncode == 2 and "quantiser" in r.stderr and not out.exists()
        return
    model_dir = train_briefly(
        build_llama(tmp_path / "random", zoo["tokenizer"], hidden=256, intermediate=512),
        tmp_path / "trained",
        held_out="narrativa.txt",
    )
    out = tmp_path / "q4.gguf"
    _export(model_dir, out, "q4_k_m")
    reader = gguf.GGUFReader(str(out))
    assert reader.get_field("general.file_type").contents() == 15  # MOSTLY_Q4_K_M
    kinds = [t.tensor_type.name for t in reader.tensors]
    assert kinds.count("Q4_K") >= 10 and "Q6_K" in kinds, kinds  # every matrix k-quantised, none fell back
    assert set(kinds) <= {"Q4_K", "Q6_K", "F32"}, kinds

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir)).eval()
    ids = tok((CORPUS_DIR / "narrativa.txt").read_text(encoding="utf-8"))["input_ids"][:200]
    llm = _llama(out, n_ctx=256, logits_all=True)
    llm.eval(ids)
    got = np.asarray(llm.scores[: len(ids)])[:, : len(tok)]
    with torch.no_grad():
        ref = model(torch.tensor([ids])).logits[0].numpy()[:, : len(tok)]  # (T, vocab)
    assert float((got.argmax(-1) == ref.argmax(-1)).mean()) >= 0.85
    prompt, gen = ids[:20], []
    for t in llm.generate(prompt, top_k=1, top_p=1.0, temp=0.0, reset=True):
        gen.append(int(t))
        if len(gen) == 32:
            break
    with torch.no_grad():
        logits = model(torch.tensor([prompt + gen])).logits[0, len(prompt) - 1 : -1]  # (32, vocab): PyTorch's view
    ranks = [int((logits[i] > logits[i, t]).sum()) for i, t in enumerate(gen)]
    assert ranks[:2] == [0, 0] and max(ranks) <= 2 and ranks.count(0) >= 0.85 * len(ranks), ranks


def test_refusals_and_damaged_gguf(zoo, tmp_path):
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    neox = tmp_path / "neox"
    GPTNeoXForCausalLM(
        GPTNeoXConfig(vocab_size=800, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    ).save_pretrained(neox)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        (neox / f).write_bytes((zoo["llama"] / f).read_bytes())
    r = run_aura_here("export", "gguf", "--model", neox, "--outfile", tmp_path / "neox.gguf")
    assert r.returncode == 2 and "GPTNeoXForCausalLM" in r.stderr and "Traceback" not in r.stderr
    assert not list(tmp_path.glob("*.gguf")) and not list(tmp_path.glob(".tmp-*"))

    good = tmp_path / "good.gguf"
    _export(zoo["llama"], good, "q8_0")
    r = run_aura_here("generate", "--model", good, "--prompt", "Hola", "--max-new-tokens", "5", "--temperature", "0")
    assert r.returncode == 0, r.stderr
    r = run_aura_here("generate", "--model", good, "--prompt", "Hola", "--max-new-tokens", "5", "--chat")
    assert r.returncode == 0, r.stderr
    bad = tmp_path / "cut.gguf"
    bad.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    for cmd in ("generate", "chat"):
        extra = ["--prompt", "Hola"] if cmd == "generate" else []
        r = run_aura(cmd, "--model", bad, *extra, input="/exit\n")
        assert r.returncode == 2, r.stderr
        assert "not a valid GGUF" in r.stderr and "Traceback" not in r.stderr


def test_verification_compares_tokens_even_when_the_model_ends_at_once(zoo, tmp_path):
    """A model whose first greedy token is EOS used to 'match PyTorch for the first 0 tokens'."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(zoo["llama"]))
    eos = model.config.eos_token_id
    with torch.no_grad():
        # every token embeds alike, so every position ends in the same hidden state h; EOS's output
        # row along h makes EOS the greedy choice everywhere, by a wide margin
        emb = model.get_input_embeddings().weight
        emb.copy_(emb[5].expand_as(emb))
        h = model.model(torch.tensor([[1, 2, 3]])).last_hidden_state[0, -1]
        model.lm_head.weight[eos] = 40 * h / h.norm() ** 2
    eos_model = tmp_path / "eos-model"
    model.save_pretrained(eos_model)
    for f in zoo["llama"].glob("*token*"):
        (eos_model / f.name).write_bytes(f.read_bytes())
    r = _export(eos_model, tmp_path / "eos.gguf", "f16")
    assert "first 0 tokens" not in r.stdout
    assert "identical tokens from the start: 12 of 12" in r.stdout and "end its answer at token 1" in r.stdout, r.stdout


def test_impossible_output_is_refused_before_loading(zoo, tmp_path):
    blocker = tmp_path / "somefile.txt"
    blocker.write_text("not a folder", encoding="utf-8")
    for outfile, expected in (
        (blocker / "x.gguf", "is a file, not a directory"),
        ("/proc/aura-test/x.gguf", "nothing can be created in /proc"),
    ):
        r = run_aura_here("export", "gguf", "--model", zoo["llama"], "--outfile", outfile, "--quant", "f16")
        assert r.returncode == 2, r.stdout + r.stderr
        assert expected in r.stderr and "--outfile" in r.stderr
        assert "our bug" not in r.stderr and "Traceback" not in r.stderr
        assert "Writing" not in r.stdout  # refused before any work
    es = run_aura_here(
        "export", "gguf", "--model", zoo["llama"], "--outfile", blocker / "x.gguf", env={"AURA_LANG": "es"}
    )
    assert es.returncode == 2 and "es un archivo, no un directorio" in es.stderr


def test_one_modelfile_per_gguf_with_the_runs_system_message_and_name(tmp_path):
    """Issue 25.6: every export rewrote one shared `Modelfile` and the hint always said `ollama create
    mi-modelo`; now NAME.Modelfile sits beside NAME.gguf with the chat format, the stops and the system
    message Aura's chat template adds, and the hint names that file and a model name from the run."""
    from transformers import AutoTokenizer

    from aura.text.templates import AURA_SYSTEM, get_template

    tok_dir = train_tokenizer(tmp_path / "tok", vocab_size=400)
    tok = AutoTokenizer.from_pretrained(tok_dir)
    tok.chat_template = get_template("aura")
    tok.save_pretrained(tok_dir)
    model = build_llama(tmp_path / "runs" / "Chat_ES" / "final", tok_dir, hidden=32, layers=1)
    out_dir = tmp_path / "gguf"
    texts = {}
    for quant in ("f16", "q8_0"):
        r = run_aura_here("export", "gguf", "--model", model, "--output-dir", out_dir, "--quant", quant, "--no-verify")
        assert r.returncode == 0, r.stdout + r.stderr
        modelfile = out_dir / f"model-{quant}.Modelfile"
        assert f"ollama create chat_es:{quant} -f model-{quant}.Modelfile" in r.stdout, r.stdout
        texts[quant] = modelfile.read_text(encoding="utf-8")
    assert not (out_dir / "Modelfile").exists()
    for quant, text in texts.items():  # the first export's Modelfile survived the second
        assert f"FROM ./model-{quant}.gguf" in text and f'SYSTEM """{AURA_SYSTEM}"""' in text, text
        assert 'PARAMETER stop "<|im_end|>"' in text and "<|im_start|>{{ .Role }}" in text
        assert f"ollama create chat_es:{quant} -f model-{quant}.Modelfile" in text
    es = run_aura_here(
        "export",
        "gguf",
        "--model",
        model,
        "--output-dir",
        out_dir,
        "--quant",
        "f16",
        "--no-verify",
        "--overwrite",
        "--name",
        "Mi Modelo",
        env={"AURA_LANG": "es"},
    )
    assert es.returncode == 0 and "ollama create mi-modelo:f16 -f model-f16.Modelfile" in es.stdout, es.stdout
    # a template without a default system message gets no SYSTEM line
    plain = build_llama(tmp_path / "plain", train_tokenizer(tmp_path / "tok2", vocab_size=400), hidden=32, layers=1)
    r = run_aura_here("export", "gguf", "--model", plain, "--outfile", tmp_path / "plain.gguf", "--no-verify")
    assert r.returncode == 0 and "SYSTEM" not in (tmp_path / "plain.Modelfile").read_text()
    assert "ollama create plain:f16 -f plain.Modelfile" in r.stdout


def test_verification_figures_are_written_beside_the_gguf_and_never_outlive_it(zoo, tmp_path):
    """NAME.verify.json holds what llama.cpp's verification measured (top-1 agreement and max |logit diff|
    equal to an independent measurement on the same text), is replaced by the next export and removed by
    an unverified one; a file of that name that Aura did not write is refused (exit 2, nothing written)."""
    import json

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from aura.export.gguf_verify import VERIFY_TEXTS

    out = tmp_path / "llama-f16.gguf"
    _export(zoo["llama"], out, "f16")
    record = json.loads((tmp_path / "llama-f16.verify.json").read_text(encoding="utf-8"))
    assert record["gguf"] == out.name and record["bytes"] == out.stat().st_size and record["quant"] == "f16"
    tok = AutoTokenizer.from_pretrained(str(zoo["llama"]))
    ids = tok(VERIFY_TEXTS[0] + " " + VERIFY_TEXTS[3], add_special_tokens=True)["input_ids"]
    llm = _llama(out, n_ctx=256, logits_all=True)
    llm.eval(ids)
    got = np.asarray(llm.scores[: len(ids)], dtype=np.float32)[:, : len(tok)]
    with torch.no_grad():
        ref = AutoModelForCausalLM.from_pretrained(str(zoo["llama"])).eval()(torch.tensor([ids])).logits[0].numpy()
    ref = ref[:, : len(tok)]
    assert record["top1"] == pytest.approx(float((got.argmax(-1) == ref.argmax(-1)).mean()))
    assert record["max_abs_diff"] == pytest.approx(float(np.abs(got - ref).max()), rel=1e-4)
    assert record["generated"] == 12 and 0 <= record["agreeing"] <= 12
    assert record["tolerance"] == {"rel_diff": 0.02, "top1": 0.95}

    r = run_aura_here("export", "gguf", "--model", zoo["llama"], "--outfile", out, "--no-verify", "--overwrite")
    assert r.returncode == 0, r.stderr
    record = json.loads((tmp_path / "llama-f16.verify.json").read_text(encoding="utf-8"))
    assert record["verified"] is False and record["reason"] == "no_verify"  # an unverified file shows no old figures
    assert "top1" not in record and record["bytes"] == out.stat().st_size

    theirs = tmp_path / "other"
    theirs.mkdir()
    (theirs / "model-f16.verify.json").write_text('{"mine": 1}\n', encoding="utf-8")
    r = run_aura_here("export", "gguf", "--model", zoo["llama"], "--output-dir", theirs)
    assert r.returncode == 2 and "model-f16.verify.json" in r.stderr and "--overwrite" in r.stderr
    assert (theirs / "model-f16.verify.json").read_text(encoding="utf-8") == '{"mine": 1}\n'
    assert not list(theirs.glob("*.gguf"))


def test_without_the_verifier_the_gguf_is_written_marked_not_verified_and_verify_only_verifies_it(
    zoo, tmp_path, monkeypatch
):
    """Issue 51: without llama-cpp-python the export still writes the GGUF (it needs no llama.cpp), and its
    NAME.verify.json says not verified, why, and the one command that verifies it later; that command, with
    llama.cpp here, runs the export's checks on the file and rewrites the record with their figures."""
    import json

    out = tmp_path / "sin verificar" / "m-f16.gguf"
    with monkeypatch.context() as m:
        m.setitem(sys.modules, "llama_cpp", None)  # `import llama_cpp` fails as when it is not installed
        r = run_aura_here(
            "export", "gguf", "--model", zoo["llama"], "--outfile", out, "--quant", "f16", env={"AURA_LANG": "es"}
        )
    assert r.returncode == 0, r.stdout + r.stderr
    record = json.loads(out.with_name("m-f16.verify.json").read_text(encoding="utf-8"))
    command = f"aura export gguf --verify-only '{out}'"
    assert record["verified"] is False and record["reason"] == "no_llama_cpp" and "top1" not in record
    assert record["bytes"] == out.stat().st_size and record["model"] == str(zoo["llama"].resolve())
    assert record["verify_command"] == command
    assert "El GGUF no está verificado en llama.cpp (falta llama-cpp-python)" in r.stderr and command in r.stderr

    r = run_aura_here("export", "gguf", "--verify-only", out)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Tokenisation identical" in r.stdout and "Verified: " in r.stdout
    record = json.loads(out.with_name("m-f16.verify.json").read_text(encoding="utf-8"))
    assert record["verified"] is True and record["quant"] == "f16" and record["bytes"] == out.stat().st_size
    assert record["top1"] >= 0.95 and record["tolerance"] == {"rel_diff": 0.02, "top1": 0.95}
    _roundtrip(zoo["llama"], out, rel_tol=0.02)

    alone = tmp_path / "alone.gguf"  # no record beside it: --model names the model
    out.replace(alone)
    r = run_aura_here("export", "gguf", "--verify-only", alone)
    assert r.returncode == 2 and "--model is missing" in r.stderr, r.stderr
    r = run_aura_here("export", "gguf", "--verify-only", alone, "--model", zoo["llama"])
    assert r.returncode == 0 and json.loads((tmp_path / "alone.verify.json").read_text())["quant"] == "f16"


def test_llama_cpp_loads_keep_plain_weights_on_an_amx_cpu_only_while_loading():
    """llama.cpp's AMX matmul segfaults on Q8_0 (test_llama_roundtrip's q8_0 case crashed the worker on a Xeon
    with AMX): there a load asks for plain weight buffers, elsewhere llama.cpp's defaults stay, and the
    library's defaults are restored afterwards."""
    from llama_cpp import llama_cpp as lib

    from aura.inference.loading import llama_cpp_weights_plain

    amx = "amx_int8" in next((line.split() for line in open("/proc/cpuinfo") if line.startswith("flags")), [])
    assert lib.llama_model_default_params().use_extra_bufts is True
    with llama_cpp_weights_plain():
        assert lib.llama_model_default_params().use_extra_bufts is (not amx)
    assert lib.llama_model_default_params().use_extra_bufts is True
