"""The reference table (aura/resources/eval/reference_scores.json): its schema and provenance, the rule that
keeps a published score apart unless it was measured as the user's was, and what `aura eval` shows."""

from __future__ import annotations

import copy
import datetime
import json
import re
from pathlib import Path

import pytest

from aura.core.errors import AuraError
from aura.evaluation import references as refs

ROOT = Path(__file__).resolve().parents[1]


def _raw() -> dict:
    return json.loads(refs.REFERENCE_FILE.read_text(encoding="utf-8"))


def test_shipped_table_schema():
    """Every row has every settings key, a value in [0, 1] that is its published figure over 100, and no two
    rows are the same measurement; every lm-eval task it names exists in the installed lm-eval."""
    raw = _raw()
    table = refs.load_references()
    assert table.version == raw["version"] == refs.SCHEMA_VERSION
    assert len(table.rows) == len(raw["rows"]) >= 10
    required = set(refs.FIELDS) - refs.OPTIONAL
    keys = set()
    for row in raw["rows"]:
        assert required <= set(row), f"{row.get('model')}: missing {sorted(required - set(row))}"
        assert 0 <= row["value"] <= 1 and abs(float(row["published"]) / 100 - row["value"]) < 1e-6
        assert row["num_fewshot"] is None or (isinstance(row["num_fewshot"], int) and row["num_fewshot"] >= 0)
        assert row["benchmark"] in raw["benchmarks"]
        keys.add(tuple(row[k] for k in ("model", "task", "metric", "num_fewshot", "framework", "source")))
    assert len(keys) == len(raw["rows"])
    from lm_eval.tasks import TaskManager

    known = set(TaskManager().all_tasks)
    named = {t for b in raw["benchmarks"].values() for t in b["lm_eval_tasks"]}
    named |= {r["task"] for r in raw["rows"] if r["framework"] == refs.FRAMEWORK}
    assert named and named <= known, f"not lm-eval tasks: {sorted(named - known)}"
    # an lm-eval row's task is one of its benchmark's tasks, so a user's run of that task finds it
    for row in table.rows:
        if row.framework == refs.FRAMEWORK:
            assert table.benchmark_of(row.task) == row.benchmark


def test_shipped_table_provenance():
    """Each number says where it was read: an https source, a real date (not after today; 'read' when the
    source has none), the quote or location, and the figure as printed appears in that quote."""
    for row in refs.load_references().rows:
        assert re.fullmatch(r"https://[^\s/]+\.[^\s/]+/\S+", row.source), row.source
        day = datetime.date.fromisoformat(row.date)
        assert datetime.date(2024, 1, 1) <= day <= datetime.date.today()
        assert row.date_kind in ("published", "read")
        assert len(row.quote.strip()) > 40 and row.published in row.quote, (row.model, row.task)
        assert row.source_task.strip()
        if row.metric is None or row.num_fewshot is None:  # an unstated setting is said to be unstated
            assert row.note and "not" in row.note, (row.model, row.task)


def test_docs_list_every_source():
    """docs/evaluation.md and .en.md hold the table of sources: every source of the shipped file is there."""
    sources = {row.source for row in refs.load_references().rows}
    for name in ("evaluation.md", "evaluation.en.md"):
        text = (ROOT / "docs" / name).read_text(encoding="utf-8")
        missing = [s for s in sources if s not in text]
        assert not missing, f"docs/{name} lacks {missing}"


def _table(tmp_path, rows: list[dict]) -> refs.ReferenceTable:
    raw = _raw()
    raw["rows"] = rows
    path = tmp_path / "refs.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    return refs.load_references(path)


def _ref(**over) -> dict:
    row = {
        "model": "org/model",
        "model_kind": "base",
        "benchmark": "xstorycloze_es",
        "task": "xstorycloze_es",
        "source_task": "xstorycloze_es",
        "metric": "acc",
        "num_fewshot": 5,
        "value": 0.6473,
        "published": "64.73",
        "stderr": None,
        "framework": "lm-eval",
        "framework_version": None,
        "source": "https://example.org/card",
        "date": "2025-01-01",
        "date_kind": "read",
        "quote": "table 'Spanish', row 'xstorycloze_es | acc | 64.73'",
    }
    row.update(over)
    if "value" in over and "published" not in over:
        row["published"] = f"{over['value'] * 100:g}"
    return row


def test_matcher_keeps_apart_what_was_measured_otherwise(tmp_path):
    table = _table(
        tmp_path,
        [
            _ref(model="same"),
            _ref(model="zero-shot", num_fewshot=0),
            _ref(model="unstated-shots", num_fewshot=None),
            _ref(model="other-metric", metric="acc_norm"),
            _ref(model="unstated-metric", metric=None),
            _ref(model="lighteval", framework="lighteval", task="xstorycloze_es_cf", num_fewshot=0),
            _ref(model="other-task", benchmark="copa_es", task="copa_es"),
            _ref(model="spanish-bench", benchmark="xnli_es", task="xnli_es_spanish_bench"),
        ],
    )
    row = {"task": "xstorycloze_es", "metric": "acc", "num_fewshot": 5, "value": 0.55, "stderr": 0.01}
    comparable, apart = refs.match(row, table)
    assert [r.model for r in comparable] == ["same"]
    assert {r.model: why for r, why in apart} == {
        "zero-shot": ["fewshot"],
        "unstated-shots": ["fewshot_unknown"],
        "other-metric": ["metric"],
        "unstated-metric": ["metric_unknown"],
        "lighteval": ["framework", "task", "fewshot"],
    }  # copa_es is another benchmark: not listed at all
    # a run that does not record its few-shot count is never comparable
    comparable, apart = refs.match({**row, "num_fewshot": None}, table)
    assert not comparable and dict((r.model, w) for r, w in apart)["same"] == ["run_fewshot_unknown"]
    # the same data under another lm-eval task (another prompt): apart, reason "task"
    comparable, apart = refs.match({**row, "task": "xnli_es"}, table)
    assert not comparable and [(r.model, w) for r, w in apart] == [("spanish-bench", ["task"])]
    assert refs.match({"task": "aura_es_lectura", "metric": "acc", "num_fewshot": 0}, table) == ([], [])


