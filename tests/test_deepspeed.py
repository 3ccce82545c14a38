"""DeepSpeed behind the loop's StepEngine seam: Aura's flags always win in ds_config (no accumulation
mismatch possible), and a 2-rank ZeRO-2 LoRA run on CPU (gloo) saves an adapter peft loads."""

from __future__ import annotations

import json

import pytest
import torch

from aura.core.errors import AuraError
from aura.train.optim.deepspeed import ds_config
from tests.distutil import output, torchrun
from tests.test_finetune import FAST, short_records


def test_aura_flags_are_written_into_the_config(capsys):
    user = {
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": 16,
        "train_batch_size": "auto",
        "gradient_clipping": "auto",
        "bf16": {"enabled": "auto"},
        "zero_optimization": {"stage": 2, "overlap_comm": "auto", "reduce_bucket_size": 5e8},
        "scheduler": {"type": "WarmupLR"},
    }
    cfg = ds_config(user, batch_size=2, accumulation=4, world_size=2, max_grad_norm=0.5, precision="bf16")
    assert cfg["train_micro_batch_size_per_gpu"] == 2 and cfg["gradient_accumulation_steps"] == 4
    assert cfg["train_batch_size"] == 2 * 4 * 2 and cfg["gradient_clipping"] == 0.5
    assert cfg["bf16"] == {"enabled": True} and cfg["fp16"] == {"enabled": False}
    assert cfg["zero_optimization"] == {"stage": 2, "reduce_bucket_size": 5e8}
    assert "scheduler" not in cfg and user["gradient_accumulation_steps"] == 16  # the user's dict is untouched
    out = capsys.readouterr()
    assert "'gradient_accumulation_steps' = 16 is replaced by 4" in out.out + out.err


def test_bad_zero_stage_is_a_clear_error():
    with pytest.raises(AuraError, match="stage must be 0, 1, 2 or 3"):
        ds_config(
            {"zero_optimization": {"stage": 4}},
            batch_size=1,
            accumulation=1,
            world_size=1,
            max_grad_norm=1.0,
            precision="fp32",
        )


@pytest.mark.slow
@pytest.mark.dist
def test_zero2_lora_on_two_cpu_ranks_equals_one_process_resumes_exactly_and_saves_an_adapter(tiny_zoo, tmp_path):
    """ZeRO-2 LoRA SFT on 2 gloo ranks logs, step by step, the losses of one process with the same global
    batch (2 ranks x 2 rows == 1 x 4 rows, accumulation 2); resumed from its step-3 (epoch) checkpoint it logs
    exactly the uninterrupted run's steps 4-6; its adapter loads in peft."""
    import shutil

    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from tests.test_finetune import finetune
    from tests.test_preference import step_rows

    base = tiny_zoo["llama"]  # the session's tiny Llama (read-only: every run writes under tmp_path)
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in short_records()), encoding="utf-8")
    ds = tmp_path / "ds.json"
    ds.write_text(
        json.dumps(
            {
                "gradient_accumulation_steps": 8,
                "train_micro_batch_size_per_gpu": "auto",
                "zero_optimization": {"stage": 2},
            }
        )
    )
    common = [
        "--base-model",
        str(base),
        "--data",
        str(data),
        *FAST,
        "--val-fraction",
        "0",
        "--gradient-accumulation-steps",
        "2",
        "--max-steps",
        "6",
    ]
    run = tmp_path / "run"
    r = torchrun(
        "-m",
        "aura",
        "finetune",
        *common,
        "--batch-size",
        "2",
        "--output-dir",
        str(run),
        "--save-steps",
        "3",
        "--deepspeed",
        str(ds),
        "--backend",
        "gloo",
        timeout=600,
    )
    text = output(r)
    assert r.returncode == 0, text
    assert "DeepSpeed ZeRO-2: micro-batch 2, accumulation 2" in text
    assert "Sync=n/a" in text  # the engine is recognised as DeepSpeed (its partitions are not compared)
    # 24 training rows / (2 ranks x 2) / accumulation 2 = 3 steps per epoch: epoch checkpoints at 3 and 6
    assert (run / "checkpoint-epoch-1" / "deepspeed" / "state").is_dir()
    assert (run / "checkpoint-epoch-1" / "adapter_model.safetensors").is_file()
    single = tmp_path / "single"
    finetune(*common, "--batch-size", "4", "--output-dir", single)
    rows, ref = step_rows(run), step_rows(single)
    assert set(rows) == set(ref) == set(range(1, 7))
    for step in rows:
        assert float(rows[step]["train_loss"]) == pytest.approx(float(ref[step]["train_loss"]), rel=1e-5), step
    assert float(rows[6]["train_loss"]) < float(rows[1]["train_loss"])  # it learnt: not two flat lines
    final = run / "final"
    assert (final / "adapter_model.safetensors").is_file() and (final / "chat_template.jinja").is_file()
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), str(final))
    lora_b = [p for n, p in model.named_parameters() if "lora_B" in n]
    assert lora_b and all(torch.count_nonzero(p) > 0 for p in lora_b)  # trained (B starts at zero)
    # resumed from DeepSpeed's step-3 checkpoint: the same steps 4-6, to the logged digit
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copytree(run / "checkpoint-epoch-1", resumed / "checkpoint-epoch-1")
    r = torchrun(
        "-m",
        "aura",
        "finetune",
        *common,
        "--batch-size",
        "2",
        "--output-dir",
        str(resumed),
        "--deepspeed",
        str(ds),
        "--backend",
        "gloo",
        "--resume-from",
        "latest",
        timeout=600,
    )
    assert r.returncode == 0, output(r)
    assert "Resumed from" in output(r)
    again = step_rows(resumed)
    assert set(again) == {4, 5, 6}
    assert [again[s]["train_loss"] for s in (4, 5, 6)] == [rows[s]["train_loss"] for s in (4, 5, 6)]


