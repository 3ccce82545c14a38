"""The documents of lm-evaluation-harness tasks as eval items for the contamination check
(``aura.data.contamination``): each document's prompt (``doc_to_text``) followed by its right answer
(``doc_to_target``, the choice it names for a multiple-choice task), read through lm-eval's own task
objects. Only tasks whose data is on this machine are read (a local ``--include-path`` task, a hub dataset
already in the cache); the others are listed, never downloaded."""

from __future__ import annotations

from aura.data.contamination import EvalItem


def _flatten(tasks: dict) -> dict:
    out = {}
    for name, task in tasks.items():
        if isinstance(task, dict):  # a group: its members
            out.update(_flatten(task))
        elif hasattr(task, "eval_docs"):
            out[getattr(name, "group_name", name) if not isinstance(name, str) else name] = task
    return out


def _answer(task, doc) -> str:
    target = task.doc_to_target(doc)
    if isinstance(target, list):
        target = target[0] if target else ""
    if isinstance(target, int) and task.OUTPUT_TYPE == "multiple_choice":
        choices = task.doc_to_choice(doc)
        return str(choices[target]) if 0 <= target < len(choices) else ""
    return str(target)


def harness_items(
    tasks: list[str], *, include_paths: list[str] = (), limit: int = 0, trust_task_code: bool = False
) -> tuple[list[EvalItem], dict[str, list[str]]]:
    """(items of every task whose data is here, {task: the hub datasets it would need} for the others)."""
    from lm_eval.tasks import get_task_dict

    from aura.evaluation.harness import (
        check_include_paths,
        sandboxed_templates,
        task_manager,
    )
    from aura.evaluation.task_data import missing_hub_data

    check_include_paths(list(include_paths), trust_task_code=trust_task_code)
    manager = task_manager(tasks, list(include_paths))
    missing = missing_hub_data(manager, tasks)
    here = [t for t in tasks if t not in missing]
    items: list[EvalItem] = []
    if not here:
        return items, missing
    with sandboxed_templates(not trust_task_code):
        # newer lm-eval: TaskManager.load, flat; older: get_task_dict, groups nested
        loaded = manager.load(here)["tasks"] if hasattr(manager, "load") else get_task_dict(here, manager)
        for name, task in _flatten(loaded).items():
            docs = list(task.eval_docs)
            for i, doc in enumerate(docs[:limit] if limit else docs):
                items.append(EvalItem(str(name), str(i), f"{task.doc_to_text(doc)} {_answer(task, doc)}"))
    return items, missing
