"""Reference rows: published scores of small public models, shipped with Aura
(``aura/resources/eval/reference_scores.json``), and the rule that decides which of them may stand beside
a score of the standard suite.

A published number is comparable with the user's only when it was measured the same way: the same
lm-evaluation-harness task (same data, prompt and scoring), the same number of few-shot examples and the
same metric. Anything else (another framework such as lighteval or a lab's own library, another prompt
or formulation, another few-shot count, an unstated setting) is listed apart as "not comparable", with
the reason, and never in the same column as the user's score.

The file (``version`` 1) holds:

* ``benchmarks``: ``{id: {"description", "lm_eval_tasks": [...]}}``; the lm-eval tasks that measure the
  same data set. A user's row is tied to the references of its own task and of its task's benchmark (so a
  lighteval Belebele score is listed, as not comparable, beside lm-eval's ``belebele_spa_Latn``).
* ``rows``: one published score each, with every key of ``FIELDS`` (``note`` may be left out):
  the model (``model_kind`` base or instruct), ``benchmark``, ``task`` (lm-eval's name where the source
  used lm-eval, else the source's own), ``source_task`` (the name as the source prints it), ``metric``,
  ``num_fewshot`` (null when the source does not say: such a row is never comparable), ``value`` (0-1, as
  lm-eval reports), ``published`` (the figure exactly as printed, on a 0-100 scale), ``stderr`` (null when
  not published), ``framework`` and ``framework_version``, ``source`` (an https URL), ``date``
  (YYYY-MM-DD) with ``date_kind`` (``published``, or ``read`` when the source gives no date: the day the
  number was read), and ``quote``: where in the source the number and its settings are written.
"""

from __future__ import annotations

import datetime
import functools
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from aura.core.errors import AuraError
from aura.core.i18n import Messages, num

M = Messages(
    "references",
    {
        "bad_file": (
            "{path}: {problem}. Corrige el archivo o reinstala Aura.",
            "{path}: {problem}. Fix the file or reinstall Aura.",
        ),
        "bad_row": (
            "{path}, fila {index} ({model}): el campo '{field}' {problem}. Corrige la fila o reinstala Aura.",
            "{path}, row {index} ({model}): field '{field}' {problem}. Fix the row or reinstall Aura.",
        ),
        "p_top": (
            'debe ser un objeto con "version", "benchmarks" y "rows"',
            'must be an object with "version", "benchmarks" and "rows"',
        ),
        "p_version": (
            "tiene la versión {found} y esta versión de Aura lee la {expected}",
            "has version {found} and this version of Aura reads version {expected}",
        ),
        "p_benchmark": (
            "el benchmark '{name}' necesita una descripción y una lista 'lm_eval_tasks' de nombres",
            "benchmark '{name}' needs a description and an 'lm_eval_tasks' list of names",
        ),
        "p_missing": ("falta", "is missing"),
        "p_unknown": ("no es un campo del esquema", "is not a field of the schema"),
        "p_type": ("debe ser {kind}; es {value!r}", "must be {kind}; it is {value!r}"),
        "p_range": ("debe estar entre {lo} y {hi}; es {value}", "must be between {lo} and {hi}; it is {value}"),
        "p_choice": ("debe ser uno de {choices}; es {value!r}", "must be one of {choices}; it is {value!r}"),
        "p_url": ("debe ser una URL https://; es {value!r}", "must be an https:// URL; it is {value!r}"),
        "p_date": ("debe ser una fecha AAAA-MM-DD; es {value!r}", "must be a YYYY-MM-DD date; it is {value!r}"),
        "p_published": (
            "({value}) no es el valor publicado ({published}) dividido por 100",
            "({value}) is not the published figure ({published}) divided by 100",
        ),
        "p_duplicate": (
            "repite la fila {other} (mismo modelo, tarea, métrica, few-shot, framework y fuente)",
            "repeats row {other} (same model, task, metric, few-shot, framework and source)",
        ),
        "k_text": ("un texto no vacío", "a non-empty string"),
        "k_int": ("un entero", "an integer"),
        "k_number": ("un número", "a number"),
        "r_framework": ("medida con {framework}, no con lm-eval", "measured with {framework}, not lm-eval"),
        "r_task": ("otra tarea ({task})", "another task ({task})"),
        "r_fewshot": ("{ref}-shot frente a {mine}-shot", "{ref}-shot against {mine}-shot"),
        "r_fewshot_unknown": ("la fuente no dice el few-shot", "the source does not state the few-shot count"),
        "r_run_fewshot_unknown": (
            "este resultado no guarda su few-shot",
            "this result does not record its few-shot count",
        ),
        "r_metric": ("métrica {ref} frente a {mine}", "metric {ref} against {mine}"),
        "r_metric_unknown": ("la fuente no dice la métrica", "the source does not state the metric"),
        "t_comparable": (
            "Referencias publicadas comparables (misma tarea de lm-eval, few-shot y métrica)",
            "Comparable published references (same lm-eval task, few-shot and metric)",
        ),
        "t_not_comparable": (
            "Referencias publicadas NO comparables (no las compares con tu puntuación)",
            "Published references that are NOT comparable (do not set them against your score)",
        ),
        "h_model": ("modelo", "model"),
        "h_task": ("tarea", "task"),
        "h_metric": ("métrica", "metric"),
        "h_value": ("tu valor", "your value"),
        "h_reference": ("referencia", "reference"),
        "h_ref_value": ("valor publicado", "published value"),
        "h_why": ("por qué no", "why not"),
        "h_source": ("fuente", "source"),
        "read_on": ("leída el {date}", "read on {date}"),
    },
)

