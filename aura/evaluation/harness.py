"""Tasks of the EleutherAI lm-evaluation-harness (``spanish_bench``, ``global_mmlu_es``, ...) on a model
Aura loaded: lm-eval's own ``HFLM`` wraps the already-loaded model and tokenizer (so final dirs, merged
models, adapters and checkpoints all work, on the device and batch size Aura chose), and
``lm_eval.simple_evaluate`` runs the tasks with a ``TaskManager`` that also knows the aura-es suite and
any ``--include-path`` directory of local YAML tasks. Most of lm-eval's tasks download their data from the
Hugging Face hub; the aura-es suite needs nothing from the network.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from aura.core.errors import AuraError
from aura.evaluation.suite import SUITE_DIR
from aura.core.i18n import Messages

M = Messages("harness", {
    "no_lm_eval": ("Falta lm-evaluation-harness para --tasks. Instálalo con: pip install 'aura-llm[eval]' "
                   "(o usa --suite aura-es, que no lo necesita).",
                   "lm-evaluation-harness is missing for --tasks. Install it with: pip install 'aura-llm[eval]' "
                   "(or use --suite aura-es, which does not need it)."),
    "unknown": ("--tasks: lm-evaluation-harness no conoce la tarea '{task}'.{close}",
                "--tasks: lm-evaluation-harness has no task '{task}'.{close}"),
    "close": (" ¿Quisiste decir: {names}?", " Did you mean: {names}?"),
    "no_close": (" Lista las tareas con: lm-eval ls tasks.", " List the tasks with: lm-eval ls tasks."),
    "offline": ("La tarea '{task}' descarga sus datos del hub de Hugging Face y no hay conexión ({error}). "
                "Ejecútala con red (o con los datos ya en la caché de Hugging Face); --suite aura-es "
                "funciona sin red.",
                "Task '{task}' downloads its data from the Hugging Face hub and there is no connection "
                "({error}). Run it with a network (or with the data already in the Hugging Face cache); "
                "--suite aura-es works offline."),
    "task_failed": ("La tarea '{task}' no se pudo cargar: {error}", "Task '{task}' could not be loaded: {error}"),
    "bad_include": ("--include-path {path} no es un directorio.", "--include-path {path} is not a directory."),
})

NETWORK_ERRORS = ("ConnectionError", "OfflineModeIsEnabled", "LocalEntryNotFoundError", "HfHubHTTPError",
                  "DatasetNotFoundError", "Timeout", "ConnectTimeout", "ReadTimeout", "MaxRetryError")


def harness_version() -> str:
    import importlib.metadata

    return importlib.metadata.version("lm_eval")


def _require_lm_eval() -> None:
    try:
        import lm_eval  # noqa: F401
    except ImportError:
        raise AuraError(M("no_lm_eval")) from None


def task_manager(tasks: list[str], include_paths: list[str]):
    """A TaskManager that knows every name in ``tasks``: local directories only when they are enough
    (indexing lm-eval's ~15,000 built-in tasks takes a while), else the built-in tasks too."""
    from lm_eval.tasks import TaskManager

    paths = [str(SUITE_DIR)]
    for p in include_paths:
        if not Path(p).is_dir():
            raise AuraError(M("bad_include", path=p))
        paths.append(str(Path(p).resolve()))
    local = TaskManager(include_path=paths, include_defaults=False)
    if all(local.match_tasks([t]) for t in tasks):
        return local
    full = TaskManager(include_path=paths)
    for t in tasks:
        if not full.match_tasks([t]):
            close = difflib.get_close_matches(t, full.all_tasks, n=5, cutoff=0.6)
            hint = M("close", names=", ".join(close)) if close else M("no_close")
            raise AuraError(M("unknown", task=t, close=hint))
    return full


def is_network_error(error: BaseException) -> bool:
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if any(c.__name__ in NETWORK_ERRORS for c in type(error).__mro__):
            return True
        error = error.__cause__ or error.__context__
    return False


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


def _culprit(manager, tasks: list[str], error: BaseException) -> AuraError:
    """The task whose loading fails, as a clear error (or the original error's text)."""
    for name in tasks:
        try:
            manager.load([name])
        except Exception as e:  # noqa: BLE001 - any loading failure of a task is reported as such
            key = "offline" if is_network_error(e) else "task_failed"
            return AuraError(M(key, task=name, error=_first_line(e)))
    return AuraError(M("task_failed", task=",".join(tasks), error=_first_line(error)))


def run_tasks(model, tok, tasks: list[str], *, include_paths: list[str] = (), limit: int = 0,
              batch_size: int = 8, max_length: int = 0) -> dict:
    """lm-eval's results for ``tasks`` on an already-loaded model: {"rows", "versions", "n_samples",
    "harness_version"}; rows are (task, metric, value, stderr, n)."""
    _require_lm_eval()
    import logging

    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM

    logging.getLogger("lm_eval").setLevel(logging.ERROR)
    manager = task_manager(tasks, list(include_paths))
    lm = HFLM(pretrained=model, tokenizer=tok, batch_size=batch_size, max_length=max_length or None)
    try:
        out = simple_evaluate(model=lm, tasks=tasks, task_manager=manager, limit=limit or None,
                              log_samples=False, bootstrap_iters=1000, verbosity="ERROR")
    except AuraError:
        raise
    except Exception as e:  # noqa: BLE001 - a task that cannot load: say which one and why
        raise _culprit(manager, tasks, e) from e
    rows = []
    for task, metrics in out["results"].items():
        n = out.get("n-samples", {}).get(task, {}).get("effective")
        if n is None:  # a group: the documents of its tasks
            n = sum(out["n-samples"].get(t, {}).get("effective", 0) for t in out.get("group_subtasks", {})
                    .get(task, []))
        for key, value in metrics.items():
            if "," not in key or "_stderr," in key or not isinstance(value, (int, float)):
                continue
            metric, filt = key.split(",", 1)
            stderr = metrics.get(f"{metric}_stderr,{filt}")
            rows.append({"task": task, "metric": metric if filt == "none" else f"{metric} ({filt})",
                         "value": float(value), "stderr": float(stderr) if isinstance(stderr, (int, float))
                         else None, "n": int(n)})
    return {"rows": rows, "versions": {k: str(v) for k, v in out.get("versions", {}).items()},
            "n_samples": out.get("n-samples", {}), "harness_version": harness_version()}
