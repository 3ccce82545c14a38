"""The curation pipeline as datatrove stages, and how they run (local, Slurm, Ray, task ranges).

Stages, each a datatrove executor with its own logging folder (``completions/`` makes it resumable):

1. ``filter`` (one task per input share): read -> extract (trafilatura) -> ftfy -> language ID ->
   Spanish boilerplate lines -> Gopher repetition -> Gopher quality -> C4 -> FineWeb -> Spanish
   statistics -> ``work/filtered`` [-> exact-dedup signatures];
2. ``exact_find`` (1 task): datatrove's ExactFindDedups over all signatures;
3. ``exact_filter`` (when MinHash follows): drop exact copies -> ``work/deduped`` -> MinHash signatures;
4. ``minhash_buckets`` (``buckets`` tasks) and 5. ``minhash_cluster`` (1 task): datatrove's MinHash;
6. ``final``: [exact filter] -> MinHash filter -> PII masking -> ``work/final`` (published at the end).

Exact dedup runs first so that MinHash never keeps a copy that exact dedup removed. A ``Meter`` after
each stage counts documents and characters for the report.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import datatrove.executor.base as executor_base
from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.dedup.exact_dedup import (
    ExactDedupConfig,
    ExactDedupFilter,
    ExactDedupSignature,
    ExactFindDedups,
)
from datatrove.pipeline.dedup.minhash import (
    MinhashConfig,
    MinhashDedupBuckets,
    MinhashDedupCluster,
    MinhashDedupFilter,
)
from datatrove.pipeline.filters import (
    C4QualityFilter,
    FineWebQualityFilter,
    GopherQualityFilter,
    GopherRepetitionFilter,
)
from datatrove.pipeline.formatters import FTFYFormatter
from datatrove.pipeline.writers import ParquetWriter
from datatrove.utils.hashing import HashConfig
from loguru import logger

from aura.data.curate.langid import LanguageIdFilter
from aura.data.curate.pii import SpanishPIIFormatter
from aura.data.curate.readers import CurateReader, InputFile
from aura.data.curate.spanish import (
    GOPHER_STOP_WORDS,
    TERMINAL,
    TOKENIZER,
    SpanishBoilerplateLines,
    SpanishTextFilter,
)
from aura.data.curate.steps import (
    HtmlExtractor,
    Meter,
    MinhashSignature,
    SampleWriter,
    ShardReader,
    ShardWriter,
)
from aura.text.readers import ReaderOptions

VERBOSE_ENV = "AURA_CURATE_VERBOSE"


def _task_logger(logging_dir, rank: int, local_rank: int = 0, node_rank: int = -1):
    """datatrove's task logger without the console sink: Aura prints its own progress and summary; the
    full log of every task stays in ``<stage>/logs/task_NNNNN.log``."""
    logger.remove()
    logfile = logging_dir.open(f"logs/task_{rank:05d}.log", "w")
    fmt = "{time:YYYY-MM-DD HH:mm:ss.SSS} | {level: <8} | {name}:{function}:{line} - {message}"
    if os.environ.get(VERBOSE_ENV) == "1" and local_rank == 0:
        logger.add(sys.stderr, level="INFO", format=fmt)
    logger.add(logfile, level="DEBUG", format=fmt, colorize=False)
    return logfile


def quiet_logger() -> None:
    """Only Aura's messages on the console (datatrove's INFO lines go to the task logs)."""
    logger.remove()
    if os.environ.get(VERBOSE_ENV) == "1":
        logger.add(sys.stderr, level="INFO")


def _close_task_logger(logfile) -> None:
    logger.complete()
    quiet_logger()
    logfile.close()


# Set on import, so in every process that unpickles these stages (local workers, Ray workers).
executor_base.add_task_logger = _task_logger
executor_base.close_task_logger = _close_task_logger


class QuietLocalExecutor(LocalPipelineExecutor):
    """datatrove's local executor; being defined here, it brings this module (and its quiet task logger)
    into every worker process that unpickles it, whatever the stage's steps are."""


@dataclass
class Options:
    """What the stages need, resolved from the command's config."""

    work: Path
    files: list[InputFile]
    root: str
    reader: ReaderOptions
    tasks: int
    extract: bool = True
    extract_timeout: float = 10.0
    ftfy: bool = True
    langid: bool = True
    languages: tuple[str, ...] = ("es",)
    lang_threshold: float = 0.5
    quality: bool = True
    min_words: int = 50
    min_sentences: int = 3
    exact_dedup: bool = True
    minhash: bool = True
    ngrams: int = 5
    buckets: int = 20
    hashes_per_bucket: int = 5
    pii: bool = True
    output_format: str = "jsonl"
    sample: int = 0
    max_documents: int = 0  # documents read from all the inputs (0: all)
    decontaminate: tuple[str, ...] = ()  # eval sets whose n-grams drop a document (aura.data.contamination)


