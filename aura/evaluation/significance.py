"""Is a difference between two models larger than its noise?

Each score is a mean over items, with the standard error of that mean (n-1, as lm-eval). The difference
of two models' scores has a combined standard error: where both scored the same items (their ids are kept
per item, ``items`` in a result row), the paired one, the standard error of the per-item differences
(``std(a_i - b_i, ddof=1) / sqrt(n)``: items both get right or both get wrong cancel, so it is smaller than
the unpaired one when the models agree); otherwise ``sqrt(se_a² + se_b²)``. Rows merged over several seeds
(``aura.evaluation.seeds``) add their seed error, ``sqrt(se² + seed_se_a² + seed_se_b²)``: the items of
one run cannot show how much another seed would move the score. ``z`` is the difference over
that error; the verdict says it in words: within one standard error it is noise, beyond 1.96 (a two-sided
p < 0.05 under the normal approximation) it is significant, between them it is not conclusive. When the
paired differences do not vary (every changed item moved the same way), the exact sign test decides.
"""

from __future__ import annotations

import math
from typing import Any

from aura.core.i18n import Messages
from aura.evaluation.seeds import seed_stderr

M = Messages(
    "significance",
    {
        "noise": ("ruido (|dif.| ≤ 1 error estándar)", "noise (|diff| ≤ 1 standard error)"),
        "weak": (
            "no concluyente (entre 1 y 1,96 errores estándar)",
            "not conclusive (between 1 and 1.96 standard errors)",
        ),
        "significant": (
            "significativa (> 1,96 errores estándar, p < 0,05)",
            "significant (> 1.96 standard errors, p < 0.05)",
        ),
        "unknown": ("sin error estándar", "no standard error"),
        "paired": ("pareado, {n:ítem|ítems} comunes", "paired, {n:item|items} in common"),
        "unpaired": ("sin parear", "unpaired"),
        "with_seeds": (
            "más la dispersión entre semillas (±{se})",
            "plus the spread between seeds (±{se})",
        ),
        "title": ("¿Diferencia o ruido? {b} frente a {a}", "Difference or noise? {b} against {a}"),
        "h_task": ("tarea", "task"),
        "h_metric": ("métrica", "metric"),
        "h_diff": ("diferencia", "difference"),
        "h_se": ("error estándar combinado", "combined stderr"),
        "h_verdict": ("veredicto", "verdict"),
        "h_how": ("cómo", "how"),
    },
)

Z_SIGNIFICANT = 1.959963984540054  # two-sided 5 %


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def item_scores(row: dict) -> dict[str, float]:
    """{item id: score} of a result row that kept its items (``{"items": {"ids": [...], "scores": [...]}}``)."""
    items = row.get("items") if isinstance(row.get("items"), dict) else {}
    ids, scores = items.get("ids"), items.get("scores")
    if not isinstance(ids, list) or not isinstance(scores, list) or len(ids) != len(scores):
        return {}
    return {str(i): float(s) for i, s in zip(ids, scores) if _finite(s)}


def paired_stderr(diffs: list[float]) -> float:
    n = len(diffs)
    if n < 2:
        return float("nan")
    mean = sum(diffs) / n
    return math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1) / n)


def verdict(z: float | None) -> str:
    if z is None or not math.isfinite(z):
        return "unknown"
    return "noise" if abs(z) <= 1 else "significant" if abs(z) > Z_SIGNIFICANT else "weak"


