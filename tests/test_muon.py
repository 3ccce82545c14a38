"""``--optimizer muon``: which tensors take Muon, the Newton-Schulz orthogonalisation and Moonlight's RMS
scaling, one optimizer state in every checkpoint, loss falls, a killed run resumes with exactly the
uninterrupted per-step losses, DDP on 2 ranks equals one process with the doubled batch, DiLoCo runs it as
its inner optimizer, and FSDP2 is refused."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys

import pytest
import torch

from tests.conftest import run_aura, run_aura_here
from tests.test_dist_train import prepared  # noqa: F401  (fixture: the torchrun tests' tokenizer + data)
from tests.test_loop import read_log
from tests.test_pretrain import TINY_FLAGS


def _groups(model):
    from aura.train.optim.muon import split_params

    names = {id(p): n for n, p in model.named_parameters()}
    return [sorted(names[id(p)] for p in group) for group in split_params(model)]


@pytest.mark.parametrize("arch", ["llama", "qwen3", "gpt2"])
def test_hidden_matrices_take_muon_and_the_rest_adamw(arch):
    from aura.models.presets import build_model, resolve_spec

    spec = resolve_spec("manual", arch=arch, embed_size=64, num_layers=2, num_heads=4, seq_length=32,
                        intermediate_size=128)
    hidden, decay, no_decay = _groups(build_model(spec, 300))
    suffixes = {"llama": ("q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight", "gate_proj.weight",
                          "up_proj.weight", "down_proj.weight"),
                "gpt2": ("c_attn.weight", "attn.c_proj.weight", "c_fc.weight", "mlp.c_proj.weight")}
    expected = suffixes["gpt2" if arch == "gpt2" else "llama"]
    assert len(hidden) == 2 * len(expected) and all(n.endswith(expected) for n in hidden)
    assert all(".layers." in n or ".h." in n for n in hidden)
    if arch == "gpt2":  # the head is tied to the token embedding: AdamW, undecayed, once
        assert decay == [] and "transformer.wte.weight" in no_decay and "transformer.wpe.weight" in no_decay
    else:
        assert decay == ["lm_head.weight"] and "model.embed_tokens.weight" in no_decay
    assert all("norm" in n or "ln_" in n or n.endswith((".bias", "wte.weight", "wpe.weight", "embed_tokens.weight"))
               for n in no_decay)


def test_newton_schulz_orthogonalises_and_the_update_has_adamw_rms():
    """torch's Newton-Schulz (5 quintic steps) maps a badly conditioned matrix to singular values near 1;
    the first MuonAdamW step moves a (64 x 256) matrix by exactly that, times lr * 0.2 * sqrt(256): an
    update RMS of 0.2 * lr, a typical AdamW update's (Moonlight), with decoupled weight decay."""
    from torch.optim._muon import DEFAULT_A, DEFAULT_B, DEFAULT_C, _zeropower_via_newtonschulz

    from aura.train.optim.muon import MuonAdamW

    torch.manual_seed(0)
    u, v = torch.linalg.qr(torch.randn(64, 64))[0], torch.linalg.qr(torch.randn(256, 64))[0]
    g = u @ torch.diag(torch.logspace(0, -2, 64)) @ v.T  # (64, 256), singular values from 1 down to 0.01
    o = _zeropower_via_newtonschulz(g, (DEFAULT_A, DEFAULT_B, DEFAULT_C), 5, 1e-7).float()
    s = torch.linalg.svdvals(o)
    assert s.min() > 0.6 and s.max() < 1.25 and abs(s.mean().item() - 1) < 0.15  # all near 1, none near 0
    assert (u.T @ o @ v).diagonal().min() > 0.6  # the same singular directions as g

    w = torch.nn.Parameter(torch.randn(64, 256) * 0.02)
    gain = torch.nn.Parameter(torch.ones(64))
    opt = MuonAdamW([w], [], [gain], lr=1e-2, weight_decay=0.0, betas=(0.9, 0.95), eps=1e-8)
    w.grad, gain.grad = g.clone(), torch.ones(64)
    w0 = w.detach().clone()
    opt.step()
    update = (w0 - w.detach()) / (1e-2 * 0.2 * math.sqrt(256))
    nesterov = g.lerp(g * (1 - 0.95), 0.95)  # the first step's Nesterov momentum, as torch.optim.Muon forms it
    expected = _zeropower_via_newtonschulz(nesterov, (DEFAULT_A, DEFAULT_B, DEFAULT_C), 5, 1e-7).float()
    assert torch.allclose(update, expected, atol=1e-4)
    assert (update - o).norm() < 0.1 * o.norm()  # a multiple of the gradient: the same orthogonalisation, up to bf16
    assert (w0 - w.detach()).pow(2).mean().sqrt().item() == pytest.approx(0.2 * 1e-2, rel=0.1)
    assert gain.detach().sub(1).abs().max().item() == pytest.approx(1e-2, rel=1e-3)  # AdamW's first step: lr
    state = opt.state_dict()  # one state for both: Muon's momentum and AdamW's moments
    assert [g.get("optimizer") for g in state["param_groups"]] == ["muon", "adamw", "adamw"]
    assert set(state["state"][0]) == {"momentum_buffer"} and {"exp_avg", "exp_avg_sq"} <= set(state["state"][1])


