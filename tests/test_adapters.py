"""LoRA / QLoRA / full set-up (peft, bitsandbytes on CPU), adapter save/load, FinetuneConfig, epochs."""

from __future__ import annotations

import json

import pytest
import torch

from aura.core.config import parse_config
from aura.core.errors import AuraError
from aura.models.presets import count_parameters
from aura.train import adapters
from aura.train.finetune_config import FinetuneConfig, auto_epochs, auto_epochs_line
from tests.tiny_models import build_gpt2, build_llama, train_tokenizer

LLAMA_LINEARS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("adapters")
    tok = train_tokenizer(root / "tok", vocab_size=500)
    return {
        "tok": tok,
        "llama": build_llama(root / "llama", tok),
        "gpt2": build_gpt2(root / "gpt2", tok),
        "other": build_llama(root / "other", tok, seed=1),
    }


def _lora(path, **kw):
    model = adapters.load_base_model(str(path))
    return adapters.setup_model(
        model, method="lora", lora_r=kw.get("r", 4), lora_alpha=8, lora_dropout=0.0, target_modules=kw.get("targets")
    )


def _randomise_lora(model, seed=0):
    """LoRA B starts at zero (adapter = identity); give it weights so the tests can see a difference."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)


IDS = torch.tensor([[5, 17, 42, 99, 7, 3, 250, 11]])


def _logits(model):
    model.eval()
    with torch.no_grad():
        return model(input_ids=IDS, use_cache=False).logits


def test_linear_layers_are_discovered_for_llama_and_gpt2(dirs):
    assert adapters.linear_module_names(adapters.load_base_model(str(dirs["llama"]))) == LLAMA_LINEARS
    assert adapters.linear_module_names(adapters.load_base_model(str(dirs["gpt2"]))) == ["c_attn", "c_proj", "c_fc"]


def test_lora_trainable_count_matches_the_layer_shapes(dirs, monkeypatch):
    base = adapters.load_base_model(str(dirs["llama"]))
    r = 4
    expected = sum(
        r * (m.in_features + m.out_features)
        for name, m in base.named_modules()
        if isinstance(m, torch.nn.Linear) and name.rsplit(".", 1)[-1] in LLAMA_LINEARS
    )
    total_base = sum(p.numel() for p in base.parameters())
    model = adapters.setup_model(base, method="lora", lora_r=r, lora_alpha=8, lora_dropout=0.0)
    assert (count_parameters(model, trainable_only=True), count_parameters(model)) == (expected, total_base + expected)
    assert adapters.trainable_line(model) == (
        f"Trainable params: {expected:,} / {total_base + expected:,} ({100 * expected / (total_base + expected):.2f}%)"
    )
    monkeypatch.setenv("AURA_LANG", "es")
    from aura.core.i18n import num

    assert adapters.trainable_line(model).startswith(f"Parámetros entrenables: {num(expected, lang='es')} / ")
    only_q = _lora(dirs["llama"], r=r, targets=["q_proj"])
    q = adapters.load_base_model(str(dirs["llama"])).model.layers[0].self_attn.q_proj
    assert count_parameters(only_q, trainable_only=True) == 2 * r * (q.in_features + q.out_features)


def test_gpt2_lora_trains(dirs):
    model = _lora(dirs["gpt2"])
    model.train()
    out = model(input_ids=IDS, labels=IDS)
    out.loss.backward()
    grads = [p.grad for n, p in model.named_parameters() if "lora_B" in n]  # A gets none while B = 0
    # 2 blocks x (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj)
    assert len(grads) == 8 and all(g is not None and g.abs().sum() > 0 for g in grads)
    assert not any(p.requires_grad for n, p in model.named_parameters() if "lora_" not in n)


def test_unknown_target_modules_list_the_linear_layers(dirs):
    with pytest.raises(AuraError, match="no layers query.*linear layers: q_proj, k_proj, v_proj, o_proj"):
        _lora(dirs["llama"], targets=["query", "q_proj"])


def test_missing_base_model_is_a_clear_error(tmp_path):
    with pytest.raises(AuraError, match="does not exist"):
        adapters.load_base_model(str(tmp_path / "no_such_model"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(AuraError, match="config.json"):
        adapters.load_base_model(str(tmp_path / "empty"))


def test_full_finetuning_trains_everything_and_saves_a_loadable_model(dirs, tmp_path):
    from transformers import AutoModelForCausalLM

    from aura.tokenizer.loading import load_tokenizer

    model = adapters.setup_model(adapters.load_base_model(str(dirs["llama"])), method="full")
    trainable, total = count_parameters(model, trainable_only=True), count_parameters(model)
    assert trainable == total
    with torch.no_grad():
        model.model.layers[0].mlp.down_proj.weight.add_(0.1)
    tok = load_tokenizer(str(dirs["tok"]))
    out = adapters.save_finetuned(model, tok, tmp_path / "final", method="full", template_name="chatml")
    assert (out / "model.safetensors").is_file() and (out / "chat_template.jinja").is_file()
    again = AutoModelForCausalLM.from_pretrained(out)
    torch.testing.assert_close(_logits(again), _logits(model))
    assert load_tokenizer(str(out)).chat_template == tok.chat_template


def test_adapter_roundtrip_through_peft_gives_the_same_logits(dirs, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from aura.tokenizer.loading import load_tokenizer

    model = _lora(dirs["llama"])
    _randomise_lora(model)
    tok = load_tokenizer(str(dirs["tok"]))
    out = adapters.save_finetuned(model, tok, tmp_path / "adapter", method="lora", template_name="chatml")
    assert {"adapter_config.json", "adapter_model.safetensors", "tokenizer.json", "aura_adapter.json"} <= {
        p.name for p in out.iterdir()
    }
    assert json.loads((out / "aura_adapter.json").read_text())["method"] == "lora"
    base = AutoModelForCausalLM.from_pretrained(dirs["llama"])
    base_logits = _logits(base)
    reloaded = PeftModel.from_pretrained(base, str(out))
    torch.testing.assert_close(_logits(reloaded), _logits(model))
    assert not torch.allclose(_logits(reloaded), base_logits, atol=1e-3)  # the adapter does something
    # resume: the same set-up, then the saved weights
    fresh = _lora(dirs["llama"])
    adapters.load_adapter_weights(fresh, out)
    torch.testing.assert_close(_logits(fresh), _logits(model))
    # load_adapter checks the base; another base (same architecture, other weights) is refused
    ok = adapters.load_adapter(AutoModelForCausalLM.from_pretrained(dirs["llama"]), out, is_trainable=False)
    torch.testing.assert_close(_logits(ok), _logits(model))
    with pytest.raises(AuraError, match=r"trained on '.*llama' but the base model is '.*other'"):
        adapters.load_adapter(AutoModelForCausalLM.from_pretrained(dirs["other"]), out)
    with pytest.raises(AuraError, match=r"trained on '.*llama' but the base model is '.*gpt2'.*config.json"):
        adapters.load_adapter(AutoModelForCausalLM.from_pretrained(dirs["gpt2"]), out)


def test_qlora_builds_on_cpu_and_trains(dirs):
    import bitsandbytes as bnb

    base = adapters.load_base_model(str(dirs["llama"]), method="qlora")
    assert isinstance(base.model.layers[0].self_attn.q_proj, bnb.nn.Linear4bit)
    model = adapters.setup_model(base, method="qlora", lora_r=4, lora_alpha=8, lora_dropout=0.0)
    trainable, total = count_parameters(model, trainable_only=True), count_parameters(model)
    full = sum(p.numel() for p in adapters.load_base_model(str(dirs["llama"])).parameters())
    assert total == full + trainable  # 4-bit weights counted at their real size
    _randomise_lora(model)
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    losses = []
    for _ in range(3):
        loss = model(input_ids=IDS, labels=IDS).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < losses[0]


def test_qlora_without_bitsandbytes_says_how_to_install(dirs, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "bitsandbytes", None)  # what Python does when it is not installed
    with pytest.raises(AuraError, match=r"pip install bitsandbytes .*aura-llm\[qlora\]"):
        adapters.load_base_model(str(dirs["llama"]), method="qlora")


@pytest.mark.parametrize(
    "n, epochs",
    [
        (0, 5),
        (999, 5),
        (1_000, 4),
        (9_999, 4),
        (10_000, 3),
        (49_999, 3),
        (50_000, 2),
        (99_999, 2),
        (100_000, 1),
        (2_000_000, 1),
    ],
)
def test_auto_epochs_follows_the_guide_table(n, epochs):
    assert auto_epochs(n)[0] == epochs
    assert auto_epochs_line(n)[1].startswith(f"Epochs: {epochs} (")


def test_finetune_config_defaults_presets_and_validation():
    cfg = parse_config(FinetuneConfig, ["-m", "base", "--preset", "frida", "--lora-r", "8"], prog="t", description="")
    assert cfg.lora_settings() == {"lora_r": 8, "lora_alpha": 128, "lora_dropout": 0.05}
    assert cfg.optimisation_defaults()["learning_rate"] == 2e-4
    plain = FinetuneConfig(base_model="b")
    assert plain.lora_settings() == {"lora_r": 16, "lora_alpha": 32, "lora_dropout": 0.05}
    assert FinetuneConfig(base_model="b", method="full").optimisation_defaults()["learning_rate"] == 2e-5
    with pytest.raises(AuraError, match="--val-fraction"):
        FinetuneConfig(val_fraction=1.5)
    with pytest.raises(AuraError, match="--lora-r only applies"):
        FinetuneConfig(method="full", lora_r=8)
    with pytest.raises(SystemExit):
        parse_config(FinetuneConfig, ["--template", "vicuna"], prog="t", description="")


@pytest.mark.slow
def test_base_model_that_is_not_a_model_or_unreachable_fails_at_once(tmp_path):
    import time

    from tests.conftest import RESOURCES, run_aura

    csv = RESOURCES / "instrucciones_es.csv"
    run = tmp_path / "runs" / "demo"
    (run / "final").mkdir(parents=True)
    (run / "final" / "config.json").write_text("{}", encoding="utf-8")
    unreachable = {"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_OFFLINE": ""}
    for base, expected in (
        (run, "exists but is not a model"),
        (run.parent / "dmeo", "does not exist"),
        ("someone/base-7b", "cannot be reached"),
    ):
        t0 = time.perf_counter()
        r = run_aura(
            "finetune",
            "--base-model",
            base,
            "--data",
            csv,
            "--output-dir",
            tmp_path / "ft",
            env=unreachable,
            cwd=tmp_path,
        )
        assert r.returncode == 2 and expected in r.stderr, r.stderr
        assert "Retrying" not in r.stderr and "Traceback" not in r.stderr and time.perf_counter() - t0 < 40
    r = run_aura("finetune", "--base-model", run, "--data", csv, "--output-dir", tmp_path / "ft")
    assert f"use {run / 'final'}" in r.stderr  # a run dir: points at its final/


@pytest.mark.parametrize("base_dtype", [torch.float32, torch.bfloat16])
def test_lora_under_autocast_skips_the_fp32_round_trip_of_its_inputs_and_computes_the_same(dirs, base_dtype):
    """peft casts each adapted projection's input to the adapter's fp32 and bf16 autocast casts it straight
    back: ``keep_autocast_inputs`` skips that exact round trip. The same loss and gradients to the bit, fewer
    copies per step; without autocast peft's own cast still runs (a bf16 base answers as before)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Copies(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.n += func is torch.ops.aten._to_copy.default
            return func(*args, **(kwargs or {}))

    def step(model) -> tuple[torch.Tensor, list[torch.Tensor], int]:
        model.zero_grad()
        with Copies() as copies, torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(input_ids=IDS, labels=IDS, use_cache=False).loss
            loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters() if p.requires_grad], copies.n

    model = adapters.setup_model(
        adapters.load_base_model(str(dirs["llama"]), dtype=base_dtype),
        method="lora",
        lora_r=4,
        lora_alpha=8,
        lora_dropout=0.0,
    )
    _randomise_lora(model)
    model.train()
    before = step(model)
    plain = _logits(model)  # no autocast: peft's cast
    assert adapters.keep_autocast_inputs(model) == 14  # 2 layers x 7 projections
    after = step(model)
    assert torch.equal(before[0], after[0])
    assert all(torch.equal(a, b) for a, b in zip(before[1], after[1]))
    assert after[2] < before[2], (before[2], after[2])
    assert torch.equal(_logits(model), plain)
