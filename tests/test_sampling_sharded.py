"""`aura finetune --objective grpo` (LoRA and full fine-tuning) and `--objective distill` (LoRA, on-policy) under
FSDP2 and DeepSpeed ZeRO-2 on 2 gloo ranks: the same per-step losses, rewards, KL, validation rewards and
on-policy draws as one process with the same global batch (2 ranks x 1 row == 1 process x 2 rows). The
rollouts stop at different lengths on each rank (``--stop e``), so no collective may run while they are drawn
(``aura.distributed.whole_weights``: an FSDP2 model samples from its weights gathered once). An FSDP2 run
resumed from its mid-run (DCP) checkpoint logs exactly the uninterrupted steps. DDP is in
tests/test_grpo_dist.py and tests/test_distill.py; the tools under FSDP2 in tests/test_grpo_tools.py."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from tests.distutil import output, torchrun
from tests.test_finetune import finetune
from tests.test_grpo import FAST as GRPO_FAST, MATH, USER_REWARD
from tests.test_preference import FAST as SFT_FAST
from tests.tiny_models import build_llama, train_tokenizer

pytestmark = [pytest.mark.dist, pytest.mark.slow]
GRPO_KEYS = ("train_loss", "grad_norm", "reward", "rewards/my_rewards.digits/mean", "completion_length", "kl")
DISTILL_KEYS = ("train_loss", "grad_norm", "on_policy")


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("sampling_sharded")
    tok = train_tokenizer(root / "tok", vocab_size=500)
    rows = [json.loads(ln) for ln in (MATH / "train.jsonl").read_text(encoding="utf-8").splitlines()[:6]]
    prompts = root / "prompts.jsonl"
    prompts.write_text(
        "".join(
            json.dumps({"prompt": r["prompt"][:60], "answer": r["answer"]}, ensure_ascii=False) + "\n" for r in rows
        ),
        encoding="utf-8",
    )
    rewards = root / "my_rewards.py"
    rewards.write_text(USER_REWARD, encoding="utf-8")
    ds = root / "ds.json"
    ds.write_text(json.dumps({"zero_optimization": {"stage": 2}}))
    return {
        "root": root,
        "llama": build_llama(root / "llama", tok, hidden=64, layers=2, seed=0),
        "teacher": build_llama(root / "teacher", tok, hidden=64, layers=4, seed=1),
        "prompts": prompts,
        "rewards": rewards,
        "ds": ds,
    }


def rows_of(run: Path, kind: str = "step") -> dict[int, dict]:
    with open(run / "training_log.csv", newline="") as f:
        return {int(r["step"]): r for r in csv.DictReader(f) if r["kind"] == kind}


def grpo_args(env, *extra) -> list[str]:
    """4 completions of one prompt per step, 2 micro-batches; rollouts end at the first "e" (lengths differ)."""
    return [
        str(a)
        for a in (
            "--base-model",
            env["llama"],
            "--data",
            env["prompts"],
            *GRPO_FAST,
            "--beta",
            "0.04",
            "--reward",
            "exact-answer",
            "--reward",
            f"{env['rewards']}:digits:0.5",
            "--stop",
            "e",
            *extra,
        )
    ]


def distill_args(env, *extra) -> list[str]:
    """--lmbda 0.5: the student's own answers in some micro-batches (seed 0: steps 1 and 3), the data's in others."""
    return [
        str(a)
        for a in (
            "--objective",
            "distill",
            "--base-model",
            env["llama"],
            "--teacher",
            env["teacher"],
            *SFT_FAST,
            "--max-new-tokens",
            12,
            "--lmbda",
            0.5,
            "--val-fraction",
            0,
            *extra,
        )
    ]


def two_ranks(args: list[str], out: Path, strategy: str, env, *extra: str) -> str:
    how = ["--deepspeed", str(env["ds"])] if strategy == "deepspeed" else ["--strategy", strategy]
    r = torchrun(
        "-m",
        "aura",
        "finetune",
        *args,
        *how,
        "--batch-size",
        "1",
        "--backend",
        "gloo",
        "--output-dir",
        str(out),
        *extra,
        timeout=600,
    )
    text = output(r)
    assert r.returncode == 0, text[-4000:]
    assert ("DeepSpeed ZeRO-2" if strategy == "deepspeed" else "Parallelism strategy: fsdp") in text
    return text


def assert_same(a: dict, b: dict, keys, *, rel: float, abs: float) -> None:
    assert set(a) == set(b) and a, (sorted(a), sorted(b))
    for step in a:
        for key in keys:
            assert b[step][key] != "", (step, key)
            assert float(b[step][key]) == pytest.approx(float(a[step][key]), rel=rel, abs=abs), (step, key)


def resumes_exactly(args: list[str], run: Path, tmp_path: Path, env, keys, *, kind: str = "step") -> None:
    """A second FSDP2 run started from ``run``'s checkpoint-step-2 logs the very strings ``run`` logged after it."""
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copytree(run / "checkpoint-step-2", resumed / "checkpoint-step-2")
    text = two_ranks(args, resumed, "fsdp", env, "--resume-from", "latest")
    assert "Resumed from" in text
    again, straight = rows_of(resumed, kind), rows_of(run, kind)
    assert set(again) == {s for s in straight if s > 2} and again
    for step in again:
        assert [again[step][k] for k in keys] == [straight[step][k] for k in keys], step


