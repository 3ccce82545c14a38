"""Tasks of the EleutherAI lm-evaluation-harness (``spanish_bench``, ``global_mmlu_es``, ...) on a model
Aura loaded: lm-eval's own ``HFLM`` wraps the already-loaded model and tokenizer (so final dirs, merged
models, adapters and checkpoints all work, on the device and batch size Aura chose), and
``lm_eval.simple_evaluate`` runs the tasks with a ``TaskManager`` that also knows the aura-es suite and
any ``--include-path`` directory of local YAML tasks. Most of lm-eval's tasks download their data from the
Hugging Face hub; the aura-es suite needs nothing from the network.
"""

from __future__ import annotations

import contextlib
import difflib
import sys
import types
from pathlib import Path

from aura.core.errors import AuraError
from aura.core.i18n import Messages
from aura.evaluation.suite import SUITE_DIR

M = Messages(
    "harness",
    {
        "no_lm_eval": (
            "Falta lm-evaluation-harness para --tasks. Instálalo con: pip install 'aura-llm[eval]' "
            "(o usa --suite aura-es, que no lo necesita).",
            "lm-evaluation-harness is missing for --tasks. Install it with: pip install 'aura-llm[eval]' "
            "(or use --suite aura-es, which does not need it).",
        ),
        "unknown": (
            "--tasks: lm-evaluation-harness no conoce la tarea '{task}'.{close} La batería de Aura, que "
            "funciona sin red, es --suite aura-es.",
            "--tasks: lm-evaluation-harness has no task '{task}'.{close} Aura's own suite, which works "
            "offline, is --suite aura-es.",
        ),
        "close": (" ¿Quisiste decir: {names}?", " Did you mean: {names}?"),
        "no_close": (" Lista las tareas con: lm-eval ls tasks.", " List the tasks with: lm-eval ls tasks."),
        "offline": (
            "La tarea '{task}' descarga sus datos del hub de Hugging Face y no hay conexión ({error}). "
            "Ejecútala con red (o con los datos ya en la caché de Hugging Face); --suite aura-es "
            "funciona sin red.",
            "Task '{task}' downloads its data from the Hugging Face hub and there is no connection "
            "({error}). Run it with a network (or with the data already in the Hugging Face cache); "
            "--suite aura-es works offline.",
        ),
        "no_network": (
            "--tasks '{tasks}': sus datos están en el hub de Hugging Face ({datasets}), no en la caché "
            "de este equipo, y {why}. --suite aura-es, la batería de Aura, funciona sin red (o ejecuta "
            "--tasks una vez con red para guardar los datos en la caché, o usa --include-path con tareas "
            "de datos locales).",
            "--tasks '{tasks}': their data is on the Hugging Face hub ({datasets}), not in this machine's "
            "cache, and {why}. --suite aura-es works offline: it is Aura's own suite (or run --tasks once "
            "with a network to keep the data in the cache, or use --include-path with tasks on local "
            "data).",
        ),
        "why_host": ("no hay conexión con {host}", "{host} cannot be reached"),
        "why_offline": ("el modo sin conexión está activado ({var})", "offline mode is on ({var})"),
        "and_more": ("{shown} y {n} más", "{shown} and {n} more"),
        "task_failed": ("La tarea '{task}' no se pudo cargar: {error}", "Task '{task}' could not be loaded: {error}"),
        "bad_include": ("--include-path {path} no es un directorio.", "--include-path {path} is not a directory."),
        "bad_yaml": (
            "--include-path: {file} no es YAML válido:\n{err}\nCorrígelo (lm-evaluation-harness se "
            "saltaría el archivo sin avisar y la tarea aparecería como desconocida).",
            "--include-path: {file} is not valid YAML:\n{err}\nFix it (lm-evaluation-harness would skip "
            "the file silently and report the task as unknown).",
        ),
        "too_deep": ("anidado a demasiada profundidad", "nested too deep"),
        "task_code": (
            "--include-path {path} ejecutaría código: {what}. Las tareas de lm-evaluation-harness pueden "
            "importar Python (etiquetas !function, archivos .py, código remoto de datasets), que se "
            "ejecuta con tus permisos. Si confías en ese directorio, añade --trust-task-code; si no, "
            "usa tareas solo con YAML y plantillas.",
            "--include-path {path} would run code: {what}. lm-evaluation-harness tasks can import "
            "Python (!function tags, .py files, datasets' remote code), which runs with your "
            "permissions. If you trust that directory, add --trust-task-code; otherwise use tasks made "
            "of YAML and templates only.",
        ),
        "w_python": ("el archivo Python {file}", "the Python file {file}"),
        "w_function": ("la etiqueta !function de {file}", "the !function tag in {file}"),
        "w_remote": ("trust_remote_code en {file}", "trust_remote_code in {file}"),
        "w_include": (
            "{file} incluye {target}, fuera del directorio",
            "{file} includes {target}, outside the directory",
        ),
        "shadow": (
            "{file} define la tarea '{task}', que es un nombre de las tareas incluidas en Aura (aura-es): una "
            "tarea de --include-path nunca sustituye a una de Aura. Cambia su nombre (task:, group: o tag:).",
            "{file} defines the task '{task}', a name of the tasks shipped with Aura (aura-es): an "
            "--include-path task never replaces one of Aura's. Rename it (task:, group: or tag:).",
        ),
    },
)

