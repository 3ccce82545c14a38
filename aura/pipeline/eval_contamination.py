"""Before a score is reported: did the model see the eval items in training?

For each finished eval stage that scores Aura's suite (``suite: aura-es``) or lm-eval tasks whose data is on
this machine (``tasks:``, ``aura.evaluation.task_items``; the others are listed), the training stages that
produced its model are found from the pipeline itself (its references, walked back through every training
stage: an eval of ``dpo.final`` reaches ``dpo``, ``sft`` and ``pretrain``), the data each of them read
(``data``: a prepared dir, files, a mixture's dirs) is scanned with ``aura.data.contamination`` against the
items the stage scored (its ``limit``), and the result is written once to ``DIR/<eval stage>/contamination.json``
(rewritten when the sources change: their paths, sizes and times). The report card reads that file.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from aura.core import console
from aura.core.atomic import atomic_write_json
from aura.core.errors import AuraError
from aura.core.i18n import Messages
from aura.pipeline.pipeline_state import FINISHED

M = Messages(
    "pipeline.contamination",
    {
        "checking": (
            (
                "{stage}: ¿vio el modelo los ítems de evaluación? Comparando {n:ítem|ítems} con los datos de "
                "{stages} (n-gramas de 13 palabras)…"
            ),
            (
                "{stage}: did the model see the eval items? Checking {n:item|items} against the data of {stages} "
                "(13-word n-grams)…"
            ),
        ),
        "result": (
            "{stage}: {k} de {n:ítem|ítems} de evaluación vistos en el entrenamiento ({path}).",
            "{stage}: {k} of {n:eval item|eval items} seen in training ({path}).",
        ),
    },
)
FILE = "contamination.json"
TRAINING = ("pretrain", "finetune")
_MIXTURE = re.compile(r"^[^=/\\]+=[0-9.]+:(.+)$")  # NAME=WEIGHT:DIR (pretrain --data)


def _paths(value) -> list[str]:
    items = value if isinstance(value, (list, tuple)) else [value]
    out = []
    for v in items:
        if isinstance(v, str) and v:
            m = _MIXTURE.match(v)
            out.append(m.group(1) if m else v)
    return out


def lineage(pipeline, stage) -> list:
    """The training stages upstream of ``stage`` through training stages only (an eval's ``data: prepare``
    is what it measures, not what the model read), nearest first."""
    found, todo = [], list(stage.refs)
    while todo:
        name = todo.pop(0)
        up = pipeline.stage(name)
        if up.command in TRAINING and up not in found:
            found.append(up)
            todo += up.refs
    return found


def sources(pipeline, stage) -> list[dict[str, Any]]:
    """Every data path the training stages upstream of ``stage`` read: {"stage", "path"}."""
    return [
        {"stage": up.name, "path": p} for up in lineage(pipeline, stage) for p in _paths(getattr(up.cfg, "data", None))
    ]


def _signature(paths: list[str]) -> list:
    out = []
    for p in paths:
        path = Path(p)
        files = [path] if path.is_file() else sorted(f for f in path.rglob("*") if f.is_file()) if path.is_dir() else []
        out.append([p, sum(f.stat().st_size for f in files), max((f.stat().st_mtime for f in files), default=0)])
    return out


def check_stage(out: Path, pipeline, stage) -> dict[str, Any] | None:
    """Scan (or reuse) ``contamination.json`` of one eval stage; None when the stage scores no Aura suite."""
    from aura.data.contamination import EvalIndex, eval_items, scan
    from aura.data.training_text import readable, training_texts

    if stage.command != "eval":  # another command's `tasks` is something else (data curate's: a count)
        return None
    cfg = stage.cfg
    suite, tasks = cfg.suite, [t.strip() for t in (cfg.tasks or "").split(",") if t.strip()]
    if not (suite or tasks):
        return None
    limit = int(getattr(cfg, "limit", 0) or 0)
    from aura.evaluation.standard_suite import SUITES

    if suite in SUITES:  # a standard suite is lm-eval's tasks, checked as such (at its per-task limit)
        tasks = [t.task for t in SUITES[suite]] + tasks
        limit = limit or max(t.limit for t in SUITES[suite])
        suite = ""
    srcs = sources(pipeline, stage)
    signature = {"suite": suite, "tasks": tasks, "limit": limit, "sources": _signature([s["path"] for s in srcs])}
    path = Path(out) / stage.name / FILE
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
        if old.get("signature") == signature:
            return old
    except (OSError, ValueError, AttributeError):
        pass
    read = [s for s in srcs if Path(s["path"]).exists() and readable(s["path"])]
    not_read = [s for s in srcs if s not in read]

    def texts():
        for s in read:
            yield from training_texts(s["path"])

    items = eval_items(suite, limit=limit) if suite else []
    whole = eval_items(suite) if suite else []
    tasks_not_read: dict[str, list[str]] = {}
    if tasks:  # lm-eval's tasks whose data is on this machine (aura.evaluation.task_items)
        from aura.evaluation.task_items import harness_items

        options = {
            "include_paths": list(getattr(cfg, "include_path", []) or []),
            "trust_task_code": bool(getattr(cfg, "trust_task_code", False)),
        }
        try:
            some, tasks_not_read = harness_items(tasks, limit=limit, **options)
            items, whole = items + some, whole + (harness_items(tasks, **options)[0] if limit else some)
        except (AuraError, ImportError) as e:  # lm-eval missing, a task that does not load: said, not fatal
            tasks_not_read = {t: [str(e).splitlines()[0] if str(e) else type(e).__name__] for t in tasks}
    stages = [up.name for up in lineage(pipeline, stage)]
    console.info(M("checking", stage=stage.name, n=len(items), stages=", ".join(stages) or "–"))
    result = scan(EvalIndex(items, whole=whole), texts())
    console.info(M("result", stage=stage.name, k=result["seen"], n=result["items"], path=path))
    data = {
        "suite": suite,
        "tasks_requested": tasks,
        "limit": limit,
        "stages": stages,
        "sources": read,
        "not_read": not_read,
        "tasks_not_read": tasks_not_read,
        "signature": signature,
        **result,
    }
    atomic_write_json(path, data)
    return data


def refresh(out: Path, pipeline, state) -> None:
    """``check_stage`` for every finished eval stage (the report card calls it before reading)."""
    for stage in pipeline.stages:
        if (
            stage.cfg is not None
            and state.get(stage.name).get("status") == FINISHED
            and (Path(out) / stage.name).is_dir()
        ):
            check_stage(out, pipeline, stage)


def read(stage_dir: Path) -> dict[str, Any] | None:
    """What ``check_stage`` wrote in a stage folder, or None."""
    try:
        data = json.loads((Path(stage_dir) / FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("tasks"), dict) else None