REFERENCE_FILE = Path(__file__).resolve().parents[1] / "resources" / "eval" / "reference_scores.json"
SCHEMA_VERSION = 1
FRAMEWORK = "lm-eval"  # what the standard suite runs: only rows measured with it can be comparable
MODEL_KINDS = ("base", "instruct")
DATE_KINDS = ("published", "read")


@dataclass(frozen=True)
class Reference:
    """One published score and how it was measured (the fields are documented in the module docstring)."""

    model: str
    model_kind: str
    benchmark: str
    task: str
    source_task: str
    metric: str | None
    num_fewshot: int | None
    value: float
    published: str
    stderr: float | None
    framework: str
    framework_version: str | None
    source: str
    date: str
    date_kind: str
    quote: str
    note: str | None = None

    def as_dict(self) -> dict:
        return asdict(self)


# field -> (kind, may be null), read from Reference's annotations: "text" (non-empty str), "int" (>= 0), "number"
FIELDS: dict[str, tuple[str, bool]] = {
    f.name: ({"str": "text", "int": "int", "float": "number"}[f.type.split(" |")[0]], "None" in f.type)
    for f in fields(Reference)
}
OPTIONAL = {"note"}


@dataclass(frozen=True)
class ReferenceTable:
    version: int
    benchmarks: dict[str, tuple[str, ...]]  # benchmark id -> lm-eval tasks that measure it
    rows: tuple[Reference, ...]

    def benchmark_of(self, task: str) -> str | None:
        return next((b for b, tasks in self.benchmarks.items() if task in tasks), None)


def _kind_problem(kind: str, value) -> str | None:
    if kind == "text":
        ok = isinstance(value, str) and bool(value.strip())
    elif kind == "int":
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    else:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return None if ok else M("p_type", kind=M(f"k_{kind}"), value=value)


def _value_problem(field: str, row: dict, benchmarks: dict) -> str | None:
    """What is wrong with the (already well-typed, not null) ``row[field]``, beyond its type, or None."""
    value = row[field]
    choices = {"model_kind": MODEL_KINDS, "date_kind": DATE_KINDS, "benchmark": tuple(benchmarks)}.get(field)
    if choices is not None and value not in choices:
        return M("p_choice", choices=", ".join(choices), value=value)
    if field in ("value", "stderr") and not 0 <= value <= 1:
        return M("p_range", lo=0, hi=1, value=value)
    if field == "source" and not value.startswith("https://"):
        return M("p_url", value=value)
    if field == "date":
        try:
            datetime.date.fromisoformat(value)
        except ValueError:
            return M("p_date", value=value)
    if field == "published":
        try:
            published = float(value)
        except ValueError:
            return M("p_type", kind=M("k_number"), value=value)
        if abs(published / 100 - row["value"]) > 5e-7:
            return M("p_published", value=row["value"], published=value)
    return None


