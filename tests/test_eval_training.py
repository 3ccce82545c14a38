"""``--eval-suite aura-es --eval-suite-interval N`` during training: accuracy per task logged every N steps
(CSV, TensorBoard, ``aura plot``), the same values as ``aura eval --suite``, training losses unchanged,
exact resume."""

from __future__ import annotations

import csv
import shutil

import pytest

from tests.conftest import run_aura_here
from tests.test_loop import TINY, read_log, run_pretrain

SUITE = dict(eval_suite="aura-es", eval_suite_interval=3, eval_suite_limit=4)
COLUMNS = ("aura-es/lectura", "aura-es/causa_efecto", "aura-es/gramatica", "aura-es/conocimiento", "aura-es/mean")


def _suite_rows(run) -> dict[int, dict[str, float]]:
    with open(run / "training_log.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["kind"] == "eval" and r.get("aura-es/mean")]
    return {int(r["step"]): {c: float(r[c]) for c in COLUMNS} for r in rows}


def test_suite_during_training_is_logged_without_changing_training_and_resumes_exactly(prepared_corpus, tmp_path):
    flags = dict(max_steps=6, save_steps=3, learning_rate=3e-3)
    plain = read_log(run_pretrain(tmp_path / "plain", prepared_corpus, **flags), "step")
    straight = run_pretrain(tmp_path / "suite", prepared_corpus, **flags, **SUITE)
    assert read_log(straight, "step") == plain  # same losses, bit for bit
    values = _suite_rows(straight)
    assert sorted(values) == [3, 6]
    for v in values.values():
        assert all(0.0 <= v[c] <= 1.0 for c in COLUMNS)
        assert v["aura-es/mean"] == pytest.approx(sum(v[c] for c in COLUMNS[:4]) / 4)

    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copytree(straight / "checkpoint-step-3", resumed / "checkpoint-step-3")
    run_pretrain(resumed, prepared_corpus, **flags, **SUITE, resume_from="latest")
    assert read_log(resumed, "step") == {s: v for s, v in plain.items() if s > 3}
    assert _suite_rows(resumed)[6] == values[6]

    # The logged accuracy is the one `aura eval --suite` gives for the saved model.
    import json

    out = tmp_path / "eval.json"
    r = run_aura_here(
        "eval", "--model", straight / "checkpoint-step-6", "--suite", "aura-es", "--limit", "4", "--output", out
    )
    assert r.returncode == 0, r.stderr
    rows = {
        row["task"]: row["value"] for row in json.loads(out.read_text())["results"][0]["rows"] if row["metric"] == "acc"
    }
    assert {f"aura-es/{k.removeprefix('aura_es_')}": v for k, v in rows.items()} == {
        c: values[6][c] for c in COLUMNS[:4]
    }

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(straight / "tb"))
    acc.Reload()
    assert [e.step for e in acc.Scalars("aura-es/gramatica")] == [3, 6]
    r = run_aura_here("plot", straight, "--out", "curves.png", "--output-dir", tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "curves.png").stat().st_size > 0


def test_eval_suite_needs_an_interval(prepared_corpus, tmp_path):
    from aura.core.errors import AuraError
    from aura.train.pretrain import PretrainConfig

    with pytest.raises(AuraError, match="--eval-suite-interval"):
        PretrainConfig(data=[str(prepared_corpus)], output_dir=tmp_path / "x", eval_suite="aura-es", **TINY)
