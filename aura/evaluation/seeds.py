"""Scores over several seeds: one result from N runs of the same tasks.

Two kinds of seed move a score without the model getting better or worse:

* **evaluation seeds** (``aura eval --seeds N``): lm-eval's random, numpy, torch and few-shot seeds choose
  the few-shot examples and drive any sampled generation, so the same model scores differently from seed
  to seed; run ``k`` of N uses seed ``1234 + k`` (run 0 keeps lm-eval's defaults, so it equals a run
  without ``--seeds``);
* **training seeds** (``aura eval --model A1,A2,A3``: one recipe trained with different seeds, given as one
  model): nanochat's lesson, a second seed of the same recipe moves the score by about as much as many
  recipe changes do.

Either way the runs are merged per (task, metric): the value is the mean over runs; where every run scored
the same items, each item's score is averaged over the runs and the standard error is that of the averaged
items (so a comparison can still pair items); the per-run values and their spread are kept under
``"seeds"``. ``seed_stderr`` is the standard error of the mean over runs (``std / sqrt(N)``), the part
of the noise the item error does not see; ``aura.evaluation.significance`` adds the two when it compares.
"""

from __future__ import annotations

import math
from typing import Any

BASE_SEED = 1234  # lm-eval's default numpy, torch and few-shot seed


def lm_eval_seeds(k: int) -> dict[str, int]:
    """``simple_evaluate``'s seed arguments for run ``k`` (run 0: lm-eval's own defaults)."""
    s = BASE_SEED + k
    return {"random_seed": 0 if k == 0 else s, "numpy_random_seed": s, "torch_random_seed": s, "fewshot_random_seed": s}


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _std(values: list[float]) -> float:
    n = len(values)
    if n < 2:
        return float("nan")
    mean = sum(values) / n
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))


def _averaged_items(rows: list[dict]) -> dict | None:
    """Each item's score averaged over the runs, when every run kept the same items (else None)."""
    items = [r.get("items") if isinstance(r.get("items"), dict) else None for r in rows]
    if any(i is None for i in items):
        return None
    ids = [str(x) for x in items[0].get("ids") or []]
    maps = []
    for i in items:
        if len(i.get("ids") or []) != len(i.get("scores") or []):
            return None
        maps.append(dict(zip((str(x) for x in i["ids"]), i["scores"])))
    if len(ids) < 2 or any(set(m) != set(ids) for m in maps):
        return None
    return {"ids": ids, "scores": [sum(float(m[x]) for m in maps) / len(maps) for x in ids]}


def merge_rows(rows: list[dict], labels: list[str]) -> dict[str, Any]:
    """One row from the same (task, metric) row of N runs (``labels``: what each run was, a seed or a model)."""
    values = [float(r["value"]) for r in rows if _finite(r.get("value"))]
    out = {k: v for k, v in rows[0].items() if k not in ("value", "stderr", "items")}
    out["value"] = sum(values) / len(values) if len(values) == len(rows) else None
    items = _averaged_items(rows)
    if items is not None:
        scores = items["scores"]
        mean = sum(scores) / len(scores)
        out["stderr"] = math.sqrt(sum((s - mean) ** 2 for s in scores) / (len(scores) - 1) / len(scores))
        out["items"] = items
    else:  # no items to average: the runs' own errors, as one run's (the items are the same in every run)
        errs = [r.get("stderr") for r in rows]
        out["stderr"] = math.sqrt(sum(e * e for e in errs) / len(errs)) if all(_finite(e) for e in errs) else None
    spread = _std(values) if len(values) == len(rows) else float("nan")
    out["seeds"] = {
        "runs": labels,
        "values": [r.get("value") for r in rows],
        "std": spread if math.isfinite(spread) else None,
        "seed_stderr": spread / math.sqrt(len(rows)) if math.isfinite(spread) else None,
    }
    return out


def merge_row_lists(row_lists: list[list[dict]], labels: list[str]) -> list[dict]:
    """The rows of N runs of the same tasks merged per (task, metric); a row that not every run has is
    dropped (a task one run could not score is not averaged)."""
    keyed = [{(r.get("task"), r.get("metric")): r for r in rows} for rows in row_lists]
    order = [k for k in keyed[0] if all(k in other for other in keyed[1:])]
    return [merge_rows([kd[k] for kd in keyed], labels) for k in order]


def merge_reports(reports: list[dict], labels: list[str], *, name: str, kind: str) -> dict[str, Any]:
    """One report from N runs of the same tasks (``kind``: "eval" for --seeds, "training" for a model
    group): the first run's fields, ``name`` as the model, the merged rows."""
    merged = {k: v for k, v in reports[0].items() if k not in ("rows", "model")}
    merged["model"] = name
    merged["rows"] = merge_row_lists([rep.get("rows") or [] for rep in reports], labels)
    merged["seeds"] = {"kind": kind, "runs": labels}
    if kind == "training":
        merged["models"] = labels
    return merged


def seed_stderr(row: dict) -> float | None:
    """The standard error of a row's mean over its seeds (None: one run, or no spread known)."""
    seeds = row.get("seeds") if isinstance(row.get("seeds"), dict) else {}
    v = seeds.get("seed_stderr")
    return float(v) if _finite(v) else None
