"""Standard Spanish suites of lm-evaluation-harness tasks: ``aura eval --suite es-estandar`` (full) and
``--suite es-estandar-rapida`` (fast: four log-likelihood tasks, at most 250 documents each, for a pipeline's
eval stage).

Each entry is a ``SuiteTask``: lm-eval's task name, its number of few-shot examples and the metric reported
(with lm-eval's filter for generation tasks). These three are what published scores are matched on, so every
row of a run carries them (``num_fewshot`` and ``suite`` beside lm-eval's ``task`` and ``metric``). Why each
task and setting was chosen: the comments below and docs/evaluation.md.

Data: by default lm-eval reads each task's Hugging Face hub dataset (or the local ``datasets`` cache).
``--suite-data DIR`` reads it from a folder instead, one file per split in the hub's own columns::

    DIR/<dataset_path>/<dataset_name or "default">/<split>.jsonl   (or .parquet)

e.g. ``DIR/facebook/belebele/spa_Latn/test.jsonl``; ``expected_files`` lists them for a suite, and
``download_suite`` fills such a folder on a machine with a network. The scores are lm-eval's own: the task
configs are lm-eval's, only the loader changes (``datasets``' json/parquet builder on those files).
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass
from pathlib import Path

from aura.core.errors import AuraError
from aura.core.i18n import Messages

M = Messages(
    "stdsuite",
    {
        "bad_suite": (
            "--suite {suite} no existe. Baterías: {names}.",
            "--suite {suite} does not exist. Suites: {names}.",
        ),
        "missing_data": (
            "--suite-data {dir}: falta el conjunto de datos {dataset} (tarea {task}, partición {split}). "
            "Se esperaba {path} (o .parquet) con las columnas del hub. Cópialo desde un equipo con red "
            "(aura eval --suite {suite} --download-to DIR) o quita --suite-data para usar la caché de "
            "Hugging Face.",
            "--suite-data {dir}: the dataset {dataset} is missing (task {task}, split {split}). Expected "
            "{path} (or .parquet) with the hub's columns. Copy it from a machine with a network (aura eval "
            "--suite {suite} --download-to DIR) or drop --suite-data to use the Hugging Face cache.",
        ),
        "no_dir": (
            "--suite-data {dir} no es un directorio.",
            "--suite-data {dir} is not a directory.",
        ),
        "hint": (
            " Para trabajar sin red, copia los datos a un directorio y pásalo con --suite-data DIR "
            "(docs/evaluation.md).",
            " To work offline, copy the data into a folder and give it with --suite-data DIR (docs/evaluation.en.md).",
        ),
        "no_metric": (
            "La tarea {task} de lm-evaluation-harness {version} no da la métrica {metric} de la batería {suite}.",
            "lm-evaluation-harness {version} gives no {metric} for task {task}, the metric of suite {suite}.",
        ),
        "download_offline": (
            "--download-to: no se puede descargar sin conexión con el hub de Hugging Face ({why}). "
            "Ejecútalo en un equipo con red y copia {dir} a este.",
            "--download-to: cannot download without the Hugging Face hub ({why}). Run it on a machine "
            "with a network and copy {dir} here.",
        ),
        "task_broken": (
            "lm-evaluation-harness {version} no puede cargar la tarea {task} en este entorno ({error}).",
            "lm-evaluation-harness {version} cannot load task {task} in this environment ({error}).",
        ),
        "mixed": (
            "--suite-data: el directorio {dir} de la tarea {task} tiene archivos .jsonl y .parquet; deja "
            "un solo formato.",
            "--suite-data: the folder {dir} of task {task} holds both .jsonl and .parquet files; keep one format.",
        ),
        "downloaded": ("{path}: {n:fila|filas}.", "{path}: {n:row|rows}."),
    },
)


@dataclass(frozen=True)
class SuiteTask:
    """One task of a standard suite, as published scores name it: (task, num_fewshot, metric)."""

    task: str  # lm-eval's task name
    num_fewshot: int  # few-shot examples in each prompt
    metric: str  # the metric reported (lm-eval's name: acc, acc_norm, mcc, exact_match...)
    limit: int = 0  # at most this many documents (0 = all); only the fast suite limits
    filter: str = "none"  # lm-eval's filter for a generation task's answers (none for log-likelihood tasks)

    @property
    def row_metric(self) -> str:
        """The ``metric`` of this task's row in Aura's results (``aura.evaluation.harness.run_tasks``)."""
        return self.metric if self.filter == "none" else f"{self.metric} ({self.filter})"


FAST_LIMIT = 250  # documents per task of the fast suite: ~1,000 in all, a minute or two on a GPU for a 1B model

# Full suite. Log-likelihood tasks 0-shot where the task scores a natural continuation (the convention of the
# paper that used XNLI and PAWS-X for multilingual models, XGLM); XStoryCloze and OpenBookQA 5-shot acc, as
# Salamandra's model card publishes them (lm-eval, SpanishBench): the one published lm-eval setting found for
# them, so those reference rows compare (aura.evaluation.references); few-shot where the answer is a letter or
# a number whose format the model must be shown (Belebele, MMLU, MGSM); the Open LLM Leaderboard's counts for
# the Okapi translations of ARC and HellaSwag. COPA-es 5-shot acc, as Salamandra's card (its utils.py imports a
# module transformers 5 removed: aura.evaluation.harness.legacy_metrics_module lets it load). XNLI and PAWS-X are
# lm-eval's original tasks (xnli_es, paws_es), not spanish_bench's variants of them on the same data.
FULL: tuple[SuiteTask, ...] = (
    SuiteTask("belebele_spa_Latn", 5, "acc"),  # reading comprehension, 900 questions, answer letter A-D
    SuiteTask("xstorycloze_es", 5, "acc"),  # commonsense: the story's right ending; 5-shot acc as Salamandra's card
    SuiteTask("copa_es", 5, "acc"),  # commonsense: the cause or the effect; 5-shot acc as Salamandra's card
    SuiteTask("xnli_es", 0, "acc"),  # inference: entails, neutral or contradicts
    SuiteTask("openbookqa_es", 5, "acc"),  # elementary science; 5-shot acc as Salamandra's card (comparable rows)
    SuiteTask("paws_es", 0, "acc"),  # paraphrase or not, adversarial word order
    SuiteTask("escola", 0, "mcc"),  # grammatical acceptability; MCC, as CoLA, since the labels are unbalanced
    SuiteTask("arc_es", 25, "acc_norm"),  # school science (Okapi translation), 25-shot as the Open LLM Leaderboard
    SuiteTask("hellaswag_es", 10, "acc_norm"),  # commonsense continuation (Okapi), 10-shot as the leaderboard
    SuiteTask("m_mmlu_es", 5, "acc"),  # knowledge across 57 subjects (Okapi), 5-shot as MMLU
    SuiteTask("mgsm_direct_es_spanish_bench", 5, "exact_match", filter="flexible-extract"),  # grade-school maths
)

# Fast suite: four of the full suite's log-likelihood tasks with the same settings (a fast score reads against
# the same references, with a larger stderr), each on its first FAST_LIMIT documents.
FAST: tuple[SuiteTask, ...] = tuple(
    SuiteTask(t.task, t.num_fewshot, t.metric, FAST_LIMIT)
    for t in FULL
    if t.task in ("belebele_spa_Latn", "xstorycloze_es", "xnli_es", "openbookqa_es")
)

SUITES: dict[str, tuple[SuiteTask, ...]] = {"es-estandar": FULL, "es-estandar-rapida": FAST}
AURA_SUITE = "aura-es"  # Aura's own offline suite (aura.evaluation.suite), scored by Aura's batched scorer


def suite_names() -> tuple[str, ...]:
    """Every name ``aura eval --suite`` accepts."""
    return (AURA_SUITE, *SUITES)


def check_suite(name: str) -> None:
    if name not in suite_names():
        raise AuraError(M("bad_suite", suite=name, names=", ".join(suite_names())))


def suite_tasks(name: str, *, limit: int = 0) -> tuple[SuiteTask, ...]:
    """The tasks of suite ``name``; ``limit`` (``--limit``), when given, replaces every task's own."""
    check_suite(name)
    tasks = SUITES[name]
    if limit:
        tasks = tuple(SuiteTask(t.task, t.num_fewshot, t.metric, limit, t.filter) for t in tasks)
    return tasks


