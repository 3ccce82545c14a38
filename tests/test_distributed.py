"""aura.distributed on CPU with gloo: DDP/FSDP2 equal a single-process reference; Sync=OK; DCP checkpoints."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from tests.distutil import SCRIPTS, env, output, torchrun

pytestmark = pytest.mark.dist


@pytest.mark.slow
def test_ddp_and_fsdp_match_single_process_reference(tmp_path):
    out = tmp_path / "r.json"
    proc = torchrun(SCRIPTS / "parallel_equiv.py", out)
    assert proc.returncode == 0, output(proc)[-4000:]
    r = json.loads(out.read_text())
    assert r["world"] == 2 and r["ddp_is_ddp"] and r["fsdp_is_fsdp"]
    # two ranks x batch b == one process x batch 2b: losses and first-step gradients
    for key in ("ddp_losses", "acc_losses", "fsdp_losses"):
        assert r[key] == pytest.approx(r["ref_losses"], abs=2e-6), key
    assert r["ddp_grad_diff"] < 1e-6
    assert r["acc_grad_diff"] < 1e-6  # no_sync on the first micro-batch, all-reduce on the second
    assert r["fsdp_grad_diff"] < 1e-6
    assert r["fsdp_losses"] == pytest.approx(r["ddp_losses"], abs=1e-6)
    # whole_weights (GRPO's and distill's sampling under FSDP2): whole inside, uneven forwards, restored after
    w = r["whole_weights"]
    assert w["whole_inside"] and w["nested_kept"] and w["logit_diff"] < 1e-5
    assert w["sharded_before"] > 0 and w["same_after"]
    # Sync=OK on identical replicas; a perturbed replica is named with the parameter
    assert r["sync_ok"] is True
    assert r["desync_error"] and "ranks 1 do not match" in r["desync_error"]
    assert "model.layers.1.mlp.up_proj.weight" in r["desync_error"]
    # auto: DDP when the training state fits, FSDP when it does not
    assert r["auto_big_memory"][0] == "ddp" and "fits" in r["auto_big_memory"][1]
    assert r["auto_small_memory"][0] == "fsdp" and "does not fit" in r["auto_small_memory"][1]


@pytest.mark.slow
def test_fsdp_sharded_checkpoint_resumes_on_two_and_one_rank(tmp_path):
    proc = torchrun(SCRIPTS / "sharded_ckpt.py", "save", tmp_path, tmp_path / "save.json")
    assert proc.returncode == 0, output(proc)[-4000:]
    saved = json.loads((tmp_path / "save.json").read_text())
    assert saved["strategy"] == "fsdp"
    assert ".metadata" in saved["files"] and sum(f.endswith(".distcp") for f in saved["files"]) == 2
    assert saved["tmp_left"] == []
    # full state gathered on rank 0 -> save_pretrained -> transformers reloads the same model
    assert saved["export_keys"] == 21 and saved["export_logit_diff"] < 1e-5

    # a fresh FSDP model + optimizer loaded from it continues exactly (same world size)
    assert saved["reloaded_after"] == pytest.approx(saved["after"], abs=1e-6)

    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / "sharded_ckpt.py"), "load", str(tmp_path), str(tmp_path / "load1.json")],
        capture_output=True,
        text=True,
        env=env(),
        timeout=300,
    )
    assert proc.returncode == 0, output(proc)[-4000:]
    single = json.loads((tmp_path / "load1.json").read_text())
    # DCP reshards: the 2-rank FSDP checkpoint resumes in one unwrapped process
    assert single["world"] == 1 and single["strategy"] == "none"
    assert single["after"] == pytest.approx(saved["after"], abs=1e-5)


def test_single_process_is_a_no_op_path(tmp_path):
    from aura import distributed as D
    from aura.core.errors import AuraError
    from aura.distributed.sharded import full_state_dict, load_sharded, save_sharded
    from tests.dist_scripts.common import tiny_llama

    dist = D.init_distributed(backend="auto")
    assert dist.world_size == 1 and not dist.is_distributed
    model = D.parallelize(tiny_llama(), dist=dist, strategy="auto", gradient_checkpointing=True)
    assert D.strategy_of(model) == "none" and D.unwrap(model) is model
    assert model.is_gradient_checkpointing
    assert D.sync_check(model, dist) is True
    with D.no_sync(model):
        pass
    assert D.choose_strategy(model, dist=dist)[0] == "none"
    blocks = D.find_blocks(model)
    assert [type(b).__name__ for b in blocks] == ["LlamaDecoderLayer"] * 2
    # sharded save/load without a process group, atomically
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, 256, (2, 8))  # (B, T)
    model(input_ids=ids, labels=ids).loss.backward()
    opt.step()
    save_sharded(tmp_path / "ck", model=model, optimizer=opt, dist=dist)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp")]
    other = tiny_llama(seed=3)
    opt2 = torch.optim.AdamW(other.parameters(), lr=1e-3)
    load_sharded(tmp_path / "ck", model=other, optimizer=opt2, dist=dist)
    for (n, a), b in zip(model.state_dict().items(), other.state_dict().values()):
        assert torch.equal(a, b), n
    assert opt2.state_dict()["state"][0]["exp_avg"].abs().sum() > 0
    assert set(full_state_dict(model, dist=dist)) == set(model.state_dict())
    with pytest.raises(AuraError, match="no distributed checkpoint"):
        load_sharded(tmp_path / "nothing", model=other, dist=dist)
    with pytest.raises(AuraError, match="Unknown strategy"):
        D.parallelize(other, dist=dist, strategy="zero3")


def test_find_blocks_gpt2_and_peft():
    from peft import LoraConfig, get_peft_model
    from transformers import GPT2Config, GPT2LMHeadModel

    from aura import distributed as D

    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=128, n_embd=32, n_layer=3, n_head=2, n_positions=32))
    assert [b for b in D.find_blocks(gpt2)] == list(gpt2.transformer.h)
    peft = get_peft_model(gpt2, LoraConfig(r=4, target_modules=["c_attn"], task_type="CAUSAL_LM"))
    assert D.find_blocks(peft) == list(peft.base_model.model.transformer.h)
    # LoRA: frozen base weights cost only themselves; adapters add gradients + AdamW moments
    trainable = sum(p.numel() for p in peft.parameters() if p.requires_grad)
    total = sum(p.numel() for p in peft.parameters())
    assert D.training_state_bytes(peft) == total * 4 + trainable * (4 + 8)
    generic = torch.nn.Sequential(
        torch.nn.Embedding(10, 8), torch.nn.ModuleList([torch.nn.Linear(8, 8) for _ in range(3)])
    )
    assert D.find_blocks(generic) == list(generic[1])
