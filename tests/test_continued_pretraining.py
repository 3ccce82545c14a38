"""`aura pretrain --init-from MODEL`: continued pretraining of tiny saved Llama, Mistral and GPT-2 models
through the real CLI (first-step loss, final/ keeps the base's config and template, exact resume, refusals)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.conftest import run_aura, run_aura_here
from tests.test_loop import read_log
from tests.tiny_models import CORPUS_DIR, build_gpt2, build_llama, train_tokenizer

FLAGS = [
    "--batch-size",
    "2",
    "--seq-length",
    "64",
    "--precision",
    "fp32",
    "--log-interval",
    "1",
    "--sample-tokens",
    "0",
]


@pytest.fixture(scope="module")
def zoo(tmp_path_factory) -> dict[str, Path]:
    """A tokenizer, tiny Llama/Mistral/GPT-2 bases (GPT-2 without dropout) and the corpus prepared with it."""
    from aura.data.prepare import PrepareConfig, prepare

    root = tmp_path_factory.mktemp("zoo")
    tok = train_tokenizer(root / "tok", vocab_size=800)
    out = {
        "tok": tok,
        "llama": build_llama(root / "llama", tok),
        "mistral": build_llama(root / "mistral", tok, arch="mistral"),
        "gpt2": build_gpt2(root / "gpt2", tok),
    }
    cfg_file = out["gpt2"] / "config.json"  # dropout would make the training-mode loss random
    cfg = json.loads(cfg_file.read_text())
    cfg.update(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    cfg_file.write_text(json.dumps(cfg))
    prepare(
        PrepareConfig(
            inputs=[str(p) for p in sorted(CORPUS_DIR.glob("*.txt"))],
            tokenizer=str(out["llama"]),
            output_dir=str(root / "data"),
            workers=1,
            val_fraction=0.05,
        )
    )
    out["data"] = root / "data"
    # transformers 5 rebuilds a Qwen2 model's tokenizer with Qwen2's own pre-tokeniser: its data must be
    # prepared through transformers, as training loads it (not from tokenizer.json alone)
    out["qwen2"] = build_llama(root / "qwen2", tok, arch="qwen2")
    prepare(
        PrepareConfig(
            inputs=[str(p) for p in sorted(CORPUS_DIR.glob("*.txt"))],
            tokenizer=str(out["qwen2"]),
            output_dir=str(root / "data_qwen2"),
            workers=1,
            val_fraction=0.05,
        )
    )
    out["data_qwen2"] = root / "data_qwen2"
    return out


def base_loss(model_dir: Path, data: Path, *, seq: int = 64, batch: int = 2, seed: int = 42) -> float:
    """The base model's own token-mean loss on the run's first micro-batch."""
    from transformers import AutoModelForCausalLM

    from aura.data.pretrain_data import PretrainBatches
    from aura.data.tokens import TokenShards
    from aura.train.objectives.objective import count_targets, token_loss_sum

    b = PretrainBatches(TokenShards(data), seq_len=seq, batch_size=batch, seed=seed).batch_at(0, 0)
    model = AutoModelForCausalLM.from_pretrained(str(model_dir)).train()
    with torch.no_grad():
        return float(token_loss_sum(model, b)) / count_targets(b)


@pytest.mark.parametrize("arch", ["llama", "mistral", "qwen2", "gpt2"])
def test_first_step_loss_is_the_base_models_and_final_keeps_its_config(zoo, tmp_path, arch):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    run, data = tmp_path / "run", zoo.get(f"data_{arch}", zoo["data"])
    r = run_aura("pretrain", "--init-from", zoo[arch], "--data", data, "-o", run, *FLAGS, "--max-steps", "2")
    assert r.returncode == 0, r.stderr + r.stdout
    assert f"Base model: {zoo[arch]}" in r.stdout
    losses = read_log(run)
    assert losses[1] == pytest.approx(base_loss(zoo[arch], data), abs=2e-6)
    assert losses[2] != losses[1]  # it trained
    final = run / "final"
    base_cfg, final_cfg = AutoConfig.from_pretrained(zoo[arch]).to_dict(), AutoConfig.from_pretrained(final).to_dict()
    for key in (
        "model_type",
        "architectures",
        "hidden_size",
        "n_embd",
        "num_hidden_layers",
        "n_layer",
        "vocab_size",
        "tie_word_embeddings",
        "rope_theta",
        "sliding_window",
        "eos_token_id",
    ):
        assert final_cfg.get(key) == base_cfg.get(key), key
    assert AutoTokenizer.from_pretrained(final).chat_template == AutoTokenizer.from_pretrained(zoo[arch]).chat_template
    AutoModelForCausalLM.from_pretrained(final)
    described = json.loads((run / "model_config.json").read_text())
    assert described["init_from"]["model"] == str(zoo[arch]) and described["preset"] == str(zoo[arch])


def test_resume_is_exact(zoo, tmp_path):
    run = tmp_path / "run"
    common = [
        "--init-from",
        zoo["llama"],
        "--data",
        zoo["data"],
        "-o",
        run,
        *FLAGS,
        "--max-steps",
        "4",
        "--save-steps",
        "2",
        "--keep-last",
        "0",
    ]
    r = run_aura("pretrain", *common)
    assert r.returncode == 0, r.stderr + r.stdout
    ref = read_log(run)
    again = run_aura("pretrain", *common, "--resume-from", run / "checkpoint-step-2", "--fork")
    assert again.returncode == 0, again.stderr + again.stdout
    resumed = read_log(run)
    assert [resumed[s] for s in (3, 4)] == [ref[s] for s in (3, 4)]


def test_refusals_name_the_problem(zoo, tmp_path):
    # a base model that does not load
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "no-such-architecture"}')
    r = run_aura_here("pretrain", "--init-from", broken, "--data", zoo["data"], "-o", tmp_path / "r1", *FLAGS)
    assert r.returncode == 2 and f"--init-from {broken}: could not be loaded" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    r = run_aura_here(
        "pretrain", "--init-from", tmp_path / "missing", "--data", zoo["data"], "-o", tmp_path / "r2", *FLAGS
    )
    assert r.returncode == 2 and "no such path" in r.stderr, r.stderr
    # a --tokenizer that is not an extension of the base's
    from aura.data.prepare import PrepareConfig, prepare

    other = train_tokenizer(tmp_path / "other_tok", vocab_size=600)
    r = run_aura_here(
        "pretrain",
        "--init-from",
        zoo["llama"],
        "--data",
        zoo["data"],
        "--tokenizer",
        other,
        "-o",
        tmp_path / "r3",
        *FLAGS,
    )
    assert r.returncode == 2 and f"--tokenizer {other} is not an extension of the tokenizer of --init-from" in r.stderr
    assert "it lacks the base's token" in r.stderr, r.stderr
    # data tokenised with another tokenizer: both are named
    other_data = tmp_path / "other_data"
    prepare(
        PrepareConfig(
            inputs=[str(CORPUS_DIR / "narrativa.txt")], tokenizer=str(other), output_dir=str(other_data), workers=1
        )
    )
    r = run_aura_here("pretrain", "--init-from", zoo["llama"], "--data", other_data, "-o", tmp_path / "r6", *FLAGS)
    assert r.returncode == 2 and f"tokenised with {other}" in r.stderr and str(zoo["llama"]) in r.stderr, r.stderr
    # a preset or a dimension with --init-from; the freeze without a base
    r = run_aura_here(
        "pretrain", "--init-from", zoo["llama"], "--data", zoo["data"], "--model-preset", "tiny", "-o", tmp_path / "r4"
    )
    assert r.returncode == 2 and "--model-preset" in r.stderr and "do not apply" in r.stderr, r.stderr
    r = run_aura_here("pretrain", "--data", zoo["data"], "--train-new-tokens-only", "5", "-o", tmp_path / "r5")
    assert r.returncode == 2 and "only makes sense with --init-from" in r.stderr, r.stderr
    for name in ("r1", "r2", "r3", "r4", "r5", "r6"):  # nothing partial left
        assert not (tmp_path / name).exists()


def test_auto_plans_continued_pretraining_from_the_memory_model_on_cuda():
    """On a CUDA device, `--init-from` leaves the micro-batch and checkpointing to the memory model (every
    weight trains, as in full fine-tuning); flags the user gave are kept; a CPU run is left alone."""
    from types import SimpleNamespace

    from transformers import LlamaConfig

    from aura.models.hardware import assumed_hardware
    from aura.train.pretrain import PretrainConfig
    from aura.train.run.memory import finetune_estimate, memory_defaults

    one_b = LlamaConfig(
        vocab_size=128_256,
        hidden_size=2048,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        intermediate_size=8192,
        tie_word_embeddings=True,
    )

    def plan(device: str, hardware: str, **flags):
        run = SimpleNamespace(
            info=assumed_hardware(hardware), dist=SimpleNamespace(device=torch.device(device)), precision="bf16"
        )
        cfg = PretrainConfig(data=["x"], output_dir="out", init_from="base", **flags)
        return memory_defaults(cfg, run=run, model_config=one_b, method="full", lora_r=0, max_length=2048)

    big, small = plan("cuda", "H100 80GB"), plan("cuda", "RTX 3060 12GB")
    assert big.batch_size >= small.batch_size and not big.gradient_checkpointing
    assert small.gradient_checkpointing or small.batch_size == 1
    for cfg, hardware in ((big, "H100 80GB"),):  # the plan fits the device by the model's own estimate
        est = finetune_estimate(
            one_b,
            method="full",
            lora_r=0,
            batch_size=cfg.batch_size,
            max_length=2048,
            precision="bf16",
            checkpointing=cfg.gradient_checkpointing,
        )
        assert est.total <= assumed_hardware(hardware).memory_bytes
    kept = plan("cuda", "RTX 3060 12GB", batch_size=3, gradient_checkpointing=False)
    assert (kept.batch_size, kept.gradient_checkpointing) == (3, False)
    cpu = plan("cpu", "H100 80GB")
    assert cpu.batch_size is None and cpu.gradient_checkpointing is None
