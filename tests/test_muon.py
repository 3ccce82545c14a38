"""``--optimizer muon``: which tensors take Muon, the Newton-Schulz orthogonalisation and Moonlight's RMS
scaling, one optimizer state in every checkpoint, loss falls, a killed run resumes with exactly the
uninterrupted per-step losses, DDP on 2 ranks equals one process with the doubled batch, DiLoCo runs it as
its inner optimizer, and under DDP and FSDP2 the ranks share the Newton-Schulz work (each its share of the
matrices), train as one process does and, under FSDP2, resume exactly from the sharded checkpoint."""

from __future__ import annotations

import json
import math
import os
import shutil
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

    spec = resolve_spec(
        "manual", arch=arch, embed_size=64, num_layers=2, num_heads=4, seq_length=32, intermediate_size=128
    )
    hidden, decay, no_decay = _groups(build_model(spec, 300))
    suffixes = {
        "llama": (
            "q_proj.weight",
            "k_proj.weight",
            "v_proj.weight",
            "o_proj.weight",
            "gate_proj.weight",
            "up_proj.weight",
            "down_proj.weight",
        ),
        "gpt2": ("c_attn.weight", "attn.c_proj.weight", "c_fc.weight", "mlp.c_proj.weight"),
    }
    expected = suffixes["gpt2" if arch == "gpt2" else "llama"]
    assert len(hidden) == 2 * len(expected) and all(n.endswith(expected) for n in hidden)
    assert all(".layers." in n or ".h." in n for n in hidden)
    if arch == "gpt2":  # the head is tied to the token embedding: AdamW, undecayed, once
        assert decay == [] and "transformer.wte.weight" in no_decay and "transformer.wpe.weight" in no_decay
    else:
        assert decay == ["lm_head.weight"] and "model.embed_tokens.weight" in no_decay
    assert all(
        "norm" in n or "ln_" in n or n.endswith((".bias", "wte.weight", "wpe.weight", "embed_tokens.weight"))
        for n in no_decay
    )


def test_newton_schulz_orthogonalises_and_the_update_has_adamw_rms():
    """torch's Newton-Schulz (5 quintic steps) maps a badly conditioned matrix to singular values near 1;
    the first MuonAdamW step moves a (64 x 256) matrix by exactly that, times lr * 0.2 * sqrt(256): an
    update RMS of 0.2 * lr, a typical AdamW update's (Moonlight), with decoupled weight decay."""
    from torch.optim._muon import DEFAULT_A, DEFAULT_B, DEFAULT_C, _zeropower_via_newtonschulz

    from aura.train.optim.muon import MuonAdamW, ns_dtype
    from aura.train.optim.muon_dist import newton_schulz

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
    # in the dtype this CPU computes it fastest in (bf16 with avx512_bf16 or AMX, else fp32): ns_dtype's
    assert opt.dtype == ns_dtype("cpu")
    expected = newton_schulz(nesterov, (DEFAULT_A, DEFAULT_B, DEFAULT_C), 5, 1e-7, dtype=opt.dtype).float()
    assert torch.allclose(update, expected, atol=1e-4)
    assert (update - o).norm() < 0.1 * o.norm()  # a multiple of the gradient: the same orthogonalisation, up to bf16
    assert (w0 - w.detach()).pow(2).mean().sqrt().item() == pytest.approx(0.2 * 1e-2, rel=0.1)
    assert gain.detach().sub(1).abs().max().item() == pytest.approx(1e-2, rel=1e-3)  # AdamW's first step: lr
    state = opt.state_dict()  # one state for both: Muon's momentum and AdamW's moments
    assert [g.get("optimizer") for g in state["param_groups"]] == ["muon", "adamw", "adamw"]
    assert set(state["state"][0]) == {"momentum_buffer"} and {"exp_avg", "exp_avg_sq"} <= set(state["state"][1])