def test_matcher_on_the_shipped_table():
    """Salamandra-2B's card (lm-eval, 5-shot, acc) stands beside a 5-shot xstorycloze_es run and not beside
    a 0-shot one; SmolLM3's lighteval Belebele is listed apart from lm-eval's belebele_spa_Latn."""
    five = {"task": "xstorycloze_es", "metric": "acc", "num_fewshot": 5, "value": 0.6, "stderr": 0.01}
    comparable, _ = refs.match(five)
    assert "BSC-LT/salamandra-2b" in {r.model for r in comparable}
    comparable, apart = refs.match({**five, "num_fewshot": 0})
    assert not comparable and all("fewshot" in why for _, why in apart)
    comparable, apart = refs.match({"task": "belebele_spa_Latn", "metric": "acc", "num_fewshot": 0})
    assert not comparable
    lighteval = [why for r, why in apart if r.framework == "lighteval"]
    assert lighteval and all("framework" in why for why in lighteval)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda d: d["rows"][1].pop("source"), r"row 2 \(org/model\): field 'source' is missing"),
        (lambda d: d["rows"][1].update(value=64.73), r"row 2 .*field 'value' must be between 0 and 1"),
        (lambda d: d["rows"][1].update(published="64.7"), r"row 2 .*field 'published' .*divided by 100"),
        (lambda d: d["rows"][1].update(source="http://x.org/a"), r"row 2 .*field 'source' must be an https"),
        (lambda d: d["rows"][1].update(date="2025-13-01"), r"row 2 .*field 'date' must be a YYYY-MM-DD"),
        (lambda d: d["rows"][1].update(num_fewshot="5"), r"row 2 .*field 'num_fewshot' must be an integer"),
        (lambda d: d["rows"][1].update(quote=" "), r"row 2 .*field 'quote' must be a non-empty string"),
        (lambda d: d["rows"][1].update(benchmark="nope"), r"row 2 .*field 'benchmark' must be one of"),
        (lambda d: d["rows"][1].update(sorce="typo"), r"row 2 .*field 'sorce' is not a field of the schema"),
        (lambda d: d["rows"].append(copy.deepcopy(d["rows"][0])), r"row 3 .*repeats row 1"),
        (lambda d: d.update(version=2), r"has version 2 and this version of Aura reads version 1"),
        (lambda d: d.pop("rows"), r'must be an object with "version", "benchmarks" and "rows"'),
    ],
)
def test_a_broken_table_names_the_row_and_the_field(tmp_path, change, expected):
    raw = _raw()
    raw["rows"] = [_ref(model="org/first"), _ref(model="org/model", num_fewshot=0)]
    refs.load_references(_write(tmp_path, raw))  # the unbroken table loads
    change(raw)
    path = _write(tmp_path, raw)
    with pytest.raises(AuraError) as err:
        refs.load_references(path)
    message = str(err.value)
    assert str(path) in message and re.search(expected, message), message
    assert "reinstall Aura" in message


def _write(tmp_path, raw: dict) -> Path:
    path = tmp_path / "reference_scores.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    return path


def test_not_json_is_a_clear_error(tmp_path):
    path = tmp_path / "reference_scores.json"
    path.write_text('{"version": 1, "rows": [', encoding="utf-8")
    with pytest.raises(AuraError, match="is not valid JSON"):
        refs.load_references(path)


def test_eval_output_shows_references_beside_the_row_and_the_rest_apart(capsys):
    """What `aura eval` adds to a report: the JSON rows carry their references, the console prints the
    comparable ones with the user's value and the others once each, with the reason, in their own table."""
    rows = [
        {"task": "xstorycloze_es", "metric": "acc", "num_fewshot": 5, "value": 0.61, "stderr": 0.0125, "n": 1511},
        {"task": "belebele_spa_Latn", "metric": "acc", "num_fewshot": 0, "value": 0.3, "stderr": 0.015, "n": 900},
        {"task": "belebele_spa_Latn", "metric": "acc_norm", "num_fewshot": 0, "value": 0.31, "stderr": 0.015, "n": 900},
        {"task": "aura_es_lectura", "metric": "acc", "value": 0.5, "stderr": 0.1, "n": 8},
    ]
    refs.annotate(rows)
    assert [r["model"] for r in rows[0]["references"]["comparable"]] == ["BSC-LT/salamandra-2b"]
    assert "references" not in rows[3]
    json.dumps(rows)  # the JSON report can hold them
    refs.print_references([{"model": "runs/sft/final", "rows": rows}])
    out = capsys.readouterr().out
    comparable, _, apart = out.partition("NOT comparable")
    assert "Comparable published references" in comparable
    assert re.search(r"xstorycloze_es\s+acc\s+0\.6100 ± 0\.0125\s+BSC-LT/salamandra-2b\s+0\.6473", comparable)
    assert "https://huggingface.co/BSC-LT/salamandra-2b (read on " in comparable
    smol = [
        line
        for line in apart.splitlines()
        if re.match(r"belebele_spa_Latn\s+HuggingFaceTB/SmolLM3-3B-Base\s+0\.4700\s", line)
    ]
    assert len(smol) == 1  # once, though two of the user's rows (acc, acc_norm) are on that task
    assert "measured with lighteval, not lm-eval" in smol[0] and "does not state the metric" in smol[0]