def test_killed_muon_run_resumes_with_exactly_the_uninterrupted_losses(prepared_corpus, tmp_path):
    base = ["--data", str(prepared_corpus), *TINY_FLAGS, "--save-steps", "0", "--precision", "fp32"]
    common = [*base, "--optimizer", "muon", "--max-steps", "24"]
    ref = run_aura("pretrain", "--output-dir", tmp_path / "ref", *common)
    assert ref.returncode == 0, ref.stderr
    losses = read_log(tmp_path / "ref")
    assert losses[24] < losses[1] - 0.5  # it learns
    run = tmp_path / "run"
    env = dict(os.environ, AURA_LANG="en", AURA_PLAIN="1", PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "aura", "pretrain", "--output-dir", str(run), *map(str, common)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if "Step 6/24" in line:
            proc.send_signal(signal.SIGTERM)
            break
    out = "".join(lines) + proc.stdout.read()
    assert proc.wait(timeout=300) == 3, out
    interrupt = next(run.glob("interrupt-step-*"))
    saved = torch.load(interrupt / "optimizer.pt", map_location="cpu", weights_only=True)
    kinds = [g["optimizer"] for g in saved["param_groups"]]
    assert kinds == ["muon", "adamw", "adamw"]
    muon_ids = saved["param_groups"][0]["params"]
    assert muon_ids and all("momentum_buffer" in saved["state"][i] for i in muon_ids)
    resumed = run_aura("pretrain", "--output-dir", run, *common, "--resume-from", "latest")
    assert resumed.returncode == 0, resumed.stderr
    again = read_log(run)
    assert [losses[s] for s in range(1, 25)] == [again[s] for s in range(1, 25)]
    # the optimizer is part of the run: resuming it with another one is refused, naming both
    r = run_aura_here("pretrain", "--output-dir", run, *base, "--optimizer", "adamw", "--max-steps", "30",
                      "--resume-from", "latest")
    assert r.returncode == 2 and "--optimizer adamw does not match the checkpoint" in r.stderr, r.stderr


def test_muon_under_fsdp_is_refused_with_the_way_out(prepared_corpus, tmp_path):
    r = run_aura_here("pretrain", "--data", prepared_corpus, "--output-dir", tmp_path / "r", *TINY_FLAGS,
                      "--optimizer", "muon", "--strategy", "fsdp", "--max-steps", "2")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "--optimizer muon does not work with FSDP2" in r.stderr and "--strategy ddp" in r.stderr
    assert not (tmp_path / "r").exists()


@pytest.mark.dist
def test_ddp_two_ranks_equal_one_process_and_diloco_runs_muon(prepared, tmp_path_factory):  # noqa: F811
    """2 ranks x batch 4 (DDP) against 1 process x batch 8, both Muon: every rank orthogonalises the same
    all-reduced gradient, so the losses agree step by step up to float rounding (bf16 Newton-Schulz on
    gradients whose last bits differ). Then --local-steps 3 runs Muon + AdamW as DiLoCo's inner optimizer
    and keeps its replicas equal at every outer step."""
    import re

    from tests.distutil import env, free_port, output
    from tests.test_dist_train import _args

    muon = ["--optimizer", "muon"]
    ref_dir = tmp_path_factory.mktemp("muon_ref") / "run"
    ref = run_aura(*_args(prepared, ref_dir, "--batch-size", "8", *muon, steps=12), env=env())
    assert ref.returncode == 0, output(ref)[-4000:]
    ddp_dir = tmp_path_factory.mktemp("muon_ddp") / "run"
    ddp = run_aura("launch", "--gpus-per-node", "2", "--master-port", str(free_port()),
                   *_args(prepared, ddp_dir, "--batch-size", "4", "--strategy", "ddp", *muon, steps=12),
                   env=env(), timeout=400)
    text = output(ddp)
    assert ddp.returncode == 0 and "Traceback" not in text, text[-5000:]
    assert "Sync=FAIL" not in text and text.count("Sync=OK") >= 12
    a, b = read_log(ref_dir), read_log(ddp_dir)
    assert max(abs(a[s] - b[s]) for s in range(1, 13)) < 2e-3, (a, b)
    local_dir = tmp_path_factory.mktemp("muon_local") / "run"
    local = run_aura("launch", "--gpus-per-node", "2", "--master-port", str(free_port()),
                     *_args(prepared, local_dir, "--batch-size", "4", "--local-steps", "3", *muon, steps=12),
                     env=env(), timeout=400)
    text = output(local)
    assert local.returncode == 0 and "Traceback" not in text, text[-5000:]
    syncs = {int(m[1]): m[2] for m in re.finditer(r"\| Step (\d+)/\d+ \|.*\| Sync=(\S+)$", text, flags=re.M)}
    assert syncs == {s: "OK" if s % 3 == 0 else "local" for s in range(1, 13)}
    losses = read_log(local_dir)
    assert losses[12] < losses[1] - 0.3
