"""``aura eval``: perplexity = exp(mean NLL) of a plain transformers forward; bits-per-byte on known text;
prepared dirs (same and different tokenizer), checkpoints, several models in one table."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
import torch

from tests.conftest import run_aura_here
from tests.tiny_models import build_llama, make_lora_adapter, stamp_adapter_base, train_tokenizer

TEXT = (
    "¿Dónde está el niño? ¡Allí, junto a la cigüeña! El año 2024 tuvo 366 días. "
    "Mañana llegará el pingüino a Logroño con su abuela, que vive en Cádiz desde 1987.\n"
) * 3


@pytest.fixture(scope="module")
def zoo(tiny_zoo, tmp_path_factory):
    root = tmp_path_factory.mktemp("eval")
    z = dict(tiny_zoo)
    other_tok = train_tokenizer(root / "tok500", vocab_size=500)
    z["llama500"] = build_llama(root / "llama500", other_tok, seed=5)
    z["text"] = root / "known.txt"
    z["text"].write_text(TEXT, encoding="utf-8")
    return z


def _reference_nll(model_dir, ids: list[int], seq: int) -> tuple[float, int]:
    """Sum of token NLLs with transformers' own loss over blocks of seq targets (overlapping by one id)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir)).eval()
    total, n = 0.0, 0
    for b in range(0, len(ids) - 1, seq):
        chunk = torch.tensor([ids[b : b + seq + 1]])
        with torch.no_grad():
            loss = model(chunk, labels=chunk).loss  # mean over chunk.shape[1] - 1 targets
        total += float(loss) * (chunk.shape[1] - 1)
        n += chunk.shape[1] - 1
    return total, n


def test_perplexity_and_bits_per_byte_match_reference(zoo, tmp_path):
    from transformers import AutoTokenizer

    out = tmp_path / "eval.json"
    r = run_aura_here(
        "eval",
        "--model",
        zoo["llama"],
        "--compare",
        zoo["gpt2"],
        "--data",
        zoo["text"],
        "--seq-len",
        "32",
        "--output",
        out,
    )
    assert r.returncode == 0, r.stderr
    assert "bits/byte" in r.stdout and str(zoo["gpt2"]) in r.stdout
    results = {row["model"]: row for row in json.loads(out.read_text())["results"]}
    n_bytes = len(TEXT.encode("utf-8"))
    for name in ("llama", "gpt2"):
        row = results[str(zoo[name])]
        tok = AutoTokenizer.from_pretrained(str(zoo[name]))
        ids = [tok.eos_token_id] + tok(TEXT, add_special_tokens=False)["input_ids"]
        nll, n = _reference_nll(zoo[name], ids, 32)
        assert row["tokens"] == n == len(ids) - 1
        assert row["bytes"] == n_bytes
        assert row["perplexity"] == pytest.approx(math.exp(nll / n), rel=1e-4)
        assert row["bits_per_byte"] == pytest.approx(nll / (math.log(2) * n_bytes), rel=1e-4)


def test_sliding_window_scores_every_token_once(zoo, tmp_path):
    out = tmp_path / "eval.json"
    r = run_aura_here(
        "eval",
        "--model",
        zoo["llama"],
        "--data",
        zoo["text"],
        "--seq-len",
        "32",
        "--stride",
        "8",
        "--batch-size",
        "3",
        "--output",
        out,
    )
    assert r.returncode == 0, r.stderr
    row = json.loads(out.read_text())["results"][0]
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(zoo["llama"]))
    ids = [tok.eos_token_id] + tok(TEXT, add_special_tokens=False)["input_ids"]
    assert row["tokens"] == len(ids) - 1
    # reference: each target t scored with the context of the window that first reaches it
    model = AutoModelForCausalLM.from_pretrained(str(zoo["llama"])).eval()
    total, scored = 0.0, 0
    for b in range(0, len(ids) - 1, 8):
        e = min(b + 32, len(ids) - 1)
        with torch.no_grad():
            logp = torch.log_softmax(model(torch.tensor([ids[b:e]])).logits[0], -1)
        for t in range(max(scored, b), e):
            total -= float(logp[t - b, ids[t + 1]])
        scored = e
        if e == len(ids) - 1:
            break
    assert row["nll_nats"] == pytest.approx(total, rel=1e-4)