# ---------------------------------------------------------------------------------------------- task data


def task_config(manager, task: str) -> dict:
    """lm-eval's full config of ``task`` (its YAML with every ``include`` merged, ``!function`` resolved)."""
    from lm_eval.tasks._yaml_loader import load_yaml

    from aura.evaluation.harness import legacy_metrics_module

    legacy_metrics_module()  # resolving !function imports the task's utils.py
    entry = manager.task_index[task]
    try:
        return load_yaml(entry.yaml_path, resolve_func=True, recursive=True)
    except Exception as e:  # noqa: BLE001 - e.g. its utils.py imports what this environment lacks
        version = importlib.metadata.version("lm_eval")
        raise AuraError(M("task_broken", task=task, version=version, error=f"{type(e).__name__}: {e}")) from e


def eval_split(cfg: dict) -> str:
    """The split lm-eval scores: the test split, else the validation split."""
    return cfg.get("test_split") or cfg.get("validation_split")


def fewshot_split(cfg: dict) -> str | None:
    """The split lm-eval draws few-shot examples from (its own order: fewshot, training, validation, test)."""
    return cfg.get("fewshot_split") or cfg.get("training_split") or cfg.get("validation_split") or cfg.get("test_split")


def dataset_dir(root: Path, cfg: dict) -> Path:
    """Where a task's dataset lives in a ``--suite-data`` folder: ``ROOT/<dataset_path>/<dataset_name>``."""
    return Path(root) / str(cfg["dataset_path"]) / str(cfg.get("dataset_name") or "default")