def test_shipped_zero2_example_takes_aura_batch_and_accumulation():
    """examples/ds_config_zero2.json (the README's 8×H100 example) leaves every size to Aura's flags."""
    from pathlib import Path

    from aura.train.optim.deepspeed import ds_config, read_config

    cfg = ds_config(
        read_config(Path(__file__).resolve().parents[1] / "examples" / "ds_config_zero2.json"),
        batch_size=8,
        accumulation=2,
        world_size=8,
        max_grad_norm=1.0,
        precision="bf16",
    )
    assert cfg["zero_optimization"]["stage"] == 2
    assert (cfg["train_micro_batch_size_per_gpu"], cfg["gradient_accumulation_steps"], cfg["train_batch_size"]) == (
        8,
        2,
        128,
    )
    assert cfg["bf16"]["enabled"] is True and cfg["gradient_clipping"] == 1.0


def test_cpu_accelerator_is_chosen_once_before_the_command(monkeypatch, tmp_path):
    """DS_ACCELERATOR: kept when exported, 'cpu' for --device cpu/mps or hidden GPUs; the CLI sets it."""
    import glob
    import os

    from aura.train.optim.deepspeed import set_accelerator_env

    monkeypatch.setenv("DS_ACCELERATOR", "cuda")
    set_accelerator_env("cpu")
    assert os.environ["DS_ACCELERATOR"] == "cuda"  # the user's choice stands
    for device, visible in (("cpu", None), ("mps", None), ("auto", ""), ("cuda:1", "-1")):
        monkeypatch.delenv("DS_ACCELERATOR")
        if visible is None:
            monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        else:
            monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
        set_accelerator_env(device)
        assert os.environ.get("DS_ACCELERATOR") == "cpu", (device, visible)
        monkeypatch.setenv("DS_ACCELERATOR", "x")
    if not glob.glob("/dev/nvidia[0-9]*"):  # through the CLI, on a machine without NVIDIA devices
        monkeypatch.delenv("DS_ACCELERATOR")
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        from aura.cli import main

        assert main(["runs", str(tmp_path)]) == 0
        assert os.environ.get("DS_ACCELERATOR") == "cpu"


def test_deepspeed_older_than_the_pin_is_refused_clearly():
    """0.15.x installs and trains, then fails at the first resume under torch >= 2.6 (tried: 0.15.0, 0.15.4;
    0.16.0 passes this file): refused up front, naming both versions and the upgrade command."""
    from pathlib import Path

    import tomllib

    from aura.core.errors import AuraError
    from aura.train.optim.deepspeed import OLDEST, check_version

    pins = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    extra = pins["project"]["optional-dependencies"]["deepspeed"]
    assert extra == [f"deepspeed>={OLDEST}"]  # the extra pins what the check enforces
    for ok in ("0.16.0", "0.16.9", "0.19.8+cpu", "1.0.0rc1"):
        check_version(ok)
    with pytest.raises(AuraError) as e:
        check_version("0.15.4")
    assert "0.15.4" in str(e.value) and f"pip install -U 'deepspeed>={OLDEST}'" in str(e.value)