def compare_rows(a: dict, b: dict) -> dict[str, Any]:
    """``b`` minus ``a`` for one task and metric: the difference, its combined standard error (paired over the
    items both scored when both kept them), z, the two-sided p (normal approximation) and the verdict."""
    diff = b["value"] - a["value"] if _finite(a.get("value")) and _finite(b.get("value")) else None
    ia, ib = item_scores(a), item_scores(b)
    shared = [i for i in ia if i in ib]
    out: dict[str, Any] = {
        "task": a.get("task"),
        "metric": a.get("metric"),
        "a": a.get("value"),
        "b": b.get("value"),
        "diff": diff,
        "paired": False,
        "n": None,
        "stderr": None,
    }
    if len(shared) >= 2 and len(shared) == len(ia) == len(ib):  # the same items: the paired error
        diffs = [ib[i] - ia[i] for i in shared]
        out.update(paired=True, n=len(shared), stderr=paired_stderr(diffs), diff=sum(diffs) / len(diffs))
    elif _finite(a.get("stderr")) and _finite(b.get("stderr")):
        out["stderr"] = math.sqrt(a["stderr"] ** 2 + b["stderr"] ** 2)
    seeds = [s for s in (seed_stderr(a), seed_stderr(b)) if s is not None]
    if seeds and _finite(out["stderr"]):  # several seeds: their spread is noise the items do not show
        out["seed_stderr"] = math.sqrt(sum(s * s for s in seeds))
        out["stderr"] = math.sqrt(out["stderr"] ** 2 + out["seed_stderr"] ** 2)
    se, d = out["stderr"], out["diff"]
    if d is None or not _finite(se):
        out.update(z=None, p=None, verdict="unknown")
    elif se == 0 and d == 0:  # every item agrees
        out.update(z=None, p=1.0, verdict="noise")
    elif se == 0:  # every item that changed moved the same way (or both errors are 0): no spread to divide by.
        # Paired, the exact sign test says it: k such items happen by chance with p = 2 × 0.5^k
        k = sum(ib[i] != ia[i] for i in shared) if out["paired"] else 0
        p = min(1.0, 2 * 0.5**k) if k else None
        out.update(z=None, p=p, verdict="unknown" if p is None else "significant" if p < 0.05 else "weak")
    else:
        z = d / se
        out.update(z=z, p=math.erfc(abs(z) / math.sqrt(2)), verdict=verdict(z))
    return out


def compare_reports(a: dict, b: dict) -> list[dict[str, Any]]:
    """Every (task, metric) both reports scored with a standard error or items: ``compare_rows``."""
    mine = {(r.get("task"), r.get("metric")): r for r in a.get("rows") or [] if isinstance(r, dict)}
    out = []
    for r in b.get("rows") or []:
        other = mine.get((r.get("task"), r.get("metric"))) if isinstance(r, dict) else None
        if other is not None and (_finite(r.get("stderr")) or item_scores(r)):
            out.append(compare_rows(other, r))
    return out


def describe(c: dict[str, Any]) -> str:
    """The verdict in the reader's language, with how the error was computed."""
    how = M("paired", n=c["n"]) if c.get("paired") else M("unpaired")
    if _finite(c.get("seed_stderr")):
        from aura.core.i18n import num

        how += ", " + M("with_seeds", se=num(c["seed_stderr"], ".4f"))
    return f"{M(c['verdict'])}; {how}" if c["verdict"] != "unknown" else M("unknown")


def print_comparisons(reports: list[dict]) -> list[dict[str, Any]]:
    """For ``aura eval --compare``: every other model against the first, one table each; returns the
    comparisons ({"a", "b", "rows"}) for the results file."""
    from aura.core import console
    from aura.core.i18n import num

    def n4(v) -> str:
        return "–" if v is None or not math.isfinite(v) else num(v, "+.4f")

    out = []
    for other in reports[1:]:
        rows = compare_reports(reports[0], other)
        if not rows:
            continue
        out.append({"a": reports[0]["model"], "b": other["model"], "rows": rows})
        console.table(
            M("title", a=reports[0]["model"], b=other["model"]),
            [M("h_task"), M("h_metric"), M("h_diff"), M("h_se"), "z", "p", M("h_verdict")],
            [
                [
                    c["task"],
                    c["metric"],
                    n4(c["diff"]),
                    n4(c["stderr"]).lstrip("+"),
                    n4(c["z"]) if c["z"] is None or math.isfinite(c["z"]) else ("+∞" if c["z"] > 0 else "−∞"),
                    "–" if c["p"] is None else num(c["p"], ".3g"),
                    describe(c),
                ]
                for c in rows
            ],
        )
    return out