def _row_problem(row: dict, benchmarks: dict) -> tuple[str, str] | None:
    """(field, problem) for the first thing wrong with one row, or None."""
    for field in row:
        if field not in FIELDS:
            return field, M("p_unknown")
    for field, (kind, nullable) in FIELDS.items():
        if field not in row:
            if field in OPTIONAL:
                continue
            return field, M("p_missing")
        if row[field] is None and nullable:
            continue
        # "value" comes before "published" in FIELDS: the figure is checked against a well-typed value
        problem = _kind_problem(kind, row[field]) or _value_problem(field, row, benchmarks)
        if problem:
            return field, problem
    return None


def _benchmarks(data: dict, path: Path) -> dict[str, tuple[str, ...]]:
    out = {}
    for name, spec in data["benchmarks"].items():
        tasks = spec.get("lm_eval_tasks") if isinstance(spec, dict) else None
        if not (
            isinstance(spec, dict)
            and isinstance(spec.get("description"), str)
            and spec["description"].strip()
            and isinstance(tasks, list)
            and all(isinstance(t, str) and t.strip() for t in tasks)
        ):
            raise AuraError(M("bad_file", path=path, problem=M("p_benchmark", name=name)))
        out[name] = tuple(tasks)
    return out


def parse_references(data, *, path: Path) -> ReferenceTable:
    """Check ``data`` (the parsed file) against the schema; the first problem is an ``AuraError`` that names
    the file, the row (1-based, and its model) and the field."""
    if not (isinstance(data, dict) and {"version", "benchmarks", "rows"} <= set(data)):
        raise AuraError(M("bad_file", path=path, problem=M("p_top")))
    if data["version"] != SCHEMA_VERSION:
        raise AuraError(
            M("bad_file", path=path, problem=M("p_version", found=data["version"], expected=SCHEMA_VERSION))
        )
    if not isinstance(data["benchmarks"], dict) or not isinstance(data["rows"], list):
        raise AuraError(M("bad_file", path=path, problem=M("p_top")))
    benchmarks = _benchmarks(data, path)
    rows, seen = [], {}
    for index, row in enumerate(data["rows"], 1):
        model = row.get("model", "?") if isinstance(row, dict) else "?"
        if not isinstance(row, dict):
            raise AuraError(M("bad_row", path=path, index=index, model=model, field="-", problem=M("p_top")))
        problem = _row_problem(row, benchmarks)
        if problem:
            raise AuraError(M("bad_row", path=path, index=index, model=model, field=problem[0], problem=problem[1]))
        key = tuple(row[k] for k in ("model", "task", "metric", "num_fewshot", "framework", "source"))
        if key in seen:
            problem = M("p_duplicate", other=seen[key])
            raise AuraError(M("bad_row", path=path, index=index, model=model, field="model", problem=problem))
        seen[key] = index
        rows.append(Reference(**row))
    return ReferenceTable(SCHEMA_VERSION, benchmarks, tuple(rows))


@functools.lru_cache(maxsize=1)
def _shipped() -> ReferenceTable:
    return load_references(REFERENCE_FILE)


def load_references(path: str | Path | None = None) -> ReferenceTable:
    """The reference table of ``path`` (default: the one shipped with Aura, read once)."""
    if path is None:
        return _shipped()
    from aura.core.files import read_json_object

    return parse_references(read_json_object(path), path=Path(path))


def reasons(row: dict, ref: Reference) -> list[str]:
    """Why ``ref`` cannot stand beside ``row`` (a result row of the standard suite: task, metric,
    num_fewshot; measured with lm-eval), as reason codes; empty when it is comparable."""
    out = []
    if ref.framework != FRAMEWORK:
        out.append("framework")
    if ref.task != row.get("task"):
        out.append("task")
    mine = row.get("num_fewshot")
    if ref.num_fewshot is None:
        out.append("fewshot_unknown")
    elif mine is None:
        out.append("run_fewshot_unknown")
    elif ref.num_fewshot != mine:
        out.append("fewshot")
    if ref.metric is None:
        out.append("metric_unknown")
    elif ref.metric != row.get("metric"):
        out.append("metric")
    return out