def _prepared_dir(path, tok_dir, text: str):
    """A prepared dir in the documented aura-tokens-v1 format (val split only)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tok_dir))
    ids = []
    for doc in text.strip().split("\n"):
        ids += tok(doc, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    path.mkdir()
    np.asarray(ids, dtype=np.uint16).tofile(path / "val_00000.bin")
    shutil.copytree(tok_dir, path / "tokenizer")
    meta = {
        "format": "aura-tokens-v1",
        "dtype": "uint16",
        "tokenizer": {
            "name_or_path": str(tok_dir),
            "hash": "x",
            "vocab_size": len(tok),
            "eos_token_id": tok.eos_token_id,
        },
        "splits": {
            "val": {"tokens": len(ids), "documents": 3, "shards": [{"file": "val_00000.bin", "tokens": len(ids)}]}
        },
    }
    (path / "meta.json").write_text(json.dumps(meta))
    return ids


def test_prepared_dir_checkpoint_and_other_tokenizer(zoo, tmp_path):
    data = tmp_path / "prepared"
    ids = _prepared_dir(data, zoo["tokenizer"], TEXT)
    # a checkpoint without tokenizer files: the tokenizer comes from the run dir's final/
    run = tmp_path / "run"
    ckpt = run / "checkpoint-step-5"
    ckpt.mkdir(parents=True)
    for f in ("config.json", "model.safetensors"):
        shutil.copy(zoo["llama"] / f, ckpt / f)
    shutil.copytree(zoo["tokenizer"], run / "final")
    out = tmp_path / "eval.json"
    r = run_aura_here("eval", "--model", ckpt, zoo["llama500"], "--data", data, "--seq-len", "64", "--output", out)
    assert r.returncode == 0, r.stderr
    rows = json.loads(out.read_text())["results"]
    same, other = rows
    n_bytes = len("".join(TEXT.strip().split("\n")).encode("utf-8"))
    assert same["tokens"] == len(ids) and same["bytes"] == other["bytes"] == n_bytes
    nll, _ = _reference_nll(zoo["llama"], [zoo_eos(zoo)] + ids, 64)
    assert same["nll_nats"] == pytest.approx(nll, rel=1e-4)
    assert other["tokens"] != same["tokens"]  # re-tokenised with its own vocabulary
    assert "re-tokenised" in r.stdout


def zoo_eos(zoo) -> int:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(zoo["tokenizer"])).eos_token_id


def test_eval_bad_inputs(zoo, tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"hola \xff")
    r = run_aura_here("eval", "--model", zoo["llama"], "--data", bad)
    assert r.returncode == 2 and "byte 5" in r.stderr and "Traceback" not in r.stderr
    r = run_aura_here("eval", "--model", zoo["gpt2"], "--data", zoo["text"], "--seq-len", "4096")
    assert r.returncode == 2 and "--seq-len" in r.stderr and "Traceback" not in r.stderr


def test_adapter_whose_named_base_is_another_model_is_refused(zoo, tmp_path):
    # The adapter was trained on llama (800 tokens); its adapter_config now names llama500 (a user who
    # moved or renamed folders): same layer shapes, another vocabulary.
    adapter = stamp_adapter_base(make_lora_adapter(zoo["llama"], tmp_path / "adapter"), zoo["llama"])
    cfg_file = adapter / "adapter_config.json"
    cfg_file.write_text(
        json.dumps({**json.loads(cfg_file.read_text()), "base_model_name_or_path": str(zoo["llama500"])}),
        encoding="utf-8",
    )
    r = run_aura_here("eval", "--model", adapter, "--data", zoo["text"])
    assert r.returncode == 2 and "was trained on" in r.stderr and "vocab_size" in r.stderr, r.stderr
    assert "--allow-other-base" in r.stderr and "Traceback" not in r.stderr
    forced = run_aura_here("eval", "--model", adapter, "--data", zoo["text"], "--allow-other-base")
    assert forced.returncode == 0, forced.stderr