@dataclass
class Stage:
    name: str
    pipeline: list
    tasks: int
    single: bool = False  # stages that must run as one task (on node 0 when several boxes share the run)


def _sampler(o: Options, reason: str):
    if o.sample <= 0:
        return None
    return SampleWriter(str(o.work / "samples"), per_reason=o.sample, default_reason=reason)


def _quality_steps(o: Options) -> list[tuple[str, object]]:
    tok = TOKENIZER
    return [
        ("boilerplate", SpanishBoilerplateLines(exclusion_writer=_sampler(o, "boilerplate"))),
        ("gopher_repetition", GopherRepetitionFilter(language=tok, exclusion_writer=_sampler(o, "gopher_rep"))),
        (
            "gopher_quality",
            GopherQualityFilter(
                min_doc_words=o.min_words,
                stop_words=list(GOPHER_STOP_WORDS),
                max_avg_word_length=12,
                max_non_alpha_words_ratio=0.65,
                language=tok,
                exclusion_writer=_sampler(o, "gopher"),
            ),
        ),
        (
            "c4",
            C4QualityFilter(
                filter_no_terminal_punct=False,
                min_num_sentences=o.min_sentences,
                language=tok,
                exclusion_writer=_sampler(o, "c4"),
            ),
        ),
        ("fineweb", FineWebQualityFilter(stop_chars=TERMINAL, language=tok, exclusion_writer=_sampler(o, "fineweb"))),
        ("spanish", SpanishTextFilter(exclusion_writer=_sampler(o, "spanish"))),
    ]


def _exact_config() -> ExactDedupConfig:
    return ExactDedupConfig(content_getter=_content)


def _content(doc) -> bytes:
    return doc.text.encode("utf-8")


def parquet_row(writer, document) -> dict:
    """A document as a Parquet row of fixed columns: text, id and its metadata as JSON text. The records' own
    fields differ between inputs (a JSONL's url, a CSV's columns, FineWeb's dump...), and a struct column
    needs one schema for the whole file; datatrove's readers parse the JSON text back into metadata."""
    return {
        "text": document.text,
        "id": document.id,
        "metadata": json.dumps(document.metadata, ensure_ascii=False, sort_keys=True),
    }


def _filter_steps(o: Options) -> list[tuple[str, object]]:
    """The per-document steps of the first stage, each with the name its meter counts under: extraction, text
    repair, language, quality, decontamination; disabled ones left out."""
    steps: list[tuple[str, object]] = []
    if o.extract:
        steps.append(("extract", HtmlExtractor(timeout=o.extract_timeout)))
    if o.ftfy:
        steps.append(("ftfy", FTFYFormatter()))
    if o.langid:
        steps.append(("langid", LanguageIdFilter(o.languages, o.lang_threshold, exclusion_writer=_sampler(o, "lang"))))
    if o.quality:
        steps += _quality_steps(o)
    if o.decontaminate:
        from aura.data.curate.decontaminate import EvalDecontFilter

        steps.append(("decontaminate", EvalDecontFilter(o.decontaminate, exclusion_writer=_sampler(o, "contaminated"))))
    return steps


def build_stages(o: Options) -> list[Stage]:
    """The executors' pipelines for ``o``, in order; disabled steps are left out."""
    work = o.work
    minhash_cfg = MinhashConfig(
        n_grams=o.ngrams,
        num_buckets=o.buckets,
        hashes_per_bucket=o.hashes_per_bucket,
        hash_config=HashConfig(precision=64, hash_fc="xxhash"),
    )
    first: list = [CurateReader(o.files, root=o.root, options=o.reader, limit=o.max_documents or -1), Meter("read")]
    for name, step in _filter_steps(o):
        first += [step, Meter(name)]
    first.append(ShardWriter(str(work / "filtered")))
    if o.exact_dedup:
        first.append(ExactDedupSignature(str(work / "exact" / "sigs"), config=_exact_config()))
    stages = [Stage("filter", first, o.tasks)]
    if o.exact_dedup:
        stages.append(
            Stage(
                "exact_find",
                [ExactFindDedups(str(work / "exact" / "sigs"), str(work / "exact" / "dups"), config=_exact_config())],
                1,
                single=True,
            )
        )
    exact_filter = [
        ExactDedupFilter(
            str(work / "exact" / "dups"), config=_exact_config(), exclusion_writer=_sampler(o, "exact_duplicate")
        ),
        Meter("exact_dedup"),
    ]
    final_in = work / "filtered"
    final: list = []
    if o.minhash:
        middle: list = [ShardReader(str(final_in))]
        if o.exact_dedup:
            middle += exact_filter
        middle += [
            ShardWriter(str(work / "deduped")),
            MinhashSignature(str(work / "minhash" / "sigs"), config=minhash_cfg, language=TOKENIZER),
        ]
        stages += [
            Stage("minhash_signatures", middle, o.tasks),
            Stage(
                "minhash_buckets",
                [
                    MinhashDedupBuckets(
                        str(work / "minhash" / "sigs"), str(work / "minhash" / "buckets"), config=minhash_cfg
                    )
                ],
                o.buckets,
            ),
            Stage(
                "minhash_cluster",
                [
                    MinhashDedupCluster(
                        str(work / "minhash" / "buckets"), str(work / "minhash" / "remove"), config=minhash_cfg
                    )
                ],
                1,
                single=True,
            ),
        ]
        final_in = work / "deduped"
        final += [
            MinhashDedupFilter(str(work / "minhash" / "remove"), exclusion_writer=_sampler(o, "near_duplicate")),
            Meter("minhash_dedup"),
        ]
    elif o.exact_dedup:
        final += exact_filter
    if o.pii:
        final += [SpanishPIIFormatter(), Meter("pii")]
    if o.output_format == "parquet":
        final.append(ParquetWriter(str(work / "final"), output_filename="${rank}.parquet", adapter=parquet_row))
    else:
        final.append(ShardWriter(str(work / "final")))
    stages.append(Stage("final", [ShardReader(str(final_in)), *final], o.tasks))
    return stages