def match(row: dict, table: ReferenceTable | None = None) -> tuple[list[Reference], list[tuple[Reference, list]]]:
    """The references tied to ``row``'s task (its own lm-eval task or its benchmark): (comparable, [(not
    comparable, reason codes)])."""
    table = table or load_references()
    task = row.get("task")
    benchmark = table.benchmark_of(task) if isinstance(task, str) else None
    comparable, apart = [], []
    for ref in table.rows:
        if ref.task != task and (benchmark is None or ref.benchmark != benchmark):
            continue
        why = reasons(row, ref)
        if why:
            apart.append((ref, why))
        else:
            comparable.append(ref)
    return comparable, apart


def references_for(row: dict, table: ReferenceTable | None = None) -> dict | None:
    """``{"comparable": [...], "not_comparable": [... with "reasons"]}`` for one result row (what the eval
    JSON and a report card show), or None when no published score concerns its task."""
    comparable, apart = match(row, table)
    if not comparable and not apart:
        return None
    return {
        "comparable": [r.as_dict() for r in comparable],
        "not_comparable": [{**r.as_dict(), "reasons": why} for r, why in apart],
    }


def annotate(rows: list[dict], table: ReferenceTable | None = None) -> None:
    """Add ``"references"`` to every row that has published scores of its task."""
    for row in rows:
        found = references_for(row, table)
        if found is not None:
            row["references"] = found


def reason_text(code: str, row: dict, ref: dict) -> str:
    """One reason code in the user's language."""
    if code == "metric":
        return M("r_metric", ref=ref["metric"], mine=row.get("metric"))
    return M(
        f"r_{code}", framework=ref["framework"], task=ref["task"], ref=ref["num_fewshot"], mine=row.get("num_fewshot")
    )


def _value(value, stderr=None) -> str:
    if value is None:
        return ""
    text = num(value, ".4f")
    return f"{text} ± {num(stderr, '.4f')}" if stderr is not None else text


def _source(ref: dict) -> str:
    date = ref["date"] if ref["date_kind"] == "published" else M("read_on", date=ref["date"])
    return f"{ref['source']} ({date})"


def print_references(reports: list[dict]) -> None:
    """After ``aura eval``'s table: the comparable published scores beside each of the user's rows, then
    the published scores of the same tasks that are not comparable, each once, with its reasons."""
    from aura.core import console

    several = len(reports) > 1
    near, apart, comparable_ids = [], {}, set()
    for report in reports:
        for row in report["rows"]:
            found = row.get("references")
            if not found:
                continue
            for ref in found["comparable"]:
                comparable_ids.add((row["task"], ref["model"], ref["task"], ref["source"]))
                near.append(
                    [
                        *([report["model"]] if several else []),
                        row["task"],
                        row["metric"],
                        _value(row["value"], row.get("stderr")),
                        ref["model"],
                        _value(ref["value"], ref["stderr"]),
                        _source(ref),
                    ]
                )
            for ref in found["not_comparable"]:
                key = (row["task"], ref["model"], ref["task"], ref["source"])
                if key not in apart or len(ref["reasons"]) < len(apart[key][1]["reasons"]):
                    apart[key] = (row, ref)
    if near:
        headers = [M("h_task"), M("h_metric"), M("h_value"), M("h_reference"), M("h_ref_value"), M("h_source")]
        console.table(M("t_comparable"), [*([M("h_model")] if several else []), *headers], near)
    rows = [
        [
            row["task"],
            ref["model"],
            _value(ref["value"], ref["stderr"]),
            "; ".join(reason_text(code, row, ref) for code in ref["reasons"]),
            _source(ref),
        ]
        for key, (row, ref) in apart.items()
        if key not in comparable_ids
    ]
    if rows:
        headers = [M("h_task"), M("h_reference"), M("h_ref_value"), M("h_why"), M("h_source")]
        console.table(M("t_not_comparable"), headers, rows)
