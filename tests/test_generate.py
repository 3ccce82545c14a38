"""``aura generate``: greedy output equals transformers', batch JSONL format, adapters, clear bad-input errors."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from tests.conftest import run_aura, run_aura_here
from tests.tiny_models import build_llama, make_lora_adapter, stamp_adapter_base, train_tokenizer


@pytest.fixture(scope="module")
def zoo(tiny_zoo, tiny_adapter):
    return {**tiny_zoo, "adapter": tiny_adapter}


def _greedy(model, tok, text: str, n: int, *, chat: bool = False) -> str:
    if chat:
        text = tok.apply_chat_template([{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True)
    ids = tok(text, add_special_tokens=not chat, return_tensors="pt")["input_ids"]
    eos = [tok.eos_token_id, tok.convert_tokens_to_ids("<|im_end|>")]
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=n, do_sample=False, eos_token_id=eos, pad_token_id=tok.pad_token_id)
    return tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True)


def test_batch_jsonl_matches_transformers_greedy(zoo, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    prompts = ["Hola, ¿qué tal?", "El pingüino 🐧 de Logroño", "Érase una vez"]
    pfile = tmp_path / "prompts.txt"
    pfile.write_text("\n".join(prompts) + "\n\n", encoding="utf-8")
    out = tmp_path / "res.jsonl"
    r = run_aura_here(
        "generate",
        "--model",
        zoo["llama"],
        "--adapter",
        zoo["adapter"],
        "--prompts-file",
        pfile,
        "--output",
        out,
        "--temperature",
        "0",
        "--max-new-tokens",
        "8",
        "--chat",
    )
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [row["prompt"] for row in rows] == prompts
    for row in rows:
        assert set(row) == {"prompt", "output", "tokens", "seconds", "tokens_per_s", "model"}
        assert 1 <= row["tokens"] <= 8 and row["seconds"] > 0 and row["tokens_per_s"] > 0
        assert str(zoo["adapter"]) in row["model"]
    tok = AutoTokenizer.from_pretrained(str(zoo["llama"]))
    model = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(str(zoo["llama"])), str(zoo["adapter"])
    ).eval()
    assert [row["output"] for row in rows] == [_greedy(model, tok, p, 8, chat=True) for p in prompts]


def test_single_prompt_streams_greedy_text(zoo):
    """... importing neither peft nor bitsandbytes for a plain model (``transformers.set_seed`` imported
    both, through ``transformers.trainer_utils``: about a second of every generate and chat)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    r = run_aura(
        "generate",
        "--model",
        zoo["gpt2"],
        "--prompt",
        "Buenos días",
        "--temperature",
        "0",
        "--max-new-tokens",
        "6",
        env={"PYTHONPROFILEIMPORTTIME": "1"},
    )
    assert r.returncode == 0, r.stderr
    imported = {line.rsplit("|", 1)[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    assert "torch" in imported and not imported & {"peft", "bitsandbytes", "transformers.trainer_utils"}, sorted(
        imported & {"peft", "bitsandbytes", "transformers.trainer_utils"}
    )
    tok = AutoTokenizer.from_pretrained(str(zoo["gpt2"]))
    expected = _greedy(AutoModelForCausalLM.from_pretrained(str(zoo["gpt2"])).eval(), tok, "Buenos días", 6)
    assert r.stdout.startswith("Buenos días" + expected)
    assert "tokens/s" in r.stdout


def test_bad_inputs_are_clear(zoo, tmp_path):
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("Hola\nni\xf1o\n".encode("latin-1"))
    r = run_aura_here("generate", "--model", zoo["llama"], "--prompts-file", bad)
    assert r.returncode == 2 and str(bad) in r.stderr and "byte 7" in r.stderr and "line 2" in r.stderr
    assert "Traceback" not in r.stderr
    no_tok = tmp_path / "no_tok"
    no_tok.mkdir()
    for f in ("config.json", "model.safetensors"):
        shutil.copy(zoo["llama"] / f, no_tok / f)
    r = run_aura_here("generate", "--model", no_tok, "--prompt", "hola")
    assert r.returncode == 2 and "tokenizer" in r.stderr.lower() and "Traceback" not in r.stderr
    r = run_aura_here("generate", "--model", zoo["llama"], "--prompt", "hola", "--top-p", "1.5")
    assert r.returncode == 2 and "--top-p" in r.stderr


@pytest.mark.slow
def test_adapter_on_a_base_with_another_vocabulary_is_refused(zoo, tmp_path):
    other = build_llama(tmp_path / "other", train_tokenizer(tmp_path / "tok600", vocab_size=600))
    adapter = stamp_adapter_base(make_lora_adapter(zoo["llama"], tmp_path / "adapter"), zoo["llama"])
    # generate in this process (the CLI's entry point: same exit code and messages, no interpreter start-up);
    # chat in its own, as a user types into it (stdin)
    for command, extra, stdin in (
        ("generate", ("--prompt", "hola", "--max-new-tokens", "2"), None),
        ("chat", (), "hola\n"),
    ):
        args = (command, "--model", other, "--adapter", adapter, *extra)
        r = run_aura(*args, input=stdin) if stdin else run_aura_here(*args)
        assert r.returncode == 2, (command, r.stdout, r.stderr)
        assert "was trained on" in r.stderr and "vocab_size" in r.stderr and "--allow-other-base" in r.stderr
        assert "Traceback" not in r.stderr
    forced = run_aura_here(
        "generate",
        "--model",
        other,
        "--adapter",
        adapter,
        "--prompt",
        "hola",
        "--max-new-tokens",
        "2",
        "--allow-other-base",
    )
    assert forced.returncode == 0, forced.stderr
    # the adapter on its own base passes the check silently
    ok = run_aura_here(
        "generate", "--model", zoo["llama"], "--adapter", adapter, "--prompt", "hola", "--max-new-tokens", "2"
    )
    assert ok.returncode == 0 and "trained on" not in ok.stderr, ok.stderr


def test_output_that_cannot_be_written_is_refused_before_generating(zoo, tmp_path):
    blocker = tmp_path / "somefile.txt"
    blocker.write_text("x", encoding="utf-8")
    prompts = tmp_path / "p.txt"
    prompts.write_text("Hola\n", encoding="utf-8")
    r = run_aura_here("generate", "--model", zoo["llama"], "--prompts-file", prompts, "--output", blocker / "g.jsonl")
    assert r.returncode == 2 and "is a file, not a directory" in r.stderr and "--output" in r.stderr
    assert "Prompt 1/1" not in r.stdout + r.stderr and "Traceback" not in r.stderr
    r = run_aura_here("plot", tmp_path, "--output-dir", "/proc/aura-test")
    assert r.returncode == 2 and "/proc" in r.stderr and "--out" in r.stderr and "Traceback" not in r.stderr
