"""Is a difference larger than its noise: ``aura.evaluation.significance`` and ``aura eval --compare``.

The arithmetic is checked against scipy and numpy, computed here from the per-item scores: the paired
standard error is the one of ``scipy.stats.ttest_rel`` (its statistic is the difference over it), the
unpaired one ``sqrt(se_a² + se_b²)`` of numpy's standard errors of the mean."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from aura.evaluation.significance import compare_reports, compare_rows
from tests.conftest import run_aura_here


def _row(ids, scores, task="t", metric="acc"):
    a = np.asarray(scores, dtype=float)
    return {
        "task": task,
        "metric": metric,
        "value": float(a.mean()),
        "stderr": float(stats.sem(a)),
        "n": len(a),
        "items": {"ids": list(ids), "scores": list(map(int, scores))},
    }


def test_paired_difference_is_scipys_paired_t_and_the_verdicts_follow_it():
    rng = np.random.default_rng(0)
    ids = [f"q{i}" for i in range(200)]
    a = rng.integers(0, 2, 200)
    better = np.where(rng.random(200) < 0.25, 1, a)  # fixes a quarter of the items: a real gain
    close = a.copy()
    close[np.flatnonzero(a == 0)[:3]] = 1  # three items gained, two lost: noise
    close[np.flatnonzero(a == 1)[:2]] = 0
    for b, expected in ((better, "significant"), (close, "noise")):
        c = compare_rows(_row(ids, a), _row(ids, b))
        t = stats.ttest_rel(b, a)
        se = np.std(b - a, ddof=1) / math.sqrt(len(a))
        assert c["paired"] and c["n"] == 200
        assert c["diff"] == pytest.approx(float(np.mean(b - a)))
        assert c["stderr"] == pytest.approx(se)
        assert c["z"] == pytest.approx(t.statistic)
        assert c["p"] == pytest.approx(2 * stats.norm.sf(abs(t.statistic)))
        assert c["verdict"] == expected, c
    # pairing matters: the same gain, items not shared, is judged on the larger unpaired error
    unpaired = compare_rows(_row(ids, a), _row([f"x{i}" for i in range(200)], better))
    assert not unpaired["paired"]
    assert unpaired["stderr"] == pytest.approx(math.hypot(stats.sem(a), stats.sem(better)))
    assert unpaired["stderr"] > compare_rows(_row(ids, a), _row(ids, better))["stderr"]


def test_items_that_all_move_one_way_are_judged_by_the_sign_test():
    ids = [f"q{i}" for i in range(10)]
    two = compare_rows(_row(ids, [0] * 10), _row(ids, [1, 1] + [0] * 8))  # 2 gains, no loss: p = 0.5
    six = compare_rows(_row(ids, [0] * 10), _row(ids, [1] * 6 + [0] * 4))  # 6 gains, no loss: p = 1/32
    assert two["stderr"] != 0 and two["verdict"] in ("weak", "noise")  # spread: the standard error decides
    same = compare_rows(_row(ids[:2], [0, 0]), _row(ids[:2], [1, 1]))
    assert same["stderr"] == 0 and same["p"] == pytest.approx(stats.binomtest(2, 2).pvalue)
    assert same["verdict"] == "weak"
    all_six = compare_rows(_row(ids[:6], [0] * 6), _row(ids[:6], [1] * 6))
    assert all_six["p"] == pytest.approx(stats.binomtest(6, 6).pvalue) and all_six["verdict"] == "significant"
    assert six["verdict"] == "significant"


def test_unpaired_rows_without_items_use_both_standard_errors():
    a = {"task": "t", "metric": "acc", "value": 0.50, "stderr": 0.03}
    b = {"task": "t", "metric": "acc", "value": 0.56, "stderr": 0.04}
    c = compare_rows(a, b)
    assert c["stderr"] == pytest.approx(0.05) and c["z"] == pytest.approx(1.2) and c["verdict"] == "weak"
    assert compare_rows(a, dict(b, value=0.52))["verdict"] == "noise"
    assert compare_rows(a, dict(b, value=0.65))["verdict"] == "significant"
    assert compare_reports({"rows": [a]}, {"rows": [dict(b, stderr=None)]}) == []  # nothing to judge it by


@pytest.mark.slow  # two models answer the suite's math task (256 greedy tokens): ~100 s on a loaded 2-core machine
def test_eval_compare_matches_numpy_on_two_real_models_and_a_model_against_itself_is_noise(tiny_zoo, tmp_path):
    out = tmp_path / "cmp.json"
    r = run_aura_here(
        "eval",
        "--model",
        tiny_zoo["llama"],
        "--compare",
        tiny_zoo["gpt2"],
        "--suite",
        "aura-es",
        "--limit",
        "6",
        "--output",
        out,
        "--device",
        "cpu",
    )
    assert r.returncode == 0, r.stderr
    assert "Difference or noise?" in r.stdout and "paired, 6 items" in r.stdout
    data = json.loads(out.read_text())
    base, other = data["results"]
    for c in compare_reports(base, base):  # the same model's own items: the difference is exactly 0, noise
        assert c["diff"] == 0 and c["paired"] and c["verdict"] == "noise"
    rows = {(r["task"], r["metric"]): r for r in base["rows"]}
    (cmp,) = data["comparisons"]
    assert cmp["a"] == str(tiny_zoo["llama"]) and cmp["b"] == str(tiny_zoo["gpt2"])
    checked = 0
    for c in cmp["rows"]:
        a = rows[(c["task"], c["metric"])]
        b = next(x for x in other["rows"] if (x["task"], x["metric"]) == (c["task"], c["metric"]))
        d = np.asarray(b["items"]["scores"], float) - np.asarray(a["items"]["scores"], float)
        assert a["items"]["ids"] == b["items"]["ids"] and c["paired"] and c["n"] == len(d) == 6
        assert c["diff"] == pytest.approx(d.mean()) and c["diff"] == pytest.approx(b["value"] - a["value"])
        assert a["stderr"] == pytest.approx(stats.sem(a["items"]["scores"]), nan_ok=True)
        if d.std() > 0:
            assert c["stderr"] == pytest.approx(d.std(ddof=1) / math.sqrt(len(d)))
            assert c["z"] == pytest.approx(stats.ttest_rel(b["items"]["scores"], a["items"]["scores"]).statistic)
            checked += 1
    assert checked >= 1  # the two models disagree on some items of some task
