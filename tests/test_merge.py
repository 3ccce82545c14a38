"""``aura merge``: merged logits equal base + adapter (LoRA and QLoRA), clear errors for a wrong base."""

from __future__ import annotations

import json

import pytest
import torch

from tests.conftest import run_aura, run_aura_here
from tests.evidence import importorskip
from tests.tiny_models import build_llama, make_lora_adapter, stamp_adapter_base, train_tokenizer


@pytest.fixture(scope="module")
def zoo(tiny_zoo, tiny_adapter):
    return {**tiny_zoo, "adapter": tiny_adapter}


def _logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0]  # (T, vocab)


def _ids(model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    return tok("¿Dónde está el niño? ¡Allí, junto a la cigüeña!")["input_ids"], tok


def _base_plus_adapter(base, adapter):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    return PeftModel.from_pretrained(model, str(adapter)).eval()


def test_lora_merge_equals_base_plus_adapter(zoo, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "merged"
    r = run_aura_here("merge", "--base-model", zoo["llama"], "--adapter", zoo["adapter"], "--output-dir", out)
    assert r.returncode == 0, r.stderr
    merged = AutoModelForCausalLM.from_pretrained(str(out)).eval()
    ids, _ = _ids(zoo["llama"])
    reference = _logits(_base_plus_adapter(zoo["llama"], zoo["adapter"]), ids)
    got = _logits(merged, ids)
    base = _logits(AutoModelForCausalLM.from_pretrained(str(zoo["llama"])).eval(), ids)
    assert (reference - base).abs().max() > 0.1  # the adapter matters
    torch.testing.assert_close(got, reference, atol=1e-4, rtol=1e-4)
    # a plain HF dir: no peft modules left, tokenizer + chat template + EOS for chat
    assert not any("lora" in k for k in merged.state_dict())
    tok = AutoTokenizer.from_pretrained(str(out))
    assert tok.chat_template and "<|im_start|>" in tok.chat_template
    gen = json.loads((out / "generation_config.json").read_text())
    assert set(gen["eos_token_id"]) == {tok.eos_token_id, tok.convert_tokens_to_ids("<|im_end|>")}
    assert not list(tmp_path.glob(".tmp-*"))
    # refuses to overwrite without --overwrite
    again = run_aura_here("merge", "--base-model", zoo["llama"], "--adapter", zoo["adapter"], "--output-dir", out)
    assert again.returncode == 2 and "--overwrite" in again.stderr and "Traceback" not in again.stderr


def test_qlora_adapter_merges_into_dequantised_base(zoo, tmp_path):
    importorskip("bitsandbytes", "bitsandbytes")
    from transformers import AutoModelForCausalLM

    adapter = make_lora_adapter(zoo["llama"], tmp_path / "qlora", quantized=True, seed=3)
    out = tmp_path / "qmerged"
    r = run_aura("merge", "--base-model", zoo["llama"], "--adapter", adapter, "--output-dir", out, "--dtype", "float32")
    assert r.returncode == 0, r.stderr
    cfg = json.loads((out / "config.json").read_text())
    assert "quantization_config" not in cfg
    merged = AutoModelForCausalLM.from_pretrained(str(out)).eval()
    assert all(p.dtype == torch.float32 for p in merged.parameters())
    ids, _ = _ids(zoo["llama"])
    reference = _logits(_base_plus_adapter(zoo["llama"], adapter), ids)
    torch.testing.assert_close(_logits(merged, ids), reference, atol=1e-4, rtol=1e-4)


def test_adapter_for_another_base_is_refused(zoo, tmp_path):
    wrong_arch = run_aura_here(
        "merge", "--base-model", zoo["gpt2"], "--adapter", zoo["adapter"], "--output-dir", tmp_path / "x"
    )
    assert wrong_arch.returncode == 2, wrong_arch.stderr
    assert str(zoo["gpt2"]) in wrong_arch.stderr and str(zoo["llama"]) in wrong_arch.stderr
    assert "Traceback" not in wrong_arch.stderr
    wider = build_llama(tmp_path / "wide", zoo["tokenizer"], hidden=128)
    wrong_shape = run_aura_here(
        "merge", "--base-model", wider, "--adapter", zoo["adapter"], "--output-dir", tmp_path / "y"
    )
    assert wrong_shape.returncode == 2
    assert "shape" in wrong_shape.stderr and str(zoo["llama"]) in wrong_shape.stderr
    assert "Traceback" not in wrong_shape.stderr
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


@pytest.mark.slow
def test_adapter_trained_on_a_base_with_another_vocabulary(zoo, tmp_path):
    # Same layer shapes, different vocabulary: peft would accept it and write a broken model.
    other = build_llama(tmp_path / "other", train_tokenizer(tmp_path / "tok600", vocab_size=600))
    adapter = stamp_adapter_base(make_lora_adapter(zoo["llama"], tmp_path / "adapter"), zoo["llama"])
    refused = run_aura_here("merge", "--base-model", other, "--adapter", adapter, "--output-dir", tmp_path / "m")
    assert refused.returncode == 2, refused.stderr
    assert "vocab_size" in refused.stderr and "--allow-other-base" in refused.stderr
    assert str(other) in refused.stderr and "Traceback" not in refused.stderr
    assert not (tmp_path / "m").exists()
    es = run_aura_here(
        "merge", "--base-model", other, "--adapter", adapter, "--output-dir", tmp_path / "m", env={"AURA_LANG": "es"}
    )
    assert es.returncode == 2 and "se entrenó sobre" in es.stderr and "--allow-other-base" in es.stderr
    forced = run_aura_here(
        "merge", "--base-model", other, "--adapter", adapter, "--output-dir", tmp_path / "m", "--allow-other-base"
    )
    assert forced.returncode == 0, forced.stderr
    assert "--allow-other-base" in forced.stdout + forced.stderr and (tmp_path / "m" / "config.json").is_file()


def test_output_under_a_file_is_refused_before_loading(zoo, tmp_path):
    blocker = tmp_path / "somefile.txt"
    blocker.write_text("x", encoding="utf-8")
    r = run_aura_here("merge", "--base-model", zoo["llama"], "--adapter", zoo["adapter"], "--output-dir", blocker / "m")
    assert r.returncode == 2 and "is a file, not a directory" in r.stderr and "--output-dir" in r.stderr
    assert "Loading" not in r.stdout and "Traceback" not in r.stderr


def test_the_same_base_named_two_ways_is_not_reported_as_another(zoo, tmp_path):
    """Issue 36.6: fine-tuning records the base's absolute path; `aura merge --base-model runs/mi-modelo/final`
    (relative) said the adapter was trained on another base. One folder named two ways, or a byte-identical
    copy, is the same base (silent); a folder with other weights still says which base it uses."""
    import shutil

    from safetensors.torch import load_file, save_file

    base = shutil.copytree(zoo["llama"], tmp_path / "runs" / "mi-modelo" / "final")
    adapter = shutil.copytree(zoo["adapter"], tmp_path / "runs" / "sft" / "final")
    stamp_adapter_base(adapter, base.resolve())  # as aura finetune records it: absolute
    said = "was trained on"
    r = run_aura_here(
        "merge",
        "--base-model",
        "runs/mi-modelo/final",
        "--adapter",
        "runs/sft/final",
        "--output-dir",
        "merged",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert said not in r.stdout + r.stderr, r.stdout + r.stderr
    r = run_aura(
        "chat",
        "--model",
        "runs/mi-modelo/final",
        "--adapter",
        "runs/sft/final",
        "--max-new-tokens",
        "2",
        "--temperature",
        "0",
        input="Hola\n",
        cwd=tmp_path,
    )  # the command fine-tuning suggests, relative
    assert r.returncode == 0 and said not in r.stdout + r.stderr, r.stdout + r.stderr
    copy = shutil.copytree(base, tmp_path / "copia")  # another folder, the same bytes
    r = run_aura_here(
        "merge", "--base-model", "copia", "--adapter", "runs/sft/final", "--output-dir", "merged2", cwd=tmp_path
    )
    assert r.returncode == 0 and said not in r.stdout + r.stderr, r.stdout + r.stderr
    # other weights outside the embeddings (which the fingerprint samples): named, as before
    weights = load_file(str(copy / "model.safetensors"))
    name = next(k for k in weights if k.endswith("norm.weight"))
    weights[name] = weights[name] * 1.5
    save_file(weights, str(copy / "model.safetensors"), metadata={"format": "pt"})
    r = run_aura_here(
        "merge", "--base-model", "copia", "--adapter", "runs/sft/final", "--output-dir", "merged3", cwd=tmp_path
    )
    assert r.returncode == 0, r.stderr
    assert f"{said} '{base.resolve()}'; using 'copia'" in r.stdout + r.stderr, r.stdout + r.stderr