@pytest.fixture(scope="module")
def single_grpo(env) -> Path:
    """One process, 2 completions per micro-batch (their prompt shared in one pass), 4 steps, validation on
    2 held-out prompts every 2 steps."""
    run = env["root"] / "single_grpo"
    finetune(
        *grpo_args(env, "--max-steps", 4, "--val-fraction", 0.34, "--eval-interval", 2),
        "--batch-size",
        2,
        "--output-dir",
        run,
    )
    return run


@pytest.mark.parametrize("strategy", ["fsdp", "deepspeed"])
def test_grpo_lora_under_fsdp2_and_deepspeed_equals_one_process(env, single_grpo, tmp_path, strategy):
    """LoRA: rollouts from the merged weights, the reference the base with the adapter disabled (inside the
    sharded model under FSDP2, inside DeepSpeed's engine under ZeRO-2); FSDP2 also resumes exactly."""
    args = grpo_args(env, "--max-steps", 4, "--val-fraction", 0.34, "--eval-interval", 2)
    run = tmp_path / strategy
    two_ranks(args, run, strategy, env, "--save-steps", "2")
    a = rows_of(single_grpo)
    assert len({a[s]["completion_length"] for s in a}) > 1 and any(float(a[s]["kl"]) > 0 for s in a)
    assert_same(a, rows_of(run), GRPO_KEYS, rel=1e-5, abs=1e-6)
    assert_same(rows_of(single_grpo, "eval"), rows_of(run, "eval"), ("val_reward",), rel=1e-5, abs=1e-6)
    assert (run / "final" / "adapter_model.safetensors").is_file()
    if strategy == "fsdp":
        assert (run / "checkpoint-step-2" / "dcp").is_dir()
        resumes_exactly(args, run, tmp_path, env, GRPO_KEYS)


def test_full_grpo_under_fsdp2_shards_its_reference_and_equals_one_process(env, tmp_path):
    """Full fine-tuning: the policy and its frozen reference both sharded; rollouts from the gathered weights."""
    args = grpo_args(env, "--max-steps", 2, "--val-fraction", 0)
    for flag in ("--lora-r", "--lora-dropout"):  # LoRA's flags (and their values) out
        i = args.index(flag)
        del args[i : i + 2]
    args += ["--method", "full", "--learning-rate", "1e-3"]
    single, run = tmp_path / "single", tmp_path / "fsdp"
    finetune(*args, "--batch-size", 2, "--output-dir", single)
    text = two_ranks(args, run, "fsdp", env)
    assert "The frozen copy of the model (the reference) is sharded with FSDP2 over 2 ranks" in text
    a = rows_of(single)
    assert float(a[2]["kl"]) > 0  # the policy moved away from its reference
    assert_same(a, rows_of(run), GRPO_KEYS, rel=1e-5, abs=1e-6)


@pytest.fixture(scope="module")
def single_distill(env) -> Path:
    run = env["root"] / "single_distill"
    finetune(*distill_args(env, "--max-steps", 4), "--output-dir", run)
    return run


@pytest.mark.parametrize("strategy", ["fsdp", "deepspeed"])
def test_distill_under_fsdp2_and_deepspeed_equals_one_process(env, single_distill, tmp_path, strategy):
    """On-policy distillation: the student samples from its gathered weights (FSDP2) or its whole engine module
    (ZeRO-2); the teacher is sharded like the student under FSDP2 and whole under DeepSpeed. FSDP2 also
    resumes exactly."""
    args = distill_args(env, "--max-steps", 4)
    run = tmp_path / strategy
    text = two_ranks(args, run, strategy, env, "--save-steps", "2")
    sharded = "The frozen teacher (--teacher) is sharded with FSDP2 over 2 ranks"
    assert (sharded in text) == (strategy == "fsdp")
    a = rows_of(single_distill)
    assert {float(a[s]["on_policy"]) for s in a} == {0.0, 1.0}
    assert_same(a, rows_of(run), DISTILL_KEYS, rel=1e-5, abs=2e-4)
    if strategy == "fsdp":
        resumes_exactly(args, run, tmp_path, env, DISTILL_KEYS)