def test_newton_schulz_runs_torchs_algorithm_in_the_fast_dtype(monkeypatch):
    """``newton_schulz`` in fp32 is torch's bf16 function with the dtype changed and nothing else: its lines
    run in bf16 give torch's bytes (wide and tall matrices); in fp32 it orthogonalises as well, within bf16's
    rounding of torch's result. ``ns_dtype``: bf16 on CUDA and on fast-bf16 CPUs (by the ranks' agreed
    hardware when given), fp32 on other CPUs. The fp32 step of MuonAdamW is torch.optim.Muon's step with
    that Newton-Schulz, and its bf16 one is torch's own."""
    from torch.optim._muon import DEFAULT_A, DEFAULT_B, DEFAULT_C, _zeropower_via_newtonschulz

    from aura.models import hardware
    from aura.models.hardware import HardwareInfo
    from aura.train.optim.muon import MuonAdamW, ns_dtype
    from aura.train.optim.muon_dist import _newton_schulz_in, muon_step, newton_schulz

    coef = (DEFAULT_A, DEFAULT_B, DEFAULT_C)
    g = torch.Generator().manual_seed(1)
    for shape in ((48, 96), (96, 48)):
        x = torch.randn(shape, generator=g)
        before = x.clone()
        torchs = _zeropower_via_newtonschulz(x, coef, 5, 1e-7)
        assert torch.equal(_newton_schulz_in(x, coef, 5, 1e-7, torch.bfloat16), torchs)
        assert torch.equal(newton_schulz(x, coef, 5, 1e-7), torchs)  # bf16: torch's own
        o = newton_schulz(x, coef, 5, 1e-7, dtype=torch.float32)
        assert o.dtype == torch.float32 and o.shape == shape and torch.equal(x, before)  # input untouched
        assert (o - torchs.float()).norm() < 0.05 * o.norm()
        s = torch.linalg.svdvals(o)
        assert s.min() > 0.5 and s.max() < 1.5
    with pytest.raises(ValueError):
        newton_schulz(torch.randn(2, 3, 4), coef, 5, 1e-7, dtype=torch.float32)

    cpu = HardwareInfo("cpu", "x", 1, 1, bf16=False, fp16=False)
    assert ns_dtype("cuda") == torch.bfloat16 and ns_dtype(torch.device("cuda", 0), cpu) == torch.bfloat16
    assert ns_dtype("cpu", cpu) == torch.float32
    assert ns_dtype("cpu", HardwareInfo("cpu", "x", 1, 1, bf16=True, fp16=False)) == torch.bfloat16
    monkeypatch.setattr(hardware, "cpu_fast_bf16", lambda flags=None: True)
    assert ns_dtype("cpu") == torch.bfloat16 and ns_dtype("cpu", cpu) == torch.float32  # the agreed view decides
    monkeypatch.setattr(hardware, "cpu_fast_bf16", lambda flags=None: False)
    assert ns_dtype("cpu") == torch.float32

    def run(dtype, *, ours):
        torch.manual_seed(2)
        ps = [torch.nn.Parameter(torch.randn(32, 64)), torch.nn.Parameter(torch.randn(80, 32))]
        opt = MuonAdamW(ps, [], [], lr=1e-2, weight_decay=0.1, betas=(0.9, 0.95), eps=1e-8, dtype=dtype)
        for _ in range(3):
            for p in ps:
                p.grad = torch.randn(p.shape)
            muon_step(opt.muon, process_group=None, dtype=dtype) if ours else opt.step()
        return [p.detach() for p in ps]

    assert all(torch.equal(a, b) for a, b in zip(run(torch.bfloat16, ours=False), run(torch.bfloat16, ours=True)))
    fp32 = run(torch.float32, ours=False)
    assert all(torch.equal(a, b) for a, b in zip(fp32, run(torch.float32, ours=True)))
    assert all(torch.allclose(a, b, atol=2e-3) for a, b in zip(fp32, run(torch.bfloat16, ours=False)))
    assert not any(torch.equal(a, b) for a, b in zip(fp32, run(torch.bfloat16, ours=False)))


def test_killed_muon_run_resumes_with_exactly_the_uninterrupted_losses(prepared_corpus, tmp_path):
    base = ["--data", str(prepared_corpus), *TINY_FLAGS, "--save-steps", "0", "--precision", "fp32"]
    common = [*base, "--optimizer", "muon", "--max-steps", "24"]
    ref = run_aura("pretrain", "--output-dir", tmp_path / "ref", *common)
    assert ref.returncode == 0, ref.stderr
    losses = read_log(tmp_path / "ref")
    assert losses[24] < losses[1] - 0.5  # it learns
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
    r = run_aura_here(
        "pretrain", "--output-dir", run, *base, "--optimizer", "adamw", "--max-steps", "30", "--resume-from", "latest"
    )
    assert r.returncode == 2 and "--optimizer adamw does not match the checkpoint" in r.stderr, r.stderr


