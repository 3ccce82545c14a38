"""Byte-level BPE training, transformers compatibility, identity hash, loading and pad tokens."""

from __future__ import annotations

import json

import pytest

from aura.core.errors import AuraError
from tests.conftest import RESOURCES, run_aura, run_aura_here

SAMPLES = [
    "¿Qué tal, señor Muñoz? ¡Muy bien, gracias!",
    "El pingüino comió ñoquis en Logroño; acción, canción, corazón.",
    "Emoji: 🤖🇪🇸 y 👩‍💻 también.",
    "Números 1234567 y 3,14159 — 2024-11-21.",
    "dos  espacios   y tres\ny un salto\n\ny dos saltos\ttab",
    "  empieza con espacios",
]


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    from aura.tokenizer.train import train_bpe

    out = tmp_path_factory.mktemp("tok") / "tok"
    return train_bpe(inputs=[str(RESOURCES / "corpus_es")], vocab_size=400, output_dir=out, doc_sep="blankline")


def test_roundtrip_and_autotokenizer_identical(tok_dir):
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    raw = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    hf = AutoTokenizer.from_pretrained(str(tok_dir))
    for text in SAMPLES:
        ids = raw.encode(text, add_special_tokens=False).ids
        assert raw.decode(ids) == text
        assert hf.encode(text, add_special_tokens=False) == ids
        assert hf(text)["input_ids"] == raw.encode(text).ids
        assert hf.decode(ids) == text
    # NFC: a decomposed accent encodes like the composed one; accents are never stripped
    assert raw.encode("cafe\u0301").ids == raw.encode("café").ids
    assert raw.decode(raw.encode("ÁÉÍÓÚ ñÑ ¿¡").ids) == "ÁÉÍÓÚ ñÑ ¿¡"


def test_saved_config_and_special_tokens(tok_dir):
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(tok_dir))
    assert hf.eos_token == hf.bos_token == "<|endoftext|>"
    assert hf.pad_token == "<|pad|>" and hf.pad_token_id != hf.eos_token_id
    assert hf.model_max_length == 2048
    assert len(hf) == 400
    for t in ("<|im_start|>", "<|im_end|>", "<|system|>", "<|user|>", "<|assistant|>", "<|reserved_0|>"):
        assert hf.convert_tokens_to_ids(t) is not None
        assert hf.encode(f"a{t}b", add_special_tokens=False).count(hf.convert_tokens_to_ids(t)) == 1
    meta = json.loads((tok_dir / "aura_tokenizer.json").read_text())
    assert meta["vocab_size"] == 400 and meta["special_tokens"]["<|endoftext|>"] == hf.eos_token_id
    assert 1.0 < meta["fertility"]["tokens_per_word"] < 6.0 and meta["fertility"]["heldout_documents"] >= 1
    assert meta["aura_version"] and meta["sources"]


def test_hash_is_identity(tok_dir, tmp_path):
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    from aura.tokenizer.loading import load_tokenizer, tokenizer_hash
    from aura.tokenizer.train import train_bpe

    h = tokenizer_hash(tok_dir)
    assert h == json.loads((tok_dir / "aura_tokenizer.json").read_text())["hash"]
    assert h == tokenizer_hash(AutoTokenizer.from_pretrained(str(tok_dir)))
    assert h == tokenizer_hash(load_tokenizer(str(tok_dir)))
    assert h == tokenizer_hash(Tokenizer.from_file(str(tok_dir / "tokenizer.json")))
    other = train_bpe(
        inputs=[str(RESOURCES / "corpus_es" / "narrativa.txt")],
        vocab_size=350,
        output_dir=tmp_path / "other",
        doc_sep="blankline",
    )
    assert tokenizer_hash(other) != h


