"""The loop's extension points: an objective's statistics and periodic evaluators are logged, and neither
changes what is trained."""

from __future__ import annotations

import csv
import dataclasses

import torch

from tests.test_loop import TINY, prepared, read_log  # noqa: F401  (session fixture)


class ScaledLM:
    """Cross entropy plus one statistic: the summed loss of the batch, doubled."""

    name = "scaled"
    metric_names = ("check/double_loss",)

    def count(self, batch):
        from aura.train.objectives.objective import count_targets

        return count_targets(batch)

    def loss(self, model, batch):
        from aura.train.objectives.objective import token_loss_sum

        loss = token_loss_sum(model, batch)
        return loss, {"check/double_loss": 2 * loss.detach()}


class ParamNorm:
    """An evaluator: the global norm of the weights, every 3 steps."""

    interval = 3
    names = ("check/param_norm",)

    def __init__(self):
        self.calls: list[bool] = []

    def __call__(self, model, *, dist):
        self.calls.append(model.training or torch.is_grad_enabled())
        return {"check/param_norm": float(torch.sqrt(sum((p.double() ** 2).sum() for p in model.parameters())))}


def _run(out, data, *, objective=None, evaluators=()):
    from aura.train.pretrain import PretrainCommand, PretrainConfig
    from aura.train.run.session import run_training

    class Command(PretrainCommand):
        def prepare(self, run):
            job = super().prepare(run)
            return dataclasses.replace(job, objective=objective, evaluators=list(evaluators))

    cfg = PretrainConfig(data=[str(data)], output_dir=out, **{**TINY, "max_steps": 7, "save_steps": 0})
    assert run_training(cfg, Command()) == 0
    with open(out / "training_log.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_objective_statistics_and_evaluators_are_logged_without_changing_training(prepared, tmp_path):  # noqa: F811
    _run(tmp_path / "plain", prepared)
    plain = read_log(tmp_path / "plain", "step")
    evaluator = ParamNorm()
    rows = _run(tmp_path / "ext", prepared, objective=ScaledLM(), evaluators=[evaluator])
    steps = {int(r["step"]): r for r in rows if r["kind"] == "step"}
    assert {s: float(r["train_loss"]) for s, r in steps.items()} == plain  # same losses, bit for bit
    for r in steps.values():  # the statistic is averaged per unit over the interval, like the loss
        assert abs(float(r["check/double_loss"]) - 2 * float(r["train_loss"])) < 1e-5
    evals = [r for r in rows if r["kind"] == "eval" and r.get("check/param_norm")]
    assert [int(r["step"]) for r in evals] == [3, 6, 7]  # every 3 steps, and at the last step
    assert evaluator.calls == [False, False, False]  # eval mode, no gradients
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path / "ext" / "tb"))
    acc.Reload()
    assert [e.step for e in acc.Scalars("check/param_norm")] == [3, 6, 7]
    assert len(acc.Scalars("check/double_loss")) == 7


def test_a_log_line_that_straddles_a_resume_covers_the_steps_before_it(prepared, tmp_path):  # noqa: F811
    """Log every 4 steps, checkpoint at 6: the resumed run's line at step 8 (loss and statistics) averages
    steps 5-8 like the uninterrupted run's, not only 7-8."""
    import shutil

    from aura.train.pretrain import PretrainCommand, PretrainConfig
    from aura.train.run.session import run_training

    class Command(PretrainCommand):
        def prepare(self, run):
            return dataclasses.replace(super().prepare(run), objective=ScaledLM())

    def run(out, **extra):
        cfg = PretrainConfig(
            data=[str(prepared)],
            output_dir=out,
            **{
                **TINY,
                "max_steps": 12,
                "save_steps": 6,
                "log_interval": 4,
                "keep_last": 0,
                "precision": "fp32",
                **extra,
            },
        )
        assert run_training(cfg, Command()) == 0
        with open(out / "training_log.csv", newline="") as f:
            return {int(r["step"]): r for r in csv.DictReader(f) if r["kind"] == "step"}

    straight = run(tmp_path / "a")
    (tmp_path / "b").mkdir()
    shutil.copytree(tmp_path / "a" / "checkpoint-step-6", tmp_path / "b" / "checkpoint-step-6")
    resumed = run(tmp_path / "b", resume_from="latest")
    assert sorted(straight) == [4, 8, 12] and sorted(resumed) == [8, 12]
    for step in (8, 12):
        for key in ("train_loss", "check/double_loss"):
            assert float(resumed[step][key]) == float(straight[step][key]), (step, key)
