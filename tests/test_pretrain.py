"""`aura pretrain` through the real CLI: final/ loads in transformers, SIGTERM + resume, bad inputs, demo."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.conftest import run_aura, run_aura_here
from tests.test_loop import read_log
from tests.tiny_models import CORPUS_DIR, train_tokenizer

TINY_FLAGS = [
    "--model-preset",
    "manual",
    "--embed-size",
    "64",
    "--num-layers",
    "2",
    "--num-heads",
    "4",
    "--seq-length",
    "32",
    "--intermediate-size",
    "256",
    "--batch-size",
    "4",
    "--log-interval",
    "1",
    "--sample-tokens",
    "0",
    "--learning-rate",
    "3e-3",
]


@pytest.fixture(scope="module")
def prepared(prepared_corpus) -> Path:
    return prepared_corpus


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_final_dir_loads_in_transformers_with_equal_logits(prepared, tmp_path, arch):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from aura.models.presets import build_model, resolve_spec
    from aura.train.run.session import load_hf_weights as _load_hf

    run = tmp_path / "run"
    r = run_aura(
        "pretrain",
        "--data",
        prepared,
        "--output-dir",
        run,
        *TINY_FLAGS,
        "--arch",
        arch,
        "--max-steps",
        "3",
        "--save-steps",
        "0",
        "--sample-tokens",
        "5",
    )
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
    spec = resolve_spec(
        "manual", arch=arch, embed_size=64, num_layers=2, num_heads=4, seq_length=32, intermediate_size=256
    )
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
    proc = subprocess.Popen(
        [sys.executable, "-m", "aura", "pretrain", "--output-dir", str(run), *map(str, common)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    lines = []
    for line in proc.stdout:  # wait until training is under way
        lines.append(line)
        if "Step 5/30" in line:
            proc.send_signal(signal.SIGTERM)
            break
    out = "".join(lines) + proc.stdout.read()
    assert proc.wait(timeout=300) == 3, out  # stopped by a signal, checkpoint saved (documented code)
    assert "To resume" in out and "--resume-from" in out
    interrupts = sorted(run.glob("interrupt-step-*"))
    assert len(interrupts) == 1, out
    step = int(interrupts[0].name.rsplit("-", 1)[1])
    assert 5 <= step < 30
    import json

    assert json.loads((run / "run.json").read_text())["status"] == "interrupted"
    listing = run_aura("runs", run)
    assert listing.returncode == 0 and "interrupted" in listing.stdout, listing.stdout
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
    r = run_aura(
        "pretrain",
        "--data",
        text,
        "--tokenizer",
        tok,
        "--output-dir",
        run,
        *TINY_FLAGS,
        "--max-steps",
        "2",
        "--validation-split",
        "0.05",
    )
    assert r.returncode == 0, r.stderr + r.stdout
    assert (run / "data" / "meta.json").is_file() and (run / "final" / "model.safetensors").is_file()
    # the same dir again without --resume-from/--overwrite: refused, nothing touched
    again = run_aura_here("pretrain", "--data", prepared, "--output-dir", run, *TINY_FLAGS, "--max-steps", "2")
    assert again.returncode == 2 and "already holds another run" in again.stderr
    assert "Traceback" not in again.stderr
    # resuming with another model shape: refused, naming what differs
    other = run_aura_here(
        "pretrain",
        "--data",
        prepared,
        "--output-dir",
        run,
        *TINY_FLAGS,
        "--num-layers",
        "3",
        "--max-steps",
        "4",
        "--resume-from",
        "latest",
    )
    assert other.returncode == 2 and "n_layers: 2 -> 3" in other.stderr
    # data prepared with another tokenizer than --tokenizer: refused, naming both hashes
    other_tok = train_tokenizer(tmp_path / "tok2", vocab_size=600)
    bad = run_aura_here(
        "pretrain",
        "--data",
        prepared,
        "--tokenizer",
        other_tok,
        "--output-dir",
        tmp_path / "x",
        *TINY_FLAGS,
        "--max-steps",
        "2",
    )
    assert bad.returncode == 2 and "prepared with another tokenizer" in bad.stderr and "Traceback" not in bad.stderr
    # a sequence longer than the data
    long = run_aura_here(
        "pretrain",
        "--data",
        prepared,
        "--output-dir",
        tmp_path / "y",
        *TINY_FLAGS,
        "--seq-length",
        "100000",
        "--max-steps",
        "2",
    )
    assert long.returncode == 2 and "--seq-length" in long.stderr and "Traceback" not in long.stderr


def test_nan_loss_skips_then_stops_keeping_last_checkpoint(prepared, tmp_path):
    run = tmp_path / "run"
    r = run_aura(
        "pretrain",
        "--data",
        prepared,
        "--output-dir",
        run,
        *TINY_FLAGS,
        "--learning-rate",
        "1e6",
        "--max-steps",
        "40",
        "--max-bad-steps",
        "3",
        "--save-steps",
        "1",
        "--max-grad-norm",
        "0",
        "--precision",
        "fp32",
    )
    assert r.returncode == 2, r.stdout + r.stderr
    assert "NaN/inf" in r.stderr and "non-finite" in r.stderr and "Traceback" not in r.stderr
    from aura.train.run.checkpoint import latest_checkpoint

    last = latest_checkpoint(run)
    assert last is not None
    from safetensors.torch import load_file

    assert all(torch.isfinite(t).all() for t in load_file(str(last / "model.safetensors")).values())


@pytest.mark.slow
def test_demo_without_data_prints_sample_and_outputs(tmp_path):
    # the demo's own model, data, batch and rate, cut to 48 of its steps: the loss has fallen by 2.0 near
    # step 25, and the later steps run the same loop (the full demo took ~190 s of the suite)
    start = time.perf_counter()
    r = run_aura("pretrain", "--output-dir", tmp_path / "demo", "--max-steps", "48", timeout=900)
    elapsed = time.perf_counter() - start
    assert r.returncode == 0, r.stderr + r.stdout
    assert "Sample generation" in r.stdout and "final model" in r.stdout and "tensorboard --logdir" in r.stdout
    # it says the batch it trains, not `auto`'s "batch 16" (moved from tests/test_readme.py: the same run)
    out = r.stdout + r.stderr
    assert set(re.findall(r"\bbatch (\d+)", out)) == {"8"}, out
    assert "Demo: preset 'qwen3-tiny', batch 8, learning rate 0.002" in out, out
    assert (tmp_path / "demo" / "tokenizer" / "tokenizer.json").is_file()
    assert (tmp_path / "demo" / "final" / "model.safetensors").is_file()
    losses = read_log(tmp_path / "demo")
    assert losses[max(losses)] < losses[min(losses)] - 2.0
    print(f"demo took {elapsed:.0f} s")


def _start(run: Path, *args) -> subprocess.Popen:
    env = dict(os.environ, AURA_LANG="en", AURA_PLAIN="1", PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, "-m", "aura", "pretrain", "--output-dir", str(run), *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )


def test_ctrl_c_exit_codes_once_saves_twice_names_the_last_good_checkpoint(prepared, tmp_path):
    # 32 micro-batches per step: a step lasts long enough for a second Ctrl+C to land inside it
    common = [
        "--data",
        prepared,
        *TINY_FLAGS,
        "--max-steps",
        "400",
        "--save-steps",
        "3",
        "--gradient-accumulation-steps",
        "32",
    ]
    for presses, code in ((1, 3), (2, 130)):
        run = tmp_path / f"run{presses}"
        proc, lines, saved = _start(run, *common), [], False
        for line in proc.stdout:  # the first checkpoint, then one more step
            lines.append(line)
            saved = saved or "Checkpoint saved" in line
            if saved and line.startswith("Epoch ") and "Step 4/" in line:
                proc.send_signal(signal.SIGINT)
                if presses == 1:
                    break
            if "Signal SIGINT received" in line:  # (signals do not queue: the second one after the first)
                proc.send_signal(signal.SIGINT)
                break
        out = "".join(lines) + proc.stdout.read()
        assert proc.wait(timeout=300) == code, out
        assert (run / "checkpoint-step-3" / "trainer_state.json").is_file(), out
        listing = run_aura("runs", run)
        assert "interrupted" in listing.stdout, listing.stdout
        if presses == 2:  # aborted without saving: the message names the last complete checkpoint
            assert "Aborted without saving" in out and "Last good checkpoint: " in out, out
            from aura.core.rundir import latest_checkpoint

            assert f"Last good checkpoint: {latest_checkpoint(run)}" in out, out
            assert "Traceback" not in out
            assert "Interrupted." not in out, out  # said once, by the loop (issue 25: an extra "Error: ...")


def test_best_dir_keeps_the_lowest_validation_out_of_rotation(prepared, tmp_path):
    """A small text overfits within 40 steps: best/ holds the lowest validation loss, said when it rises."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from tests.test_loop import read_log

    text = tmp_path / "small.txt"
    text.write_text((CORPUS_DIR / "narrativa.txt").read_text(encoding="utf-8")[:6000], encoding="utf-8")
    run = tmp_path / "run"
    r = run_aura(
        "pretrain",
        "--data",
        text,
        "--tokenizer",
        prepared / "tokenizer",
        "--output-dir",
        run,
        *TINY_FLAGS,
        "--batch-size",
        "8",
        "--learning-rate",
        "1e-2",
        "--validation-split",
        "0.3",
        "--max-steps",
        "40",
        "--eval-interval",
        "5",
        "--save-steps",
        "5",
        "--keep-last",
        "0",
        "--precision",
        "fp32",
    )
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    vals = {**read_log(run, "eval"), **read_log(run, "epoch")}
    best_step = min(vals, key=vals.get)
    info = json.loads((run / "best" / "best.json").read_text())
    assert info["step"] == best_step and info["val_loss"] == pytest.approx(vals[best_step], abs=1e-6)
    assert best_step < 40 and vals[40] > vals[best_step]  # it did overfit
    assert f"has risen 3 times in a row since step {best_step}" in out and "`best/` keeps step" in out, out
    # best/ is a Hugging Face model dir with the weights of that step (here its epoch checkpoint)
    best = load_file(str(run / "best" / "model.safetensors"))
    at_step = load_file(str(run / f"checkpoint-step-{best_step}" / "model.safetensors"))
    assert best.keys() == at_step.keys() and all(torch.equal(best[k], at_step[k]) for k in best)
    AutoModelForCausalLM.from_pretrained(run / "best")
    listing = run_aura("runs", run, "--json")
    assert json.loads(listing.stdout)[0]["best_val_loss"] == pytest.approx(info["val_loss"], abs=1e-9)


def test_validation_smaller_than_one_window_is_said_once(prepared, tmp_path):
    text = tmp_path / "t.txt"
    text.write_text((CORPUS_DIR / "narrativa.txt").read_text(encoding="utf-8")[:20000], encoding="utf-8")
    r = run_aura(
        "pretrain",
        "--data",
        text,
        "--tokenizer",
        prepared / "tokenizer",
        "--output-dir",
        tmp_path / "run",
        *TINY_FLAGS,
        "--seq-length",
        "1024",
        "--batch-size",
        "1",
        "--val-fraction",
        "0.02",
        "--max-steps",
        "4",
        "--log-interval",
        "2",
    )
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert out.count("fewer than one window") == 1 and "--val-fraction" in out, out  # ~660 tokens < 1025
