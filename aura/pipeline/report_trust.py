"""What the report card's scores are worth: contamination (eval items seen in training) and, between
consecutive models, whether each difference is larger than its noise. ``collect_trust`` adds both to the
report's models (from each eval stage's ``contamination.json`` and the result rows' standard errors and
per-item scores), with the published scores measured the same way (the rows' ``references``,
``aura.evaluation.references``); ``trust_tables`` formats them for ``report_render``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aura.core.i18n import Messages, num

M = Messages(
    "pipeline.trust",
    {
        "contamination": (
            "Contaminación: ítems de evaluación vistos en el entrenamiento",
            "Contamination: eval items seen in training",
        ),
        "h_model": ("modelo (etapa)", "model (stage)"),
        "h_seen": ("ítems vistos", "items seen"),
        "h_tasks": ("por tarea", "by task"),
        "h_from": ("datos revisados", "data checked"),
        "h_example": ("ejemplo", "example"),
        "seen": ("{k} de {n}", "{k} of {n}"),
        "n_gram": ("{n}-gramas de palabras normalizadas", "{n}-grams of normalised words"),
        "unread": ("sin leer: {paths}", "not read: {paths}"),
        "tasks_unread": (
            "tareas sin comprobar (sus datos no están en este equipo): {tasks}",
            "tasks not checked (their data is not on this machine): {tasks}",
        ),
        "none": ("ninguno", "none"),
        "short": ("{n} demasiado cortos para comprobarlos", "{n} too short to check"),
        "noise": (
            ("¿Diferencia o ruido? Cada modelo frente al anterior (≈ en la tabla de modelos: ruido o no concluyente)"),
            ("Difference or noise? Each model against the one before (≈ in the models table: noise or not conclusive)"),
        ),
        "h_pair": ("modelos", "models"),
        "h_score": ("puntuación", "score"),
        "h_diff": ("diferencia", "difference"),
        "h_se": ("error estándar combinado", "combined stderr"),
        "h_verdict": ("veredicto", "verdict"),
        "references": (
            "Referencias publicadas medidas igual (misma tarea de lm-eval, ejemplos y métrica; docs/evaluation.md)",
            "Published references measured the same way (same lm-eval task, few-shot and metric; "
            "docs/evaluation.en.md)",
        ),
        "h_value": ("valor ± error", "value ± stderr"),
        "h_reference": ("referencia", "reference"),
        "h_ref_value": ("valor publicado", "published value"),
        "h_source": ("fuente", "source"),
    },
)

SCORED = ("acc", "acc_norm", "exact_match")  # means over items: a difference has a standard error


def collect_trust(
    models: list[dict[str, Any]], rows_by_stage: dict[str, dict[str, dict]], stage_dirs: dict[str, Path]
) -> None:
    """Add ``contamination`` (the eval stage's check) and ``vs_previous`` ({score key: comparison}) to each
    model of the report, in place."""
    from aura.evaluation.significance import compare_rows
    from aura.pipeline.eval_contamination import read

    previous = None
    for m in models:
        stage = m.get("eval_stage")
        if stage and stage in stage_dirs:
            found = read(stage_dirs[stage])
            if found:
                m["contamination"] = {
                    k: found.get(k) for k in ("items", "seen", "stages", "not_read", "tasks_not_read", "method")
                }
                m["contamination"]["tasks"] = {
                    t: {k: v.get(k) for k in ("items", "seen", "not_checkable", "examples")}
                    for t, v in found["tasks"].items()
                }
        rows = rows_by_stage.get(m["stage"], {})
        if previous is not None and rows:
            m["vs_previous"] = {
                "model": previous["stage"],
                "rows": {
                    key: compare_rows(previous["_rows"][key], row)
                    for key, row in rows.items()
                    if key in previous["_rows"]
                },
            }
        m["_rows"] = rows
        near = [
            {
                "key": key,
                "value": row.get("value"),
                "stderr": row.get("stderr"),
                "refs": row["references"]["comparable"],
            }
            for key, row in rows.items()
            if (row.get("references") or {}).get("comparable")
        ]
        if near:  # published scores measured the same way (aura.evaluation.references, annotated by aura eval)
            m["references"] = near
        if rows:
            previous = m
    for m in models:
        m.pop("_rows", None)


def _n(v, spec=".4f") -> str:
    return "–" if v is None else num(v, spec)


def marked(m: dict[str, Any], key: str, text: str) -> str:
    """A score's cell, with ≈ when its difference from the model before is noise or not conclusive."""
    c = ((m.get("vs_previous") or {}).get("rows") or {}).get(key)
    return f"{text} ≈" if c and c.get("verdict") in ("noise", "weak") else text


def trust_tables(data: dict[str, Any]) -> tuple[list, list]:
    """(tables before the scores, tables after them): contamination; difference or noise."""
    from aura.evaluation.significance import describe

    before, after = [], []
    cont = [m for m in data["models"] if m.get("contamination")]
    if cont:
        rows = []
        for m in cont:
            c = m["contamination"]
            tasks = ", ".join(
                f"{t} {v['seen']}/{v['items']}"
                + (f" ({M('short', n=v['not_checkable'])})" if v.get("not_checkable") else "")
                for t, v in c["tasks"].items()
            )
            example = next((e for v in c["tasks"].values() for e in v.get("examples") or []), None)
            checked = ", ".join(c.get("stages") or []) + f" ({M('n_gram', n=(c.get('method') or {}).get('ngrams'))})"
            if c.get("not_read"):
                checked += "; " + M("unread", paths=", ".join(s["path"] for s in c["not_read"]))
            if c.get("tasks_not_read"):
                checked += "; " + M("tasks_unread", tasks=", ".join(c["tasks_not_read"]))
            rows.append(
                [
                    m["stage"],
                    M("seen", k=c["seen"], n=c["items"]),
                    tasks,
                    checked,
                    f"{example['id']}: «{example['ngram']}» ({example['where']})" if example else M("none"),
                ]
            )
        before.append(
            (M("contamination"), [M("h_model"), M("h_seen"), M("h_tasks"), M("h_from"), M("h_example")], rows)
        )
    rows = []
    for m in data["models"]:
        vs = m.get("vs_previous")
        for key, c in ((vs or {}).get("rows") or {}).items():
            rows.append([f"{m['stage']} − {vs['model']}", key, _n(c["diff"], "+.4f"), _n(c["stderr"]), describe(c)])
    if rows:
        after.append((M("noise"), [M("h_pair"), M("h_score"), M("h_diff"), M("h_se"), M("h_verdict")], rows))
    rows = [
        [
            m["stage"],
            r["key"],
            _n(r["value"]) + ("" if r["stderr"] is None else f" ± {_n(r['stderr'])}"),
            ref["model"],
            _n(ref["value"]) + ("" if ref.get("stderr") is None else f" ± {_n(ref['stderr'])}"),
            f"{ref['source']} ({ref['date']})",
        ]
        for m in data["models"]
        for r in m.get("references") or []
        for ref in r["refs"]
    ]
    if rows:
        heads = [M("h_model"), M("h_score"), M("h_value"), M("h_reference"), M("h_ref_value"), M("h_source")]
        after.append((M("references"), heads, rows))
    return before, after
