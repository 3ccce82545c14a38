"""`aura finetune --objective grpo` under DDP on 2 gloo ranks, a prompt's group spread over both ranks: the same
completions (their keys do not depend on the rank), rewards, advantages, losses and statistics per step as
one process with the same global batch (2 ranks x 1 completion x 2 micro-batches == 1 x 2 x 2; and with 2
completions per micro-batch, whose shared prompt runs once on each rank outside DDP's forward)."""

from __future__ import annotations

import pytest

from tests.distutil import output, torchrun
from tests.test_grpo import FAST, env, finetune, step_rows  # noqa: F401  (env: the module fixture)

pytestmark = [pytest.mark.dist, pytest.mark.slow]
KEYS = (
    "train_loss",
    "reward",
    "reward_std",
    "rewards/exact-answer/mean",
    "rewards/my_rewards.digits/mean",
    "completion_length",
    "completions_truncated",
    "entropy",
    "kl",
    "clip_ratio",
)


DAPO = [  # silent groups sampled again on the rank that holds their rows, truncated completions masked
    "--reward",
    "exact-answer",
    "--reward",
    "{rewards}:vowel_first",
    "--dynamic-sampling",
    "resample",
    "--mask-truncated-completions",
]


@pytest.mark.parametrize(
    "per_rank,dapo",
    [(1, False), (2, False), (1, True)],  # 2: each micro-batch holds 2 rows of one prompt, run once (shared)
)
def test_grpo_under_ddp_equals_one_process(env, tmp_path, per_rank, dapo):  # noqa: F811
    rewards = (
        [a.format(rewards=env["rewards"]) for a in DAPO]
        if dapo
        else ["--reward", "exact-answer", "--reward", f"{env['rewards']}:digits:0.5"]
    )
    common = [
        str(a)
        for a in (
            "--base-model",
            env["llama"],
            "--data",
            env["data"],
            *FAST,
            "--max-steps",
            3,
            "--beta",
            "0.04",
            *rewards,
            "--val-fraction",
            0,
        )
    ]
    single = tmp_path / "single"
    finetune(*common, "--batch-size", 2 * per_rank, "--output-dir", single)
    ddp = tmp_path / "ddp"
    r = torchrun(
        "-m",
        "aura",
        "finetune",
        *common,
        "--batch-size",
        str(per_rank),
        "--backend",
        "gloo",
        "--output-dir",
        str(ddp),
        timeout=900,
    )
    text = output(r)
    assert r.returncode == 0, text
    assert "Parallelism strategy: ddp" in text and "Sync=OK" in text
    a, b = step_rows(single), step_rows(ddp)
    assert set(a) == set(b) == {1, 2, 3}
    keys = list(KEYS) if not dapo else [k for k in KEYS if "digits" not in k] + ["groups_resampled", "groups_dropped"]
    for step in a:
        for key in keys + (["completions_masked"] if dapo else []):
            if a[step][key] == "":  # a step that trained no token (every completion masked) has no loss
                assert b[step][key] == "", (step, key)
                continue
            assert float(b[step][key]) == pytest.approx(float(a[step][key]), rel=1e-5, abs=1e-6), (step, key)
    if dapo:
        assert sum(float(r["groups_resampled"]) for r in a.values()) > 0
    assert (ddp / "final" / "adapter_model.safetensors").is_file()