NETWORK_ERRORS = (
    "ConnectionError",
    "OfflineModeIsEnabled",
    "LocalEntryNotFoundError",
    "HfHubHTTPError",
    "DatasetNotFoundError",
    "Timeout",
    "ConnectTimeout",
    "ReadTimeout",
    "MaxRetryError",
)


def harness_version() -> str:
    import importlib.metadata

    return importlib.metadata.version("lm_eval")


def _require_lm_eval() -> None:
    try:
        import lm_eval  # noqa: F401
    except ImportError:
        raise AuraError(M("no_lm_eval")) from None


def _yaml_includes(text: str) -> list[str]:
    """The ``include:`` entries of a task YAML (tags such as !function read as plain strings)."""
    import yaml

    class _Loader(yaml.SafeLoader):
        pass

    _Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    try:
        cfg = yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader that ignores every tag
    except yaml.YAMLError:
        return []
    inc = cfg.get("include") if isinstance(cfg, dict) else None
    return [str(i) for i in (inc if isinstance(inc, list) else [inc]) if isinstance(i, str)]


def task_code(path: str | Path) -> list[str]:
    """What in the task directory ``path`` would run code under lm-evaluation-harness (empty: nothing):
    Python files, ``!function`` tags, ``trust_remote_code``, includes of YAML outside the directory."""
    root = Path(path).resolve()
    found: list[str] = []
    for f in sorted(root.glob("**/*.py")):
        found.append(M("w_python", file=f))
    for f in sorted(root.glob("**/*.yaml")) + sorted(root.glob("**/*.yml")):
        try:
            text = f.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if "!function" in text:
            found.append(M("w_function", file=f))
        if "trust_remote_code" in text:
            found.append(M("w_remote", file=f))
        for inc in _yaml_includes(text):
            target = (f.parent / inc).resolve()
            if target != root and root not in target.parents:
                found.append(M("w_include", file=f, target=inc))
    return found


def check_task_yaml(path: str | Path) -> None:
    """Every YAML file of the task directory ``path`` parses (tags such as !function read as plain values):
    lm-evaluation-harness skips a broken one with a log line, and the task would be reported unknown."""
    import yaml

    class _Loader(yaml.SafeLoader):
        pass

    _Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    for f in sorted(Path(path).glob("**/*.yaml")) + sorted(Path(path).glob("**/*.yml")):
        try:
            yaml.load(f.read_text(encoding="utf-8"), Loader=_Loader)  # noqa: S506 - safe, tags ignored
        except (yaml.YAMLError, UnicodeDecodeError) as e:
            raise AuraError(M("bad_yaml", file=f, err=e)) from None
        except RecursionError:
            raise AuraError(M("bad_yaml", file=f, err=M("too_deep"))) from None
        except OSError as e:
            raise AuraError(M("bad_yaml", file=f, err=e.strerror or e)) from None


def check_include_paths(include_paths: list[str], *, trust_task_code: bool) -> None:
    """Refuse, before any model is loaded, a missing --include-path, one with a YAML file that does not
    parse, or one holding code without the flag."""
    for p in include_paths:
        if not Path(p).is_dir():
            raise AuraError(M("bad_include", path=p))
        check_task_yaml(p)
        code = [] if trust_task_code else task_code(p)
        if code:
            raise AuraError(M("task_code", path=p, what="; ".join(code[:3]) + ("; …" if len(code) > 3 else "")))


def _check_shadowing(paths: list[str]) -> None:
    """No --include-path task, group or tag takes a name of the shipped aura-es suite."""
    from lm_eval.tasks import TaskManager

    shipped = set(TaskManager(include_path=[str(SUITE_DIR)], include_defaults=False).task_index)
    for p in paths:
        for name, entry in TaskManager(include_path=[p], include_defaults=False).task_index.items():
            if name in shipped or name.startswith(("aura_es", "aura-es")):
                raise AuraError(M("shadow", file=entry.yaml_path or p, task=name))