@pytest.mark.dist
def test_ranks_share_newton_schulz_under_ddp_and_fsdp_and_match_one_process(tmp_path):
    """tests/dist_scripts/muon_dist.py on 2 ranks (tiny Llama: 14 Muon matrices, 4 steps)."""
    from tests.distutil import SCRIPTS, output, torchrun

    proc = torchrun(SCRIPTS / "muon_dist.py", tmp_path, tmp_path / "out.json")
    assert proc.returncode == 0, output(proc)[-4000:]
    ranks = [json.loads((tmp_path / f"out.json.{r}").read_text()) for r in (0, 1)]
    n, steps, save_at = ranks[0]["muon_matrices"], ranks[0]["steps"], ranks[0]["save_at"]
    assert n == 14 and not ranks[0]["ref_shared"]  # one process shares nothing (torch's step, or muon_step in fp32)
    for r in ranks:
        # each rank orthogonalised half the matrices per step (the 7 shapes come in pairs), not all of them
        assert r["ddp_calls"] == r["ddp_whole_calls"] == n // 2 * steps and r["fsdp_calls"] == n // 2 * save_at
        assert r["ddp_same_on_ranks"] and r["ddp_whole_same_on_ranks"] and r["fsdp_same_on_ranks"]
        # the same gradient as one process (whole batch on both ranks): the same bytes as one process
        assert r["ddp_whole_bitwise"] and r["ddp_whole"] == r["ref"]
        # half batches: the losses up to the reductions' rounding, and the weights within one step's update
        # (0.2 * lr * sqrt(256) = 0.032): gradients whose last bits differ go through Newton-Schulz, which
        # maps a gradient's near-null directions to unit singular values, so in bf16 a last-bit difference
        # can turn one of them. Measured: 2.3e-2 on a Xeon with AMX, under 4e-3 on an AMD EPYC with
        # avx512_bf16, 4.6e-5 with Newton-Schulz in fp32 (the loss curves within 2e-4 in all three)
        assert r["ddp"] == pytest.approx(r["ref"], abs=2e-4) and r["ddp_max_diff"] < 0.032
        # FSDP2's sharded path computes what the replicated one does
        assert r["fsdp_before"] + r["fsdp_after"] == pytest.approx(r["ddp"], abs=1e-6)
        assert r["fsdp_max_diff"] < 0.032 and r["fsdp_momentum"] == "DTensor"  # sharded state, saved by DCP
        # a fresh FSDP2 model and optimizer loaded from the DCP checkpoint continue exactly
        assert r["fsdp_resumed"] == r["fsdp_after"] and r["fsdp_resumed_bitwise"]
        assert r["other_layout_bitwise"]  # columns sharded: the whole matrix on every rank, the same step
    assert ranks[0]["ddp"] == ranks[1]["ddp"] and ranks[0]["fsdp_after"] == ranks[1]["fsdp_after"]