def test_load_tokenizer_adds_pad_and_names_missing(tmp_path, capsys):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from aura.tokenizer.loading import load_tokenizer
    from aura.tokenizer.train import build_bpe_trainer_pair

    tok, trainer = build_bpe_trainer_pair(300, 1)
    tok.train_from_iterator(["hola mundo " * 20, "adiós mundo"], trainer=trainer)
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>").save_pretrained(tmp_path / "nopad")
    assert load_tokenizer(str(tmp_path / "nopad")).pad_token == "<|pad|>"  # the reserved one is reused

    plain = Tokenizer(models.BPE())
    plain.pre_tokenizer = pre_tokenizers.ByteLevel()
    plain.train_from_iterator(
        ["hola mundo " * 20], trainer=trainers.BpeTrainer(vocab_size=300, special_tokens=["</s>"])
    )
    PreTrainedTokenizerFast(tokenizer_object=plain, eos_token="</s>").save_pretrained(tmp_path / "eosonly")
    loaded = load_tokenizer(str(tmp_path / "eosonly"))
    assert loaded.pad_token == "</s>" and loaded.pad_token_id == loaded.eos_token_id
    assert "padding" in capsys.readouterr().out

    PreTrainedTokenizerFast(tokenizer_object=plain).save_pretrained(tmp_path / "bare")
    loaded = load_tokenizer(str(tmp_path / "bare"))
    assert loaded.pad_token == "<|pad|>" and loaded.pad_token_id == len(loaded) - 1
    with pytest.raises(AuraError, match="does_not_exist"):
        load_tokenizer(str(tmp_path / "does_not_exist"))