LEGACY_METRICS = "transformers.data.metrics.squad_metrics"


def legacy_metrics_module() -> None:
    """Let lm-eval load the task folders whose code imports ``transformers.data.metrics.squad_metrics``, a module
    transformers 5 removed: ``spanish_bench`` (``copa_es``, ``xquad_es``, its XNLI and PAWS-X variants...),
    ``coqa``, the Galician and Catalan benches. Where transformers still has it, nothing changes; else Aura's
    ``aura.evaluation.squad_metrics`` (the same SQuAD definitions) is registered under that name."""
    import transformers.data

    try:
        __import__(LEGACY_METRICS)
        return
    except ImportError:
        pass
    from aura.evaluation import squad_metrics

    parent_name, _, leaf = LEGACY_METRICS.rpartition(".")
    parent = sys.modules.get(parent_name) or types.ModuleType(parent_name)
    parent.__path__ = []  # a package, so that its submodule imports
    setattr(parent, leaf, squad_metrics)
    sys.modules[parent_name], sys.modules[LEGACY_METRICS] = parent, squad_metrics
    transformers.data.metrics = parent


def task_manager(tasks: list[str], include_paths: list[str]):
    """A TaskManager that knows every name in ``tasks``: local directories only when they are enough
    (indexing lm-eval's ~15,000 built-in tasks takes a while), else the built-in tasks too. The shipped
    aura-es tasks come first and no --include-path task may take one of their names."""
    from lm_eval.tasks import TaskManager

    legacy_metrics_module()
    paths = [str(SUITE_DIR)]
    for p in include_paths:
        if not Path(p).is_dir():
            raise AuraError(M("bad_include", path=p))
        paths.append(str(Path(p).resolve()))
    _check_shadowing(paths[1:])
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


def check_data_reachable(manager, tasks: list, *, hint: str = "") -> None:
    """Refuse at once, before lm-eval retries the hub for a minute, tasks whose hub data is not cached here
    when the hub cannot be reached (``aura.evaluation.task_data``)."""
    from aura.evaluation.task_data import hub_unreachable, missing_hub_data, offline_var

    missing = missing_hub_data(manager, tasks)
    if not missing:
        return
    offline = offline_var()
    host = None if offline else hub_unreachable()
    if not offline and host is None:
        return  # the hub answers: lm-eval downloads what it needs
    datasets = sorted({d for ds in missing.values() for d in ds})
    shown = ", ".join(datasets[:4])
    why = M("why_offline", var=offline) if offline else M("why_host", host=host)
    raise AuraError(
        M(
            "no_network",
            tasks=",".join(missing),
            why=why,
            datasets=M("and_more", shown=shown, n=len(datasets) - 4) if len(datasets) > 4 else shown,
        )
        + hint
    )


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
    for task in tasks:
        try:
            manager.load([task])
        except Exception as e:  # noqa: BLE001 - any loading failure of a task is reported as such
            key = "offline" if is_network_error(e) else "task_failed"
            return AuraError(M(key, task=_name(task), error=_first_line(e)))
    return AuraError(M("task_failed", task=",".join(map(_name, tasks)), error=_first_line(error)))


@contextlib.contextmanager
def sandboxed_templates(enabled: bool):
    """lm-eval renders the tasks' Jinja templates (doc_to_text...) with a plain Jinja environment, where
    a template can reach Python internals and run code; unless --trust-task-code, render them in Jinja's
    sandbox (same options and filters), which refuses that."""
    if not enabled:
        yield
        return
    import lm_eval.utils as lm_utils
    from jinja2.sandbox import SandboxedEnvironment

    plain = lm_utils.env
    sandbox = SandboxedEnvironment(
        loader=plain.loader, undefined=plain.undefined, keep_trailing_newline=plain.keep_trailing_newline
    )
    sandbox.filters.update(plain.filters)
    lm_utils.env = sandbox
    try:
        yield
    finally:
        lm_utils.env = plain


def _items(samples, metric: str, filt: str) -> dict:
    """``{"items": {"ids", "scores"}}``: each document's score from lm-eval's logged samples (what a paired
    comparison reads, ``aura.evaluation.significance``), or nothing when they do not have it."""
    if not isinstance(samples, list):
        return {}
    mine = [s for s in samples if s.get("filter", "none") == filt and isinstance(s.get(metric), (int, float))]
    if not mine or len(mine) != len(samples) // max(1, len({s.get("filter") for s in samples})):
        return {}
    return {"items": {"ids": [str(s["doc_id"]) for s in mine], "scores": [float(s[metric]) for s in mine]}}