# ---------------------------------------------------------------------------------------------------
# Running the stages


@dataclass
class Runner:
    """How stages run: ``local`` (``workers`` processes; ``node_rank``/``nnodes`` split every stage's
    tasks between boxes that share the output directory), ``slurm`` or ``ray``."""

    executor: str = "local"
    workers: int = 1
    node_rank: int = 0
    nnodes: int = 1
    poll_s: float = 5.0
    slurm: dict = field(default_factory=dict)
    ray: dict = field(default_factory=dict)

    def task_range(self, stage: Stage) -> tuple[int, int]:
        """(first task, number of tasks) this box runs."""
        if stage.single:
            return (0, 1) if self.node_rank == 0 else (0, 0)
        per, extra = divmod(stage.tasks, self.nnodes)
        start = self.node_rank * per + min(self.node_rank, extra)
        return start, per + (1 if self.node_rank < extra else 0)

    def make(self, stage: Stage, logs: Path, depends=None):
        if self.executor == "slurm":
            from datatrove.executor import SlurmPipelineExecutor

            slurm = dict(self.slurm)
            activate = Path(sys.prefix) / "bin" / "activate"  # the jobs run datatrove from this environment
            if not slurm.get("env_command") and activate.is_file():
                slurm["venv_path"] = str(activate)
            return SlurmPipelineExecutor(
                stage.pipeline,
                tasks=stage.tasks,
                logging_dir=str(logs),
                job_name=f"aura-curate-{stage.name}",
                depends=depends,
                **slurm,
            )
        if self.executor == "ray":
            from datatrove.executor.ray import RayPipelineExecutor

            return RayPipelineExecutor(
                stage.pipeline,
                tasks=stage.tasks,
                logging_dir=str(logs),
                workers=self.workers if self.workers > 0 else -1,
                **self.ray,
            )
        start, count = self.task_range(stage)
        return QuietLocalExecutor(
            stage.pipeline,
            tasks=stage.tasks,
            workers=max(1, min(self.workers, count or 1)),
            logging_dir=str(logs),
            local_tasks=count,
            local_rank_offset=start,
            start_method="forkserver",
        )


def incomplete(logs: Path, tasks: int) -> int:
    done = logs / "completions"
    return sum(not (done / f"{r:05d}").exists() for r in range(tasks))


def run_stages(
    stages: list[Stage], work: Path, runner: Runner, *, on_stage: Callable[[Stage, int], None] | None = None
) -> None:
    """Runs the stages in order. Locally and across boxes, a stage starts once every task of the one
    before it is complete (``completions/``); Slurm chains its jobs with dependencies instead."""
    previous = None
    if runner.executor == "ray":
        import datatrove.executor.ray as ray_executor
        import ray

        ray_executor.add_task_logger, ray_executor.close_task_logger = _task_logger, _close_task_logger
        address = runner.ray.pop("address", "") or None
        if not ray.is_initialized():  # an address joins a running cluster; none starts a local one
            ray.init(address=address, log_to_driver=False, **({"num_cpus": runner.workers} if address is None else {}))
    for i, stage in enumerate(stages):
        logs = work / "logs" / stage.name
        if runner.executor == "slurm":
            previous = runner.make(stage, logs, depends=previous)
            if i == len(stages) - 1:
                previous.run()  # launching the last job launches its dependencies
            continue
        if i and runner.executor == "local" and runner.nnodes > 1:
            before = work / "logs" / stages[i - 1].name
            while incomplete(before, stages[i - 1].tasks):
                time.sleep(runner.poll_s)
        if on_stage:
            on_stage(stage, incomplete(logs, stage.tasks))
        if incomplete(logs, stage.tasks):
            runner.make(stage, logs).run()
    if runner.executor == "local" and runner.nnodes > 1 and runner.node_rank == 0:
        while incomplete(work / "logs" / stages[-1].name, stages[-1].tasks):
            time.sleep(runner.poll_s)
