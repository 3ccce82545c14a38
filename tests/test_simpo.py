"""`aura finetune --objective simpo|cpo` and GRPO's GSPO/CISPO options through the real CLI: the embedded
Spanish pairs without --data, no reference model of any kind, the logged rewards and `aura plot`'s rewards
panel, exact resume after SIGTERM and then after kill -9, two ranks under DDP and DeepSpeed ZeRO-2 equal to
one process with the same global batch, the Studio's form, and bad combinations refused in Spanish and
English. Parity with TRL is in tests/test_simpo_parity.py (CPOTrainer) and tests/test_grpo_parity.py
(GRPOTrainer: GSPO, CISPO)."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import run_aura_here, run_aura_killed, run_aura_terminated
from tests.test_finetune import finetune
from tests.test_preference import FAST, REWARDS, embedded_records, step_rows, write_jsonl
from tests.tiny_models import build_llama, train_tokenizer


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("simpo")
    tok = train_tokenizer(root / "tok", vocab_size=500)
    llama = build_llama(root / "llama", tok, hidden=64, layers=2)
    data = write_jsonl(root / "pairs.jsonl", embedded_records(12))
    return {"root": root, "tok": tok, "llama": llama, "data": data}


def test_simpo_and_cpo_on_the_embedded_pairs_need_no_reference_and_plot_their_rewards(env, tmp_path):
    simpo, cpo = tmp_path / "simpo", tmp_path / "cpo"
    out = finetune("--objective", "simpo", "--base-model", env["llama"], "--output-dir", simpo, *FAST, "--max-steps", 3)
    assert "No --data: using the embedded Spanish preference pairs" in out
    assert "SimPO: no reference model" in out and "reference:" not in out
    rows = step_rows(simpo)
    assert set(rows) == {1, 2, 3} and "nll_loss" not in rows[1]
    for r in rows.values():
        assert all(r[k] != "" for k in REWARDS)
        assert float(r["rewards/margin"]) == pytest.approx(
            float(r["rewards/chosen"]) - float(r["rewards/rejected"]), abs=1e-5
        )
        # length-normalised: a reward is beta (0.1) x a mean log-prob per token, not a sum over the answer
        assert float(r["rewards/chosen"]) == pytest.approx(0.1 * float(r["logps/chosen"]), rel=1e-4)
        assert -20 < float(r["logps/chosen"]) < 0
    config = json.loads((simpo / "model_config.json").read_text())["config"]
    assert (config["gamma"], config["cpo_alpha"]) == (0.5, 0.0)  # TRL's simpo_gamma; no NLL term

    out = finetune(
        "--objective",
        "cpo",
        "--base-model",
        env["llama"],
        "--data",
        env["data"],
        "--method",
        "full",
        "--output-dir",
        cpo,
        *FAST[:4],
        *FAST[8:],  # no LoRA flags
        "--max-steps",
        2,
    )
    assert "CPO: no reference model" in out and "reference:" not in out  # DPO would say "a frozen copy"
    rows = step_rows(cpo)
    assert all(r["nll_loss"] != "" and float(r["nll_loss"]) > 0 for r in rows.values())  # cpo_alpha 1 by default
    assert (cpo / "final" / "model.safetensors").is_file()

    r = run_aura_here("plot", simpo, cpo, "--output-dir", tmp_path, "--out", "pref.svg")
    assert r.returncode == 0, r.stdout + r.stderr
    svg = (tmp_path / "pref.svg").read_text()
    for run in ("simpo", "cpo"):  # the rewards panel holds both runs' margins and accuracies
        assert f"{run} (Reward margin)" in svg and f"{run} (Preference accuracy)" in svg


def test_simpo_stopped_by_sigterm_then_killed_9_resumes_with_the_uninterrupted_losses(env, tmp_path):
    common = [
        "--objective",
        "simpo",
        "--base-model",
        env["llama"],
        "--data",
        env["data"],
        *FAST,
        "--max-steps",
        8,
        "--batch-size",
        1,
        "--gradient-accumulation-steps",
        2,
        "--gamma",
        0.3,
        "--label-smoothing",
        0.1,
    ]
    finetune(*common, "--output-dir", tmp_path / "ref")
    run = tmp_path / "run"
    out, stopped = run_aura_terminated("finetune", "--output-dir", run, *common, run=run, at="Step 3/8")
    assert 3 <= stopped < 8, out
    # resumed, saving every step, then killed -9 once the first step after the interruption is saved: the
    # next command resumes from that periodic checkpoint, dropping the log rows written after it
    out = run_aura_killed(
        "finetune",
        "--output-dir",
        run,
        *common,
        "--save-steps",
        1,
        "--resume-from",
        "latest",
        saved_in=run,
    )
    assert "Resumed from" in out and not (run / "final").exists()
    out = finetune(*common, "--output-dir", run, "--resume-from", "latest")
    resumed_at = re.search(r"Resumed from \S+: step (\d+),", out)
    assert resumed_at and int(resumed_at[1]) > stopped, out  # the periodic checkpoint saved after the interruption
    a, b = step_rows(tmp_path / "ref"), step_rows(run)
    assert set(a) == set(b) == set(range(1, 9))
    for step in a:  # exactly: the logged strings
        assert [a[step][k] for k in ("train_loss", *REWARDS)] == [b[step][k] for k in ("train_loss", *REWARDS)], step


DIST = ["--objective", "simpo", "--cpo-alpha", "0.5"]  # CPO's NLL term included


@pytest.fixture(scope="module")
def single(env) -> dict[int, dict]:
    """One process, 2 pairs per step: the reference of every 2-rank run below."""
    run = env["root"] / "single"
    finetune(*DIST, "--base-model", env["llama"], "--data", env["data"], *FAST, "--max-steps", 3, "--output-dir", run)
    return step_rows(run)


@pytest.mark.dist
@pytest.mark.parametrize("strategy", ["ddp", pytest.param("zero2", marks=pytest.mark.slow)])
def test_simpo_on_two_gloo_ranks_equals_one_process_with_the_same_global_batch(env, single, tmp_path, strategy):
    """DDP and DeepSpeed ZeRO-2: the pair count is global, so 2 ranks x 1 pair == 1 process x 2 pairs.
    (FSDP2 runs the same objective code: tests/test_kto.py runs KTO under it.)"""
    from tests.distutil import output, torchrun

    (tmp_path / "ds.json").write_text('{"zero_optimization": {"stage": 2}}')
    engine = ["--deepspeed", tmp_path / "ds.json"] if strategy == "zero2" else []
    dist_run = tmp_path / "dist"
    r = torchrun(
        "-m",
        "aura",
        "finetune",
        *DIST,
        "--base-model",
        env["llama"],
        "--data",
        env["data"],
        *FAST,
        "--max-steps",
        3,
        *engine,
        "--batch-size",
        "1",
        "--output-dir",
        dist_run,
        "--backend",
        "gloo",
    )
    assert r.returncode == 0, output(r)
    assert (
        "DeepSpeed ZeRO-2: micro-batch 1, accumulation 1, global batch 2" if engine else "Parallelism strategy: ddp"
    ) in output(r)
    a, b = single, step_rows(dist_run)
    assert set(a) == set(b) == {1, 2, 3}
    for step in a:
        for key in ("train_loss", "nll_loss", *REWARDS):
            assert float(b[step][key]) == pytest.approx(float(a[step][key]), abs=2e-4), (step, key)


def test_grpo_with_sequence_level_ratios_and_the_cispo_loss_trains(env, tmp_path):
    """GSPO's sequence-level ratio with CISPO's loss through the CLI: TRL's warning about a summed loss at
    sequence level, the clipped share logged, the adapter written."""
    prompts = write_jsonl(
        tmp_path / "p.jsonl", [{"prompt": f"¿Cuánto es {i} más {i}?", "answer": str(2 * i)} for i in range(1, 7)]
    )
    run = tmp_path / "run"
    out = finetune(
        "--objective",
        "grpo",
        "--base-model",
        env["llama"],
        "--data",
        prompts,
        "--output-dir",
        run,
        "--num-generations",
        4,
        "--batch-size",
        4,
        "--gradient-accumulation-steps",
        1,
        "--max-completion-length",
        8,
        "--log-interval",
        1,
        "--lora-r",
        8,
        "--lora-dropout",
        0,
        "--precision",
        "fp32",
        "--learning-rate",
        "5e-3",
        "--warmup-steps",
        0,
        "--save-steps",
        0,
        "--val-fraction",
        0,
        "--max-steps",
        2,
        "--importance-sampling-level",
        "sequence",
        "--loss-type",
        "cispo",
    )
    assert "--importance-sampling-level sequence with --loss-type cispo: the loss sums per-token" in out
    rows = step_rows(run)
    assert set(rows) == {1, 2} and all(r["clip_ratio"] != "" and r["entropy"] != "" for r in rows.values())
    assert (run / "final" / "adapter_model.safetensors").is_file()


@pytest.mark.parametrize(
    "flags,words",
    [
        (
            ["--objective", "simpo", "--precompute-ref"],
            "--precompute-ref does not apply to --objective simpo: SimPO uses no reference model",
        ),
        (["--objective", "cpo", "--gamma", "1"], "--gamma only applies to --objective simpo (the objective is 'cpo')"),
        (["--objective", "dpo", "--cpo-alpha", "1"], "--cpo-alpha only applies to --objective simpo or cpo"),
        (["--objective", "simpo", "--dpo-loss", "ipo"], "--dpo-loss does not apply to --objective simpo"),
        (["--objective", "cpo", "--train-on-prompt"], "--train-on-prompt does not apply to --objective cpo"),
        (["--objective", "simpo", "--gamma", "-0.5"], "--gamma cannot be negative (got: -0.5)"),
        (
            ["--objective", "simpo", "--importance-sampling-level", "sequence"],
            "--importance-sampling-level only applies to --objective grpo (the objective is 'simpo')",
        ),
        (
            ["--objective", "grpo", "--loss-type", "cispo", "--epsilon", "0.3"],
            "--epsilon does not apply to --loss-type cispo",
        ),
        (
            ["--objective", "grpo", "--loss-type", "cispo", "--epsilon-high", "0.28"],
            "--epsilon-high is the importance ratio's upper bound (5 recommended, as TRL and ScaleRL) and must be "
            "greater",
        ),
        (["--objective", "grpo", "--importance-sampling-level", "sentence"], "invalid choice: 'sentence'"),
    ],
)
def test_bad_combinations_are_refused(env, tmp_path, flags, words):
    out = finetune(
        "--base-model", env["llama"], "--data", env["data"], *flags, "--output-dir", tmp_path / "r", expect=2
    )
    assert words in out
    assert not (tmp_path / "r").exists()  # refused before anything is written


def test_refusals_in_spanish():
    r = run_aura_here("finetune", "--objective", "simpo", "--precompute-ref", env={"AURA_LANG": "es"})
    assert r.returncode == 2 and "SimPO no usa modelo de referencia" in r.stderr, r.stderr
    r = run_aura_here(
        "finetune", "--objective", "grpo", "--loss-type", "cispo", "--epsilon", "0.3", env={"AURA_LANG": "es"}
    )
    assert r.returncode == 2 and "CISPO solo acota la razón por arriba" in r.stderr, r.stderr


def test_studio_form_offers_the_new_objectives_and_refuses_a_bad_combination(tmp_path):
    from aura.core.errors import AuraError
    from aura.studio.actions import build_argv, form

    fields = {f["name"]: f for f in form("finetune")}
    assert {"simpo", "cpo"} <= set(fields["objective"]["choices"]) and fields["objective"]["essential"]
    assert fields["importance_sampling_level"]["choices"] == ["token", "sequence"]
    assert "cispo" in fields["loss_type"]["choices"]
    assert fields["gamma"]["type"] == fields["cpo_alpha"]["type"] == "float"
    assert "simpo_gamma" in fields["gamma"]["help"]["en"] and "simpo_gamma" in fields["gamma"]["help"]["es"]
    argv = build_argv("finetune", {"objective": "simpo", "gamma": 0.8}, tmp_path / "simpo")
    assert argv[:5] == ["finetune", "--objective", "simpo", "--gamma", "0.8"]
    with pytest.raises(AuraError, match="--precompute-ref does not apply to --objective cpo"):
        build_argv("finetune", {"objective": "cpo", "precompute_ref": True}, tmp_path / "cpo")