def _name(task) -> str:
    return task.get("task", task.get("group", "?")) if isinstance(task, dict) else task


def _evaluate(lm, tasks: list, manager, *, limit: int, trust_task_code: bool, seed: int = 0) -> dict:
    """One ``simple_evaluate`` call, a task that cannot load reported by name; ``seed``: the run's number among
    ``aura eval --seeds`` (``aura.evaluation.seeds``; 0 is lm-eval's default seeds)."""
    from lm_eval import simple_evaluate

    from aura.evaluation.seeds import lm_eval_seeds

    with sandboxed_templates(not trust_task_code):
        try:
            return simple_evaluate(
                model=lm,
                tasks=tasks,
                task_manager=manager,
                limit=limit or None,
                log_samples=True,
                bootstrap_iters=1000,
                verbosity="ERROR",
                **lm_eval_seeds(seed),
            )
        except AuraError:
            raise
        except Exception as e:  # noqa: BLE001 - a task that cannot load: say which one and why
            raise _culprit(manager, tasks, e) from e


def _merged(outs: list[dict]) -> dict:
    """The outputs of several ``simple_evaluate`` calls (tasks in groups of one limit) as one."""
    out: dict = {}
    for part in outs:
        for key in ("results", "n-samples", "n-shot", "versions", "samples", "group_subtasks"):
            out.setdefault(key, {}).update(part.get(key) or {})
    return out


def _rows(out: dict) -> list[dict]:
    """(task, metric, value, stderr, n, num_fewshot[, items]) for every metric lm-eval reported."""
    rows = []
    for task, metrics in out["results"].items():
        n = out.get("n-samples", {}).get(task, {}).get("effective")
        if n is None:  # a group: the documents of its tasks
            n = sum(
                out["n-samples"].get(t, {}).get("effective", 0) for t in out.get("group_subtasks", {}).get(task, [])
            )
        shots = out.get("n-shot", {}).get(task)
        for key, value in metrics.items():
            if "," not in key or "_stderr," in key or not isinstance(value, (int, float)):
                continue
            metric, filt = key.split(",", 1)
            stderr = metrics.get(f"{metric}_stderr,{filt}")
            rows.append(
                {
                    "task": task,
                    "metric": metric if filt == "none" else f"{metric} ({filt})",
                    "value": float(value),
                    "stderr": float(stderr) if isinstance(stderr, (int, float)) else None,
                    "n": int(n),
                    "num_fewshot": int(shots) if isinstance(shots, int) else None,
                    **_items(out.get("samples", {}).get(task), metric, filt),
                }
            )
    return rows


def run_tasks(
    model,
    tok,
    tasks: list,
    *,
    include_paths: list[str] = (),
    limit: int = 0,
    limits: list[int] | None = None,
    batch_size: int = 8,
    max_length: int = 0,
    trust_task_code: bool = False,
    manager=None,
    offline_hint: str = "",
    seed: int = 0,
) -> dict:
    """lm-eval's results for ``tasks`` on an already-loaded model: {"rows", "versions", "n_samples",
    "harness_version"}; rows are (task, metric, value, stderr, n, num_fewshot). A task is a name or a full
    lm-eval task config (``aura.evaluation.standard_suite``, with ``manager``, the TaskManager that knows its
    names); ``limits`` gives each task its own limit (else ``limit`` for all). Task code in an --include-path
    needs ``trust_task_code``; templates run in Jinja's sandbox without it. ``seed``: see ``_evaluate``."""
    _require_lm_eval()
    import logging

    from lm_eval.models.huggingface import HFLM

    logging.getLogger("lm_eval").setLevel(logging.ERROR)
    check_include_paths(list(include_paths), trust_task_code=trust_task_code)
    if manager is None:
        manager = task_manager(tasks, list(include_paths))
    check_data_reachable(manager, tasks, hint=offline_hint)
    lm = HFLM(pretrained=model, tokenizer=tok, batch_size=batch_size, max_length=max_length or None)
    per_task = list(limits) if limits is not None else [limit] * len(tasks)
    outs = []
    for lim in dict.fromkeys(per_task):  # one call per limit, in the tasks' order
        group = [t for t, t_lim in zip(tasks, per_task, strict=True) if t_lim == lim]
        outs.append(_evaluate(lm, group, manager, limit=lim, trust_task_code=trust_task_code, seed=seed))
    out = _merged(outs)
    return {
        "rows": _rows(out),
        "versions": {k: str(v) for k, v in out.get("versions", {}).items()},
        "n_samples": out.get("n-samples", {}),
        "harness_version": harness_version(),
    }