def test_one_tokenizer_loader_for_training_and_inference(tmp_path, capsys):
    """Inference and export load through the same rule, but never grow a trained model's vocabulary,
    and a tokenizer that is there but unreadable is named as such (not as "not found")."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from aura.inference.loading import load_model_tokenizer
    from aura.tokenizer.loading import load_tokenizer

    plain = Tokenizer(models.BPE())
    plain.pre_tokenizer = pre_tokenizers.ByteLevel()
    plain.train_from_iterator(["hola mundo " * 20], trainer=trainers.BpeTrainer(vocab_size=300))
    PreTrainedTokenizerFast(tokenizer_object=plain).save_pretrained(tmp_path / "bare")
    vocab = len(load_model_tokenizer(tmp_path / "bare"))
    assert len(load_tokenizer(str(tmp_path / "bare"))) == vocab + 1  # training adds <|pad|>, inference does not
    (tmp_path / "bare" / "tokenizer.json").write_text("{not json", encoding="utf-8")
    for load in (lambda: load_tokenizer(str(tmp_path / "bare")), lambda: load_model_tokenizer(tmp_path / "bare")):
        with pytest.raises(AuraError, match=r"bare/tokenizer.json is not valid JSON .*Copy the tokenizer folder"):
            load()


def test_cli_train_jsonl_and_too_small_vocab(tmp_path):
    data = tmp_path / "d.jsonl"
    paragraphs = (RESOURCES / "corpus_es" / "enciclopedia.txt").read_text(encoding="utf-8").split("\n\n")
    data.write_text(
        "".join(json.dumps({"contenido": p}, ensure_ascii=False) + "\n" for p in paragraphs if p.strip()),
        encoding="utf-8",
    )
    r = run_aura(
        "tokenizer", "train", data, "--text-field", "contenido", "--vocab-size", "300", "--output-dir", tmp_path / "t"
    )
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "t" / "tokenizer.json").is_file() and "fertility" in r.stdout
    r = run_aura_here(
        "tokenizer", "train", data, "--vocab-size", "100", "--output-dir", tmp_path / "t2", env={"AURA_LANG": "es"}
    )
    assert r.returncode == 2 and "demasiado pequeño" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "t2").exists()


def test_tokenizer_typo_and_unreachable_hub_fail_at_once(tmp_path):
    import time

    corpus = RESOURCES / "corpus_es"
    (tmp_path / "tokenizers").mkdir()
    # Offline, the hub's retries used to take about a minute before the same failure.
    unreachable = {"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_OFFLINE": ""}
    cases = [
        ("tokenizers/typo", "read as a local path"),  # runs/ exists here: a typo, not a repo
        ("./tokenizers/es", "read as a local path"),
        ("someone/spanish-bpe", "cannot be reached"),
    ]  # a hub name, hub unreachable
    for name, expected in cases:
        t0 = time.perf_counter()
        r = run_aura(
            "data",
            "prepare",
            corpus,
            "--tokenizer",
            name,
            "--output-dir",
            tmp_path / "out",
            env=unreachable,
            cwd=tmp_path,
        )
        took = time.perf_counter() - t0
        assert r.returncode == 2, (name, r.stderr)
        assert f"--tokenizer {name}" in r.stderr and expected in r.stderr, r.stderr
        assert "Retrying" not in r.stderr and "Traceback" not in r.stderr
        assert took < 30, (name, took)
    es = run_aura(
        "data",
        "prepare",
        corpus,
        "--tokenizer",
        "tokenizers/typo",
        "--output-dir",
        tmp_path / "o",
        env={**unreachable, "AURA_LANG": "es"},
        cwd=tmp_path,
    )
    assert es.returncode == 2 and "Revisa que esté bien escrita" in es.stderr


def test_aura_pretrained_model_finetunes_on_the_users_csv(tmp_path):
    """An Aura tokenizer carries Aura's chat template into pretrain's final/, so fine-tuning on the
    user's own CSV needs no --template."""
    r = run_aura("tokenizer", "train", RESOURCES / "corpus_es", "--vocab-size", "400", "--output-dir", tmp_path / "tok")
    assert r.returncode == 0, r.stderr
    assert (
        "<|im_start|>" in json.loads((tmp_path / "tok" / "tokenizer_config.json").read_text()).get("chat_template", "")
        or (tmp_path / "tok" / "chat_template.jinja").is_file()
    )
    r = run_aura(
        "data", "prepare", RESOURCES / "corpus_es", "--tokenizer", tmp_path / "tok", "--output-dir", tmp_path / "data"
    )
    assert r.returncode == 0, r.stderr
    r = run_aura(
        "pretrain",
        "--data",
        tmp_path / "data",
        "--output-dir",
        tmp_path / "run",
        "--model-preset",
        "manual",
        "--embed-size",
        "64",
        "--num-layers",
        "2",
        "--num-heads",
        "4",
        "--seq-length",
        "64",
        "--intermediate-size",
        "128",
        "--batch-size",
        "4",
        "--max-steps",
        "2",
        "--save-steps",
        "0",
        "--sample-tokens",
        "0",
    )
    assert r.returncode == 0, r.stdout + r.stderr
    csv_file = tmp_path / "mine.csv"
    csv_file.write_text(
        "instruction,response\n" + "".join(f"¿Cuánto es {i} más {i}?,Es {2 * i}.\n" for i in range(12)),
        encoding="utf-8",
    )
    r = run_aura(
        "finetune",
        "--base-model",
        tmp_path / "run" / "final",
        "--data",
        csv_file,
        "--output-dir",
        tmp_path / "ft",
        "--max-steps",
        "2",
        "--save-steps",
        "0",
        "--batch-size",
        "2",
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Chat template: aura" in r.stdout + r.stderr
    assert "FutureWarning" not in r.stdout + r.stderr  # peft reading a deprecated transformers property


def test_small_corpus_explains_short_vocabulary_and_missing_fertility(tmp_path):
    text = tmp_path / "poco.txt"
    paragraphs = (RESOURCES / "corpus_es" / "enciclopedia.txt").read_text(encoding="utf-8").split("\n\n")[:4]
    text.write_text("\n".join(p.replace("\n", " ") for p in paragraphs), encoding="utf-8")
    r = run_aura("tokenizer", "train", text, "--vocab-size", "8000", "--output-dir", tmp_path / "t")
    assert r.returncode == 0, r.stderr
    out = r.stdout + r.stderr
    assert "not the 8000 asked" in out and "--min-frequency" in out and "more text" in out
    assert "0 held-out" not in out and "Fertility not measured" in out and "--heldout-fraction" in out
    r = run_aura(
        "tokenizer",
        "train",
        text,
        "--vocab-size",
        "8000",
        "--heldout-fraction",
        "0",
        "--output-dir",
        tmp_path / "t0",
        env={"AURA_LANG": "es"},
    )
    out = r.stdout + r.stderr
    assert r.returncode == 0 and "Fertilidad sin medir" in out and "--heldout-fraction 0" in out
    assert "no los 8000 pedidos" in out or "no los 8.000 pedidos" in out