def needed_splits(cfg: dict, num_fewshot: int) -> list[str]:
    needed = [eval_split(cfg)]
    shots = fewshot_split(cfg) if num_fewshot else None
    return needed + ([shots] if shots and shots not in needed else [])


def _split_file(folder: Path, split: str) -> Path | None:
    for ext in ("jsonl", "parquet"):
        if (folder / f"{split}.{ext}").is_file():
            return folder / f"{split}.{ext}"
    return None


def local_config(cfg: dict, item: SuiteTask, *, root: Path, suite: str) -> dict:
    """``cfg`` reading its splits from ``root`` (``datasets``' json or parquet builder on the hub's own
    columns): the splits it needs must be there; splits it names but does not need are dropped when absent."""
    folder = dataset_dir(root, cfg)
    files = {}
    for split in needed_splits(cfg, item.num_fewshot):
        found = _split_file(folder, split)
        if found is None:
            raise AuraError(
                M(
                    "missing_data",
                    dir=root,
                    dataset=f"{cfg['dataset_path']}" + (f" ({cfg['dataset_name']})" if cfg.get("dataset_name") else ""),
                    task=item.task,
                    split=split,
                    path=folder / f"{split}.jsonl",
                    suite=suite,
                )
            )
        files[split] = str(found)
    out = dict(cfg)
    for key in ("training_split", "validation_split", "test_split", "fewshot_split"):
        split = cfg.get(key)
        if split and split not in files:
            found = _split_file(folder, split)
            if found is None:
                out[key] = None  # named by the task, absent here, and not needed by this suite's setting
            else:
                files[split] = str(found)
    kinds = {Path(f).suffix for f in files.values()}
    if len(kinds) > 1:  # datasets reads one dataset with one builder
        raise AuraError(M("mixed", dir=folder, task=item.task))
    out["dataset_path"] = "parquet" if kinds == {".parquet"} else "json"
    out["dataset_name"] = None
    out["dataset_kwargs"] = {"data_files": files}
    return out


def task_specs(manager, tasks: tuple[SuiteTask, ...], *, suite: str, data_dir: str = "") -> list[dict]:
    """lm-eval task configs for ``tasks``: each full config with the suite's ``num_fewshot`` (and, with
    ``data_dir``, reading from that folder). Full configs, not names with overrides: lm-eval versions differ
    in how they merge an override into a registered task."""
    root = Path(data_dir) if data_dir else None
    if root is not None and not root.is_dir():
        raise AuraError(M("no_dir", dir=root))
    specs = []
    for item in tasks:
        cfg = task_config(manager, item.task)
        if root is not None:
            cfg = local_config(cfg, item, root=root, suite=suite)
        specs.append({**cfg, "task": item.task, "num_fewshot": item.num_fewshot})
    return specs


