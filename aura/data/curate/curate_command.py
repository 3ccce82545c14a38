"""``aura data curate``: raw crawl (WARC/WET, HTML, JSONL, parquet, txt) or a Hugging Face dataset (FineWeb-2's
``spa_Latn`` streamed from the hub) -> clean Spanish JSONL.gz shards, each document with its input's ``id`` and
other fields (``url``...) under ``metadata``.

Output directory layout::

    OUTPUT_DIR/00000.jsonl.gz ...   the curated shards (``aura data prepare OUTPUT_DIR`` reads them)
    OUTPUT_DIR/.curate/             options.json, report.json, report.png, removed/<reason>.jsonl,
                                    work/ (intermediate shards, signatures, datatrove logs)

The shards appear only once every stage has finished, so an interrupted run never leaves a directory
that looks complete; a re-run with the same options completes the unfinished tasks only.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from aura.core import console
from aura.core.atomic import atomic_write_json, read_json
from aura.core.config import arg
from aura.core.errors import AuraError
from aura.core.i18n import Messages
from aura.text.readers import ReaderArgs, ReaderOptions

M = Messages(
    "curate",
    {
        "no_inputs": (
            "Indica al menos una entrada (WARC/WET, HTML, jsonl, parquet, txt...) o un dataset con "
            "--hf-dataset (p. ej. --hf-dataset HuggingFaceFW/fineweb-2 --hf-config spa_Latn).",
            "Give at least one input (WARC/WET, HTML, jsonl, parquet, txt...) or a dataset with --hf-dataset "
            "(e.g. --hf-dataset HuggingFaceFW/fineweb-2 --hf-config spa_Latn).",
        ),
        "limit": (
            "Se leen como mucho {n:documento|documentos} (--max-documents).",
            "At most {n:document is|documents are} read (--max-documents).",
        ),
        "missing": (
            "Falta {name}, que 'aura data curate' necesita. Instálalo con: pip install 'aura-llm[curate]' "
            "(o 'aura-llm[curate-ray]' para --executor ray).",
            "{name} is missing, and 'aura data curate' needs it. Install it with: pip install "
            "'aura-llm[curate]' (or 'aura-llm[curate-ray]' for --executor ray).",
        ),
        "bad_range": (
            "--{name} debe estar entre {low} y {high} (recibido {value}).",
            "--{name} must be between {low} and {high} (got {value}).",
        ),
        "bad_language": (
            "Idioma desconocido en --languages: '{lang}'. Usa códigos ISO 639-1 como es, ca, gl, eu.",
            "Unknown language in --languages: '{lang}'. Use ISO 639-1 codes such as es, ca, gl, eu.",
        ),
        "bad_env": (
            "La variable de entorno {name}={value} no es válida: {why}.",
            "The environment variable {name}={value} is not valid: {why}.",
        ),
        "env_int": ("debe ser un entero no negativo", "it must be a non-negative integer"),
        "env_rank": ("NODE_RANK debe ser menor que NNODES", "NODE_RANK must be smaller than NNODES"),
        "no_partition": ("--executor slurm necesita --slurm-partition.", "--executor slurm needs --slurm-partition."),
        "not_curate_dir": (
            "{path} ya contiene archivos que no son de 'aura data curate'. Elige un --output-dir vacío o nuevo.",
            "{path} already holds files that are not from 'aura data curate'. Choose an empty or new --output-dir.",
        ),
        "different": (
            "{path} tiene una depuración con otras entradas u opciones. Usa --overwrite para empezar de "
            "cero o elige otro --output-dir.",
            "{path} holds a curation with other inputs or options. Use --overwrite to start from scratch "
            "or choose another --output-dir.",
        ),
        "start": (
            "Depurando {files:archivo|archivos} en {tasks:tarea|tareas} con {workers:proceso|procesos} ({executor}).",
            "Curating {files:file|files} in {tasks:task|tasks} with {workers:worker|workers} ({executor}).",
        ),
        "stage": (
            "Etapa {stage}: {todo} de {tasks:tarea|tareas} pendientes.",
            "Stage {stage}: {todo} of {tasks:task|tasks} to run.",
        ),
        "resume": (
            "Se reanuda la depuración anterior en {path}: solo se ejecutan las tareas sin terminar.",
            "Resuming the previous curation in {path}: only unfinished tasks run.",
        ),
        "failed": (
            "La etapa {stage} ha fallado: {err}. Registro completo: {logs}",
            "Stage {stage} failed: {err}. Full log: {logs}",
        ),
        "slurm_submitted": (
            "Trabajos enviados a Slurm. Cuando terminen, vuelve a ejecutar el mismo comando "
            "(con --executor local) para publicar los shards y el informe.",
            "Jobs submitted to Slurm. When they finish, run the same command again (with "
            "--executor local) to publish the shards and the report.",
        ),
        "node_done": (
            "Nodo {rank} de {nnodes}: tareas terminadas; el nodo 0 publica los shards y el informe.",
            "Node {rank} of {nnodes}: tasks done; node 0 publishes the shards and the report.",
        ),
        "done": (
            "{docs:documento|documentos} ({chars:carácter|caracteres}) en {shards:shard|shards} en {path} ({secs}).",
            "{docs:document|documents} ({chars:character|characters}) in {shards:shard|shards} in {path} ({secs}).",
        ),
        "report": ("Informe: {json} y {png}.", "Report: {json} and {png}."),
        "samples": (
            "Muestras de documentos quitados: {path} ({n:motivo|motivos}).",
            "Samples of removed documents: {path} ({n:reason|reasons}).",
        ),
        "next": (
            "Siguiente paso: aura data prepare {path} --tokenizer ...",
            "Next step: aura data prepare {path} --tokenizer ...",
        ),
    },
)

STATE = ".curate"


@dataclass
class CurateConfig(ReaderArgs):
    inputs: list[str] = arg(
        [],
        positional=True,
        es="Entradas: archivos, directorios o patrones (WARC/WET, HTML, "
        "txt, jsonl, json, csv, tsv, parquet; también .gz/.zst).",
        en="Inputs: files, directories or patterns (WARC/WET, HTML, txt, jsonl, json, csv, "
        "tsv, parquet; also .gz/.zst).",
    )
    output_dir: str = arg(
        "data/curated",
        es="Directorio de salida (shards NNNNN.jsonl.gz).",
        en="Output directory (NNNNN.jsonl.gz shards).",
    )
    hf_dataset: str = arg(
        "",
        es="Dataset de Hugging Face: un nombre del hub, leído en streaming (p. ej. "
        "HuggingFaceFW/fineweb-2 con --hf-config spa_Latn), o un directorio save_to_disk.",
        en="Hugging Face dataset: a hub name, streamed (e.g. HuggingFaceFW/fineweb-2 with --hf-config "
        "spa_Latn), or a save_to_disk directory.",
    )
    hf_config: str = arg(
        "",
        es="Configuración del dataset (p. ej. spa_Latn, el español de FineWeb-2).",
        en="Dataset configuration (e.g. spa_Latn, FineWeb-2's Spanish).",
    )
    split: str = arg("train", es="Partición del dataset de Hugging Face.", en="Hugging Face dataset split.")
    max_documents: int = arg(
        0,
        es="Documentos que se leen como mucho entre todas las entradas, repartidos entre "
        "las tareas (0 = todos): lo que un entrenamiento necesita de un dataset enorme.",
        en="Most documents read from all the inputs, split between the tasks (0 = all): what a "
        "training run needs from a huge dataset.",
    )
    output_format: str = arg("jsonl", choices=("jsonl", "parquet"), es="Formato de los shards.", en="Shard format.")
    extract: bool = arg(
        True,
        es="Extrae el texto del HTML con trafilatura (archivos HTML, respuestas WARC y registros "
        "cuyo texto es una página que empieza por <!doctype html o <html).",
        en="Extract text from HTML with trafilatura (HTML files, WARC responses and records whose "
        "text is a page starting with <!doctype html or <html).",
    )
    extract_timeout: float = arg(
        10.0, es="Segundos máximos de extracción por documento.", en="Maximum extraction seconds per document."
    )
    ftfy: bool = arg(True, es="Repara el Unicode dañado (ftfy).", en="Repair broken Unicode (ftfy).")
    langid: bool = arg(
        True,
        es="Identifica el idioma (py3langid, sin descargas) y filtra por --languages.",
        en="Identify the language (py3langid, no download) and filter by --languages.",
    )
    languages: str = arg(
        "es",
        es="Idiomas que se conservan, separados por comas (p. ej. es,ca,gl,eu).",
        en="Languages to keep, comma-separated (e.g. es,ca,gl,eu).",
    )
    lang_threshold: float = arg(0.5, es="Probabilidad mínima del idioma.", en="Minimum language probability.")
    quality: bool = arg(
        True,
        es="Filtros de calidad (Gopher, C4, FineWeb, estadística del español).",
        en="Quality filters (Gopher, C4, FineWeb, Spanish statistics).",
    )
    min_words: int = arg(50, es="Palabras mínimas por documento (Gopher).", en="Minimum words per document (Gopher).")
    min_sentences: int = arg(
        3,
        es="Frases mínimas por documento tras quitar líneas (C4).",
        en="Minimum sentences per document after line removal (C4).",
    )
    exact_dedup: bool = arg(True, es="Quita las copias exactas.", en="Remove exact copies.")
    minhash: bool = arg(
        True, es="Quita los casi duplicados (MinHash de datatrove).", en="Remove near duplicates (datatrove's MinHash)."
    )
    minhash_buckets: int = arg(
        20, es="Bandas de MinHash (más bandas: más sensible).", en="MinHash bands (more bands: more sensitive)."
    )
    minhash_hashes: int = arg(
        5, es="Hashes por banda de MinHash (más: más estricto).", en="Hashes per MinHash band (more: stricter)."
    )
    pii: bool = arg(
        True, es="Enmascara correos, teléfonos, IP, DNI/NIE e IBAN.", en="Mask e-mail, phones, IPs, DNI/NIE and IBAN."
    )
    decontaminate: list[str] = arg(
        [],
        es="Quita los documentos que comparten un 13-grama con un conjunto de "
        "evaluación (aura-es: la batería de Aura), como datatrove.",
        en="Drop the documents that share a 13-gram with an eval set (aura-es: Aura's suite), as datatrove does.",
        metavar="aura-es",
    )
    sample: int = arg(
        0,
        es="Guarda N documentos quitados por motivo para revisarlos.",
        en="Keep N removed documents per reason to look at.",
    )
    workers: int = arg(
        1, es="Procesos en esta máquina (0 = todos los núcleos).", en="Processes on this machine (0 = all cores)."
    )
    tasks: int = arg(
        0,
        es="Tareas en que se reparte la entrada (0 = una por archivo, hasta 256). No cambia "
        "con --workers: la salida es la misma.",
        en="Tasks the input is split into (0 = one per file, up to 256). Independent of "
        "--workers: the output is the same.",
    )
    executor: str = arg("local", choices=("local", "slurm", "ray"), es="Dónde se ejecuta.", en="Where it runs.")
    slurm_partition: str = arg("", es="Partición de Slurm.", en="Slurm partition.")
    slurm_time: str = arg("24:00:00", es="Tiempo máximo por tarea de Slurm.", en="Time limit per Slurm task.")
    slurm_cpus: int = arg(1, es="CPU por tarea de Slurm.", en="CPUs per Slurm task.")
    slurm_mem_gb: int = arg(2, es="GB de memoria por CPU en Slurm.", en="GB of memory per CPU on Slurm.")
    slurm_qos: str = arg("normal", es="QOS de Slurm.", en="Slurm QOS.")
    slurm_max_running: int = arg(
        0,
        es="Tareas de cada etapa que Slurm ejecuta a la vez (el %N del array; 0 = sin límite).",
        en="Tasks of each stage Slurm runs at once (the array's %N; 0 = no limit).",
    )
    ray_address: str = arg(
        "",
        es="Dirección del clúster Ray (vacío: uno local; 'auto': el ya iniciado).",
        en="Ray cluster address (empty: a local one; 'auto': the running one).",
    )
    ray_cpus: int = arg(1, es="CPU por tarea de Ray.", en="CPUs per Ray task.")
    overwrite: bool = arg(
        False,
        es="Borra una depuración anterior en --output-dir y empieza de cero.",
        en="Delete a previous curation in --output-dir and start from scratch.",
        deprecated=["--force"],
    )

    def __post_init__(self):
        if not self.inputs and not self.hf_dataset:
            raise AuraError(M("no_inputs"))
        for name, value, low, high in (
            ("lang-threshold", self.lang_threshold, 0.0, 1.0),
            ("workers", self.workers, 0, 4096),
            ("tasks", self.tasks, 0, 100_000),
            ("sample", self.sample, 0, 100_000),
            ("max-documents", self.max_documents, 0, 10**15),
            ("min-words", self.min_words, 0, 10**6),
            ("min-sentences", self.min_sentences, -1, 10**6),
            ("minhash-buckets", self.minhash_buckets, 1, 1000),
            ("minhash-hashes", self.minhash_hashes, 1, 100),
            ("extract-timeout", self.extract_timeout, 0.1, 3600),
            ("slurm-max-running", self.slurm_max_running, 0, 100_000),
        ):
            if not low <= value <= high:
                raise AuraError(M("bad_range", name=name, low=low, high=high, value=value))
        if self.decontaminate:  # an unknown eval set is refused before anything runs
            from aura.data.contamination import eval_items

            for name in self.decontaminate:
                eval_items(name, limit=1)
        if self.executor == "slurm" and not self.slurm_partition:
            raise AuraError(M("no_partition"))

    def language_list(self) -> tuple[str, ...]:
        from aura.data.curate.langid import (
            known_languages,  # the dependencies are an extra: checked first
        )

        langs = tuple(x.strip().lower() for x in self.languages.split(",") if x.strip())
        known = set(known_languages())
        for lang in langs or ("",):
            if lang not in known:
                raise AuraError(M("bad_language", lang=lang))
        return langs


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "")
    if not raw.strip():
        return default
    if not raw.strip().isdigit():
        raise AuraError(M("bad_env", name=name, value=raw, why=M("env_int")))
    return int(raw)


def _fingerprint(cfg: CurateConfig, files, tasks: int) -> dict:
    keep = {
        k: v
        for k, v in asdict(cfg).items()
        if k
        not in (
            "inputs",
            "output_dir",
            "workers",
            "executor",
            "overwrite",
            "slurm_partition",
            "slurm_time",
            "slurm_cpus",
            "slurm_mem_gb",
            "slurm_qos",
            "ray_address",
            "ray_cpus",
            "sample",
        )
    }
    return {
        "options": keep,
        "tasks": tasks,
        "inputs": [
            [f.path, cfg.hf_config, cfg.split]
            if f.kind == "hf_hub"
            else [f.path, _tree_bytes(f.path), int(os.path.getmtime(f.path))]
            for f in files
        ],
    }


def _tree_bytes(path: str) -> int:
    p = Path(path)
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.is_dir() else p.stat().st_size


def _prepare_dir(out: Path, fingerprint: dict, force: bool) -> bool:
    """Creates/validates the output directory; True when an earlier run with the same options resumes."""
    state = out / STATE
    if force and state.is_dir():
        for shard in out.glob("[0-9][0-9][0-9][0-9][0-9].*"):
            shard.unlink()
        shutil.rmtree(state)
    if out.exists() and any(out.iterdir()) and not state.is_dir():
        raise AuraError(M("not_curate_dir", path=out))
    saved = state / "options.json"
    if saved.is_file():
        if read_json(saved) != json.loads(json.dumps(fingerprint)):
            raise AuraError(M("different", path=out))
        return True
    state.mkdir(parents=True, exist_ok=True)
    atomic_write_json(saved, fingerprint)
    return False


def _publish(work: Path, out: Path) -> list[Path]:
    """Moves the finished shards into the output directory (empty ones are dropped)."""
    for shard in sorted((work / "final").glob("[0-9][0-9][0-9][0-9][0-9].*")):
        if shard.name.endswith(".gz"):
            with gzip.open(shard, "rb") as fh:
                if not fh.read(1):
                    shard.unlink()
                    continue
        os.replace(shard, out / shard.name)
    # datatrove's ParquetWriter names a task's files PART_RANK.parquet (a new part every 5 GB): RANK.parquet,
    # then RANK.PART.parquet, the names the JSONL shards have
    for shard in sorted((work / "final").glob("[0-9][0-9][0-9]_[0-9][0-9][0-9][0-9][0-9].parquet")):
        part, rank = shard.stem.split("_")
        os.replace(shard, out / (f"{rank}.parquet" if int(part) == 0 else f"{rank}.{part}.parquet"))
    return sorted(out.glob("[0-9][0-9][0-9][0-9][0-9].*"))


def _check_dependencies(executor: str) -> None:
    import importlib.util

    for module, name in (
        ("datatrove", "datatrove"),
        ("py3langid", "py3langid"),
        ("trafilatura", "trafilatura"),
        ("lxml_html_clean", "lxml_html_clean"),  # trafilatura cannot import without it
        ("warcio", "warcio"),
        ("ftfy", "ftfy"),
        ("magic", "python-magic"),
    ) + ((("ray", "ray"),) if executor == "ray" else ()):
        if importlib.util.find_spec(module) is None:
            raise AuraError(M("missing", name=name))


def curate(cfg: CurateConfig) -> dict:
    t0 = time.time()
    _check_dependencies(cfg.executor)
    # Imported here, after the check: the extra is optional and `aura --help` must work without it.
    from aura.data.curate.pipeline import build_stages, quiet_logger
    from aura.data.curate.readers import find_inputs

    languages = cfg.language_list()
    files = find_inputs(cfg.inputs) if cfg.inputs else []
    if cfg.hf_dataset:
        from aura.data.curate.readers import InputFile
        from aura.text.sources import hf_source

        files.append(InputFile(hf_source(cfg.hf_dataset).path, hf_source(cfg.hf_dataset).kind))
    tasks = cfg.tasks or min(len(files), 256)
    out = Path(cfg.output_dir)
    resumed = _prepare_dir(out, _fingerprint(cfg, files, tasks), cfg.overwrite)
    state = out / STATE
    work = state / "work"
    workers = cfg.workers or os.cpu_count() or 1
    nnodes, node_rank = _env_int("NNODES", 1), _env_int("NODE_RANK", 0)
    if node_rank >= max(nnodes, 1):
        raise AuraError(M("bad_env", name="NODE_RANK", value=node_rank, why=M("env_rank")))
    stages = build_stages(_options(cfg, files=files, tasks=tasks, work=work, languages=languages))
    if resumed:
        console.info(M("resume", path=out))
    console.info(M("start", files=len(files), tasks=tasks, workers=workers, executor=cfg.executor))
    if cfg.max_documents:
        console.info(M("limit", n=cfg.max_documents))
    quiet_logger()
    _run_stages(stages, work, _runner(cfg, workers=workers, node_rank=node_rank, nnodes=nnodes))
    if cfg.executor == "slurm":
        console.always(M("slurm_submitted"))
        return {}
    if node_rank != 0:
        console.always(M("node_done", rank=node_rank, nnodes=nnodes))
        return {}
    return _finish(cfg, out, stages=stages, options=_fingerprint(cfg, files, tasks)["options"], t0=t0)


def _options(cfg: CurateConfig, *, files: list, tasks: int, work: Path, languages: list[str]):
    """The pipeline's options from the command's: inputs, reading, filters, deduplication, output."""
    from aura.data.curate.pipeline import Options

    local = [f for f in files if f.kind != "hf_hub"]
    root = os.path.commonpath([os.path.dirname(os.path.abspath(f.path)) for f in local]) if local else ""
    return Options(
        work=work.resolve(),
        files=files,
        root=root,
        tasks=tasks,
        reader=ReaderOptions(
            text_field=cfg.text_field,
            doc_sep=cfg.doc_sep,
            encoding=cfg.encoding,
            errors=cfg.errors,
            max_record_bytes=cfg.max_record_bytes,
            hf_config=cfg.hf_config or None,
            split=cfg.split,
        ),
        max_documents=cfg.max_documents,
        extract=cfg.extract,
        extract_timeout=cfg.extract_timeout,
        ftfy=cfg.ftfy,
        langid=cfg.langid,
        languages=languages,
        lang_threshold=cfg.lang_threshold,
        quality=cfg.quality,
        min_words=cfg.min_words,
        min_sentences=cfg.min_sentences,
        exact_dedup=cfg.exact_dedup,
        minhash=cfg.minhash,
        buckets=cfg.minhash_buckets,
        hashes_per_bucket=cfg.minhash_hashes,
        pii=cfg.pii,
        output_format=cfg.output_format,
        sample=cfg.sample,
        decontaminate=tuple(cfg.decontaminate),
    )


def _runner(cfg: CurateConfig, *, workers: int, node_rank: int, nnodes: int):
    """Where the stages' tasks run: local processes, Slurm jobs or a Ray cluster."""
    from aura.data.curate.pipeline import Runner

    return Runner(
        executor=cfg.executor,
        workers=workers,
        node_rank=node_rank,
        nnodes=max(nnodes, 1),
        slurm={
            "partition": cfg.slurm_partition,
            "time": cfg.slurm_time,
            "cpus_per_task": cfg.slurm_cpus,
            "mem_per_cpu_gb": cfg.slurm_mem_gb,
            "qos": cfg.slurm_qos,
            "workers": cfg.slurm_max_running or -1,
        },
        ray={"address": cfg.ray_address, "cpus_per_task": cfg.ray_cpus},
    )


