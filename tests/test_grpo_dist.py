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


@pytest.mark.parametrize("per_rank", [1, 2])  # 2: each micro-batch holds 2 rows of one prompt, run once (shared)
def test_grpo_under_ddp_equals_one_process(env, tmp_path, per_rank):  # noqa: F811
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
            "--reward",
            "exact-answer",
            "--reward",
            f"{env['rewards']}:digits:0.5",
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
    for step in a:
        for key in KEYS:
            assert float(b[step][key]) == pytest.approx(float(a[step][key]), rel=1e-5, abs=1e-6), (step, key)
    assert (ddp / "final" / "adapter_model.safetensors").is_file()