def expected_files(manager, name: str) -> list[tuple[str, str | None, str, str]]:
    """(dataset_path, dataset_name, split, relative path) of every file a ``--suite-data`` folder needs."""
    out = []
    for item in suite_tasks(name):
        cfg = task_config(manager, item.task)
        for split in needed_splits(cfg, item.num_fewshot):
            rel = dataset_dir(Path("."), cfg) / f"{split}.jsonl"
            row = (str(cfg["dataset_path"]), cfg.get("dataset_name"), split, str(rel))
            if row not in out:
                out.append(row)
    return out


# ---------------------------------------------------------------------------------------------- running


@dataclass(frozen=True)
class SuitePlan:
    """A standard suite ready to run: its tasks, lm-eval's configs for them and the TaskManager that knows them.
    Made once, before any model is loaded (a missing ``--suite-data`` file is refused first)."""

    name: str
    tasks: tuple[SuiteTask, ...]
    specs: tuple[dict, ...]
    manager: object
    data_dir: str = ""


def plan_suite(name: str, *, data_dir: str = "", limit: int = 0) -> SuitePlan:
    from aura.evaluation.harness import task_manager

    tasks = suite_tasks(name, limit=limit)
    manager = task_manager([t.task for t in tasks], [])
    specs = task_specs(manager, tasks, suite=name, data_dir=data_dir)
    if not data_dir:  # the hub's data: refused at once when it is neither cached nor reachable
        from aura.evaluation.harness import check_data_reachable

        check_data_reachable(manager, specs, hint=M("hint"))
    return SuitePlan(name, tasks, tuple(specs), manager, data_dir)


def run_suite(model, tok, plan: SuitePlan, *, batch_size: int = 8, max_length: int = 0, seed: int = 0) -> dict:
    """lm-eval's scores of the suite on an already-loaded model: ``run_tasks``'s output whose rows are the
    suite's metric of each task, each with ``suite``, ``num_fewshot`` (lm-eval's ``n-shot``) and ``limit``.
    The pipeline's eval stage reaches it through ``aura.evaluation.evaluate.evaluate``."""
    from aura.evaluation.harness import run_tasks

    out = run_tasks(
        model,
        tok,
        list(plan.specs),
        limits=[t.limit for t in plan.tasks],
        batch_size=batch_size,
        max_length=max_length,
        manager=plan.manager,
        offline_hint="" if plan.data_dir else M("hint"),
        seed=seed,
    )
    found = {(r["task"], r["metric"]): r for r in out["rows"]}
    rows = []
    for t in plan.tasks:
        row = found.get((t.task, t.row_metric))
        if row is None:  # the suite names a metric this lm-eval version does not report
            version = importlib.metadata.version("lm_eval")
            raise AuraError(M("no_metric", task=t.task, version=version, metric=t.row_metric, suite=plan.name))
        rows.append({**row, "suite": plan.name, "limit": t.limit})  # num_fewshot: what lm-eval says it used
    return {**out, "rows": rows}


def download_suite(name: str, dest: str) -> list[Path]:
    """Fill a ``--suite-data`` folder with every split suite ``name`` reads (``datasets``, from the hub), as
    parquet: the hub's schema travels with the file (JSON Lines would guess each split's column types on its
    own, and a column empty in one split and not in another would not load)."""
    import io

    from aura.core.atomic import atomic_write_bytes
    from aura.core.console import info
    from aura.evaluation.harness import task_manager
    from aura.evaluation.task_data import hub_unreachable, offline_var

    offline = offline_var()
    host = None if offline else hub_unreachable()
    if offline or host:
        raise AuraError(M("download_offline", why=offline or host, dir=dest))
    import datasets

    manager = task_manager([t.task for t in suite_tasks(name)], [])
    written = []
    for path, config, split, rel in expected_files(manager, name):
        target = (Path(dest) / rel).with_suffix(".parquet")
        rows = datasets.load_dataset(path, config, split=split)
        buf = io.BytesIO()
        rows.to_parquet(buf)
        atomic_write_bytes(target, buf.getvalue())
        info(M("downloaded", path=target, n=len(rows)))
        written.append(target)
    return written
