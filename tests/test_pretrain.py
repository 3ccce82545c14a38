"""`aura pretrain` through the real CLI: final/ loads in transformers, SIGTERM + resume, bad inputs, demo."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.conftest import run_aura
from tests.test_loop import build_prepared, read_log
from tests.tiny_models import CORPUS_DIR, train_tokenizer

TINY_FLAGS = ["--model-preset", "manual", "--embed-size", "64", "--num-layers", "2", "--num-heads", "4",
              "--seq-length", "32", "--intermediate-size", "256", "--batch-size", "4", "--log-interval", "1",
              "--sample-tokens", "0", "--learning-rate", "3e-3"]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    return build_prepared(tmp_path_factory.mktemp("prepared"))


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_final_dir_loads_in_transformers_with_equal_logits(prepared, tmp_path, arch):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from aura.models import build_model, resolve_spec
    from aura.train.pretrain import _load_hf

    run = tmp_path / "run"
    r = run_aura("pretrain", "--data", prepared, "--output-dir", run, *TINY_FLAGS, "--arch", arch,
                 "--max-steps", "3", "--save-steps", "0", "--sample-tokens", "5")
    assert r.returncode == 0, r.stderr + r.stdout
    assert "final model" in r.stdout and "Sample generation" in r.stdout
    final = run / "final"
    for name in ("config.json", "model.safetensors", "generation_config.json", "tokenizer.json"):
        assert (final / name).is_file(), name
    assert not list(final.rglob("*.bin")) and not list(final.rglob("*.pt"))
    hf = AutoModelForCausalLM.from_pretrained(final).eval()
    tok = AutoTokenizer.from_pretrained(final)
    assert hf.generation_config.eos_token_id == tok.eos_token_id
    assert hf.generation_config.pad_token_id == tok.pad_token_id
    # Aura's own model, rebuilt from the spec and loaded from the last checkpoint
    spec = resolve_spec("manual", arch=arch, embed_size=64, num_layers=2, num_heads=4, seq_length=32,
                        intermediate_size=256)
    ours = build_model(spec, hf.config.vocab_size).eval()
    _load_hf(ours, run / "checkpoint-step-3")
    ids = tok("¿Dónde está el niño? ¡Allí!", return_tensors="pt").input_ids
    with torch.no_grad():
        assert torch.equal(hf(ids).logits, ours(ids).logits)
    assert type(hf).__name__ == ("LlamaForCausalLM" if arch == "llama" else "GPT2LMHeadModel")


def test_sigterm_saves_interrupt_checkpoint_that_resumes_exactly(prepared, tmp_path):
    common = ["--data", str(prepared), *TINY_FLAGS, "--max-steps", "30", "--save-steps", "0"]
    ref = run_aura("pretrain", "--output-dir", tmp_path / "ref", *common)
    assert ref.returncode == 0, ref.stderr
    run = tmp_path / "run"
    env = dict(os.environ, AURA_LANG="en", AURA_PLAIN="1", PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "aura", "pretrain", "--output-dir", str(run), *map(str, common)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines = []
    for line in proc.stdout:  # wait until training is under way
        lines.append(line)
        if "Step 5/30" in line:
            proc.send_signal(signal.SIGTERM)
            break
    out = "".join(lines) + proc.stdout.read()
    assert proc.wait(timeout=300) == 0, out
    assert "To resume" in out and "--resume-from" in out
    interrupts = sorted(run.glob("interrupt-step-*"))
    assert len(interrupts) == 1, out
    step = int(interrupts[0].name.rsplit("-", 1)[1])
    assert 5 <= step < 30
    import json

    assert json.loads((run / "run.json").read_text())["status"] == "interrupted"
    resumed = run_aura("pretrain", "--output-dir", run, *common, "--resume-from", "latest")
    assert resumed.returncode == 0, resumed.stderr
    a, b = read_log(tmp_path / "ref"), read_log(run)
    assert [a[s] for s in range(1, 31)] == [b[s] for s in range(1, 31)]
    assert json.loads((run / "run.json").read_text())["status"] == "finished"


def test_raw_text_as_data_and_refusals(prepared, tmp_path):
    run = tmp_path / "run"
    text = tmp_path / "texto.txt"
    text.write_text((CORPUS_DIR / "narrativa.txt").read_text(encoding="utf-8"), encoding="utf-8")
    tok = prepared / "tokenizer"
    r = run_aura("pretrain", "--data", text, "--tokenizer", tok, "--output-dir", run, *TINY_FLAGS,
                 "--max-steps", "2", "--validation-split", "0.05")
    assert r.returncode == 0, r.stderr + r.stdout
    assert (run / "data" / "meta.json").is_file() and (run / "final" / "model.safetensors").is_file()
    # the same dir again without --resume-from/--overwrite: refused, nothing touched
    again = run_aura("pretrain", "--data", prepared, "--output-dir", run, *TINY_FLAGS, "--max-steps", "2")
    assert again.returncode == 2 and "already holds another run" in again.stderr
    assert "Traceback" not in again.stderr
    # resuming with another model shape: refused, naming what differs
    other = run_aura("pretrain", "--data", prepared, "--output-dir", run, *TINY_FLAGS, "--num-layers", "3",
                     "--max-steps", "4", "--resume-from", "latest")
    assert other.returncode == 2 and "n_layers: 2 -> 3" in other.stderr
    # data prepared with another tokenizer than --tokenizer: refused, naming both hashes
    other_tok = train_tokenizer(tmp_path / "tok2", vocab_size=600)
    bad = run_aura("pretrain", "--data", prepared, "--tokenizer", other_tok, "--output-dir", tmp_path / "x",
                   *TINY_FLAGS, "--max-steps", "2")
    assert bad.returncode == 2 and "prepared with another tokenizer" in bad.stderr and "Traceback" not in bad.stderr
    # a sequence longer than the data
    long = run_aura("pretrain", "--data", prepared, "--output-dir", tmp_path / "y", *TINY_FLAGS,
                    "--seq-length", "100000", "--max-steps", "2")
    assert long.returncode == 2 and "--seq-length" in long.stderr and "Traceback" not in long.stderr


def test_nan_loss_skips_then_stops_keeping_last_checkpoint(prepared, tmp_path):
    run = tmp_path / "run"
    r = run_aura("pretrain", "--data", prepared, "--output-dir", run, *TINY_FLAGS, "--learning-rate", "1e6",
                 "--max-steps", "40", "--max-bad-steps", "3", "--save-steps", "1", "--max-grad-norm", "0",
                 "--precision", "fp32")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "NaN/inf" in r.stderr and "non-finite" in r.stderr and "Traceback" not in r.stderr
    from aura.train.checkpoint import latest_checkpoint

    last = latest_checkpoint(run)
    assert last is not None
    from safetensors.torch import load_file

    assert all(torch.isfinite(t).all() for t in load_file(str(last / "model.safetensors")).values())


@pytest.mark.slow
def test_demo_without_data_prints_sample_and_outputs(tmp_path):
    start = time.perf_counter()
    r = run_aura("pretrain", "--output-dir", tmp_path / "demo", timeout=900)
    elapsed = time.perf_counter() - start
    assert r.returncode == 0, r.stderr + r.stdout
    assert "Sample generation" in r.stdout and "final model" in r.stdout and "tensorboard --logdir" in r.stdout
    assert (tmp_path / "demo" / "tokenizer" / "tokenizer.json").is_file()
    assert (tmp_path / "demo" / "final" / "model.safetensors").is_file()
    losses = read_log(tmp_path / "demo")
    assert losses[max(losses)] < losses[min(losses)] - 2.0
    print(f"demo took {elapsed:.0f} s")