def _run_stages(stages: list, work: Path, runner) -> None:
    """Run the stages, each said as it starts; a bad input is the user's error, a failed task names its
    stage and the folder of its logs."""
    from aura.data.curate.pipeline import run_stages
    from aura.data.curate.readers import CurateInputError

    current = {"stage": stages[0]}

    def on_stage(stage, todo):
        current["stage"] = stage
        console.info(M("stage", stage=stage.name, todo=todo, tasks=stage.tasks))

    try:
        run_stages(stages, work, runner, on_stage=on_stage)
    except CurateInputError as e:
        raise AuraError(str(e)) from None
    except Exception as e:  # a task failed: its log says why
        if isinstance(e, AuraError):
            raise
        raise AuraError(
            M(
                "failed",
                stage=current["stage"].name,
                err=str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__,
                logs=work / "logs" / current["stage"].name / "logs",
            )
        ) from None


def _finish(cfg: CurateConfig, out: Path, *, stages: list, options: dict, t0: float) -> dict:
    """Publish the shards into ``out`` and write, plot and print the report (and the removed samples)."""
    from aura.data.curate import curate_report as rep

    state = out / STATE
    work = state / "work"
    shards = _publish(work, out)
    report = rep.collect(work, [s.name for s in stages])
    report["shards"] = [s.name for s in shards]
    report["options"] = options
    rep.write_report(report, state / "report.json")
    rep.plot(report, state / "report.png")
    rep.print_table(report)
    last = report["stages"][-1] if report["stages"] else {"docs_out": 0, "chars_out": 0}
    console.success(
        M(
            "done",
            docs=last["docs_out"],
            chars=last["chars_out"],
            shards=len(shards),
            path=out,
            secs=console.format_duration(time.time() - t0),
        )
    )
    console.info(M("report", json=state / "report.json", png=state / "report.png"))
    if cfg.sample:
        written = rep.gather_samples(work, state / "removed", cfg.sample)
        console.info(M("samples", path=state / "removed", n=len(written)))
    console.info(M("next", path=out))
    return report