@pytest.mark.dist
@pytest.mark.slow
def test_fsdp_muon_run_trains_and_resumes_exactly(prepared, tmp_path):  # noqa: F811
    """``aura pretrain --strategy fsdp --optimizer muon`` on 2 ranks: no refusal any more; it learns, saves
    Muon's sharded momentum in DCP and a run resumed from step 5 gives the uninterrupted losses exactly (on 2
    ranks; on one process up to the reductions' rounding)."""
    from tests.distutil import env, output, torchrun
    from tests.test_dist_train import SAVE, _args

    args = ["--batch-size", "4", "--strategy", "fsdp", "--optimizer", "muon"]
    out = tmp_path / "full"
    full = torchrun("-m", "aura", *_args(prepared, out, *args, steps=2 * SAVE), timeout=400)
    text = output(full)
    assert full.returncode == 0 and "Traceback" not in text, text[-5000:]
    assert "Parallelism strategy: fsdp" in text and "| Sync=FSDP" in text
    losses = read_log(out)
    assert losses[2 * SAVE] < losses[1] - 0.3  # it learns
    ckpt = out / f"checkpoint-step-{SAVE}"
    assert sum(f.name.endswith(".distcp") for f in (ckpt / "dcp").iterdir()) == 2  # one shard per rank
    run = tmp_path / "resumed"
    shutil.copytree(ckpt, run / ckpt.name)
    resumed = torchrun(
        "-m", "aura", *_args(prepared, run, *args, "--resume-from", "latest", steps=2 * SAVE), timeout=400
    )
    assert resumed.returncode == 0, output(resumed)[-5000:]
    again = read_log(run)
    assert min(again) == SAVE + 1
    assert [again[s] for s in range(SAVE + 1, 2 * SAVE + 1)] == [losses[s] for s in range(SAVE + 1, 2 * SAVE + 1)]
    # on one process (batch 8): DCP reshards the momentum into whole matrices, torch.optim.Muon's own step
    one = tmp_path / "one"
    shutil.copytree(ckpt, one / ckpt.name)
    single = run_aura(
        *_args(
            prepared,
            one,
            "--batch-size",
            "8",
            "--optimizer",
            "muon",
            "--resume-from",
            "latest",
            "--load-sharded",
            steps=2 * SAVE,
        ),
        env=env(),
    )
    assert single.returncode == 0, output(single)[-5000:]
    alone = read_log(one)
    assert max(abs(alone[s] - losses[s]) for s in range(SAVE + 1, 2 * SAVE + 1)) < 2e-3, (alone, losses)


@pytest.mark.dist
def test_ddp_two_ranks_equal_one_process_and_diloco_runs_muon(prepared, tmp_path_factory):  # noqa: F811
    """2 ranks x batch 4 (DDP) against 1 process x batch 8, both Muon: the ranks share the orthogonalisation
    of the same all-reduced gradient, so the losses agree step by step up to float rounding (bf16
    Newton-Schulz on gradients whose last bits differ). Then --local-steps 3 runs Muon + AdamW as DiLoCo's
    inner optimizer and keeps its replicas equal at every outer step."""
    import re

    from tests.distutil import env, free_port, output
    from tests.test_dist_train import _args

    muon = ["--optimizer", "muon"]
    ref_dir = tmp_path_factory.mktemp("muon_ref") / "run"
    ref = run_aura(*_args(prepared, ref_dir, "--batch-size", "8", *muon, steps=12), env=env())
    assert ref.returncode == 0, output(ref)[-4000:]
    ddp_dir = tmp_path_factory.mktemp("muon_ddp") / "run"
    ddp = run_aura(
        "launch",
        "--gpus-per-node",
        "2",
        "--master-port",
        str(free_port()),
        *_args(prepared, ddp_dir, "--batch-size", "4", "--strategy", "ddp", *muon, steps=12),
        env=env(),
        timeout=400,
    )
    text = output(ddp)
    assert ddp.returncode == 0 and "Traceback" not in text, text[-5000:]
    assert "Sync=FAIL" not in text and text.count("Sync=OK") >= 12
    a, b = read_log(ref_dir), read_log(ddp_dir)
    assert max(abs(a[s] - b[s]) for s in range(1, 13)) < 2e-3, (a, b)
    local_dir = tmp_path_factory.mktemp("muon_local") / "run"
    local = run_aura(
        "launch",
        "--gpus-per-node",
        "2",
        "--master-port",
        str(free_port()),
        *_args(prepared, local_dir, "--batch-size", "4", "--local-steps", "3", *muon, steps=12),
        env=env(),
        timeout=400,
    )
    text = output(local)
    assert local.returncode == 0 and "Traceback" not in text, text[-5000:]
    syncs = {int(m[1]): m[2] for m in re.finditer(r"\| Step (\d+)/\d+ \|.*\| Sync=(\S+)$", text, flags=re.M)}
    assert syncs == {s: "OK" if s % 3 == 0 else "local" for s in range(1, 13)}
    losses = read_log(local_dir)
    assert losses[12] < losses[1] - 0.3
