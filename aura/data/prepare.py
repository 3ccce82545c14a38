"""``aura data prepare``: raw text -> cleaned, deduplicated, split, tokenised shards + meta.json.

Pipeline: the main process streams raw documents from the sources and hands batches of about a
megabyte to worker processes, each holding its own tokenizer (loaded once); a worker cleans, hashes
and tokenises a batch (``encode_batch_fast``) and returns numpy arrays. The main process, in input
order, drops duplicates (a 64-bit content digest per document, 8 bytes: ``aura.data.dedup``), routes
each document to train or validation by a hash of (seed, content) and appends its tokens to the
current shard. Nothing is held beyond a few batches and those digests.
The output is built under ``.tmp-*`` and renamed into place with ``meta.json`` written last.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import os
import shutil
import time
from collections import Counter, deque
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import numpy as np

from aura import __version__
from aura.core import console
from aura.core.atomic import TMP_PREFIX, atomic_write_json, sha256_file
from aura.core.config import arg
from aura.core.errors import AuraError
from aura.core.i18n import Messages, num
from aura.core.locks import output_lock
from aura.core.ownership import MARKER, check_location
from aura.core.paths import check_links, copy_tree
from aura.core.staging import remove_stale_tmp, staged_dir, staging_prefixes
from aura.data.dedup import DigestSet
from aura.data.shard_writer import ShardWriter, move_to_val
from aura.data.tokens import FORMAT, load_meta
from aura.text.readers import ReaderArgs, ReaderOptions, clean_text, iter_documents
from aura.text.sources import Source, expand_inputs, hf_source

M = Messages(
    "prepare",
    {
        "no_tokenizer": (
            "Falta --tokenizer: indica un directorio de tokenizador (aura tokenizer train) o un "
            "nombre de Hugging Face.",
            "--tokenizer is missing: give a tokenizer directory (aura tokenizer train) or a Hugging Face name.",
        ),
        "no_inputs": (
            "Indica al menos una entrada (archivos, directorios, patrones) o --hf-dataset.",
            "Give at least one input (files, directories, patterns) or --hf-dataset.",
        ),
        "bad_val_fraction": (
            "--val-fraction debe estar entre 0 y 0.5 (recibido {value}).",
            "--val-fraction must be between 0 and 0.5 (got {value}).",
        ),
        "bad_positive": (
            "--{name} debe ser mayor que 0 (recibido {value}).",
            "--{name} must be greater than 0 (got {value}).",
        ),
        "bad_workers": ("--workers debe ser 0 (todos los núcleos) o más.", "--workers must be 0 (all cores) or more."),
        "no_eos": (
            "El tokenizador {name} no tiene token de fin de texto (eos_token); Aura lo necesita para "
            "separar documentos.",
            "The tokenizer {name} has no end-of-text token (eos_token); Aura needs one to separate documents.",
        ),
        "different": (
            "{path} ya contiene datos preparados con otras entradas u opciones. Usa --overwrite para "
            "reconstruirlos o elige otro --output-dir.",
            "{path} already holds data prepared from other inputs or options. Use --overwrite to "
            "rebuild it or choose another --output-dir.",
        ),
        "nothing_to_do": (
            "Nada que hacer: {path} ya está preparado con las mismas entradas, tokenizador y "
            "opciones ({tokens:token|tokens}). Usa --overwrite para reconstruirlo.",
            "Nothing to do: {path} is already prepared from the same inputs, tokenizer and "
            "options ({tokens:token|tokens}). Use --overwrite to rebuild it.",
        ),
        "too_small": (
            "El corpus es demasiado pequeño: tras la limpieza queda {docs:documento|documentos} y hacen "
            "falta al menos 2 para tener entrenamiento y validación. Añade más texto o usa "
            "--val-fraction 0.",
            "The corpus is too small: cleaning leaves {docs:document|documents} and at least 2 "
            "are needed for a training and a validation split. Add more text or use "
            "--val-fraction 0.",
        ),
        "no_docs": (
            "No queda ningún documento tras la limpieza (¿--min-chars demasiado alto?).",
            "No document is left after cleaning (is --min-chars too high?).",
        ),
        "start": (
            "Preparando {n:fuente|fuentes} con {workers:proceso|procesos}, tokenizador {tok} (vocabulario {vocab}, "
            "{dtype}).",
            "Preparing {n:source|sources} with {workers:worker|workers}, tokenizer {tok} (vocabulary {vocab}, "
            "{dtype}).",
        ),
        "progress": ("Tokenizando", "Tokenising"),
        "summary": ("Resumen de la preparación", "Preparation summary"),
        "max_tokens": (
            "Alcanzado --max-tokens ({n}): se detiene la lectura.",
            "Reached --max-tokens ({n}): reading stops.",
        ),
        "done": ("Datos preparados en {path}", "Data prepared in {path}"),
        "col_item": ("Concepto", "Item"),
        "col_value": ("Valor", "Value"),
        "row_read": ("documentos leídos", "documents read"),
        "row_kept": ("documentos conservados", "documents kept"),
        "row_dups": ("duplicados", "duplicates"),
        "row_short": ("demasiado cortos", "too short"),
        "row_bad": ("registros dañados", "bad records"),
        "row_enc": ("líneas con bytes sustituidos", "lines with replaced bytes"),
        "row_train": ("tokens de entrenamiento", "training tokens"),
        "row_val": ("tokens de validación", "validation tokens"),
        "row_shards": ("shards", "shards"),
        "row_time": ("tiempo", "time"),
    },
)

_BATCH_CHARS = 1 << 20


@dataclass
class PrepareConfig(ReaderArgs):
    inputs: list[str] = arg(
        [],
        positional=True,
        es="Entradas: archivos, directorios o patrones (txt, jsonl, "
        "json, csv, tsv, parquet, también .gz/.zst) o datasets guardados con save_to_disk.",
        en="Inputs: files, directories or patterns (txt, jsonl, json, csv, tsv, parquet, "
        "also .gz/.zst) or datasets saved with save_to_disk.",
    )
    tokenizer: str = arg(
        "",
        es="Tokenizador: directorio (aura tokenizer train) o nombre de Hugging Face.",
        en="Tokenizer: directory (aura tokenizer train) or Hugging Face name.",
    )
    output_dir: str = arg("data/prepared", es="Directorio de salida.", en="Output directory.")
    hf_dataset: str = arg(
        "",
        es="Dataset de Hugging Face (nombre, en streaming) o directorio save_to_disk.",
        en="Hugging Face dataset (name, streamed) or save_to_disk directory.",
    )
    hf_config: str = arg(
        "", es="Configuración del dataset (p. ej. 20231101.es).", en="Dataset configuration (e.g. 20231101.es)."
    )
    split: str = arg("train", es="Partición del dataset de Hugging Face.", en="Hugging Face dataset split.")
    skip_bad_records: bool = arg(
        False,
        es="Salta (y cuenta) los registros JSON/CSV dañados en vez de parar.",
        en="Skip (and count) damaged JSON/CSV records instead of stopping.",
    )
    min_chars: int = arg(
        1,
        es="Longitud mínima de un documento limpio, en caracteres (p. ej. 20 descarta títulos y fragmentos).",
        en="Minimum length of a cleaned document, in characters (e.g. 20 drops headings and fragments).",
    )
    val_fraction: float = arg(
        0.01, es="Fracción de documentos para validación.", en="Fraction of documents for validation."
    )
    seed: int = arg(0, es="Semilla de la partición entrenamiento/validación.", en="Train/validation split seed.")
    max_tokens: int = arg(
        0,
        es="Detiene la preparación al llegar a estos tokens (0 = sin límite).",
        en="Stop once this many tokens are written (0 = no limit).",
    )
    shard_tokens: int = arg(100_000_000, es="Tokens por shard.", en="Tokens per shard.")
    workers: int = arg(
        0,
        es="Procesos de tokenización (0 = todos los núcleos; 1 = en este proceso).",
        en="Tokenising processes (0 = all cores; 1 = in this process).",
    )
    overwrite: bool = arg(
        False, es="Reconstruye aunque ya exista.", en="Rebuild even if it already exists.", deprecated=["--force"]
    )
    trust_remote_code: bool = arg(
        False, es="Permite código remoto del tokenizador.", en="Allow the tokenizer's remote code."
    )

    def __post_init__(self):
        if not self.tokenizer:
            raise AuraError(M("no_tokenizer"))
        if not self.inputs and not self.hf_dataset:
            raise AuraError(M("no_inputs"))
        if not 0 <= self.val_fraction <= 0.5:
            raise AuraError(M("bad_val_fraction", value=self.val_fraction))
        if self.shard_tokens <= 0:
            raise AuraError(M("bad_positive", name="shard-tokens", value=self.shard_tokens))
        if self.min_chars < 0 or self.max_tokens < 0:
            raise AuraError(
                M("bad_positive", name="min-chars/--max-tokens", value=min(self.min_chars, self.max_tokens))
            )
        if self.workers < 0:
            raise AuraError(M("bad_workers"))


# ---------------------------------------------------------------------------------------------------
# Worker side: clean, hash, split-score and tokenise one batch


_W: dict = {}


def _init_worker(tok_json: str, eos_id: int, dtype: str, min_chars: int, seed: int, serial: bool) -> None:
    if serial:  # one tokenizer per process and one process per core: no nested Rayon threads
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
    from tokenizers import Tokenizer

    _W.update(
        tok=Tokenizer.from_str(tok_json),
        eos=[eos_id],
        dtype=np.dtype(dtype),
        min_chars=min_chars,
        seed=seed.to_bytes(8, "little", signed=True),
    )


def _worker_context():
    """Workers forked from a fresh single-threaded server, never from this process: a fork inherits the
    locks other threads hold at that instant and this process's Python signal handlers, so a worker could
    hang on a lock and then outlive ``Pool.terminate()``'s SIGTERM, and a refused input hung forever (it
    happened inside a process with threads and a SIGTERM handler: a pytest worker; the same holds for any
    program that calls ``prepare``)."""
    if "forkserver" in mp.get_all_start_methods():
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload([__name__])
        return ctx
    return mp.get_context("spawn")


def _process(batch: tuple[bool, list[str]]) -> dict:
    from itertools import chain, repeat

    keep_layout, raw = batch
    docs, short = [], 0
    for r in raw:
        d = clean_text(r, keep_layout=keep_layout)
        if len(d) < _W["min_chars"] or not d:
            short += 1
        else:
            docs.append(d)
    n = len(docs)
    keys = np.empty(n, np.uint64)
    scores = np.empty(n, np.float64)
    blake, seed = hashlib.blake2b, _W["seed"]
    for i, d in enumerate(docs):
        digest = blake(d.encode("utf-8"), digest_size=16).digest()
        keys[i] = int.from_bytes(digest[:8], "little")
        scores[i] = int.from_bytes(blake(digest, digest_size=8, key=seed).digest(), "little") / 2.0**64
    ids = [e.ids for e in _W["tok"].encode_batch_fast(docs, add_special_tokens=False)] if n else []
    lengths = np.fromiter(map(len, ids), np.int64, count=n) + 1  # + EOS
    flat = np.fromiter(
        chain.from_iterable(chain.from_iterable(zip(ids, repeat(_W["eos"])))), _W["dtype"], count=int(lengths.sum())
    )
    return {"read": len(raw), "short": short, "keys": keys, "scores": scores, "lengths": lengths, "tokens": flat}


# ---------------------------------------------------------------------------------------------------
# Main side


def _batches(sources: list[Source], opts: ReaderOptions, stats: Counter) -> Iterator[tuple[bool, list[str]]]:
    for source in sources:
        keep_layout = source.kind == "file" and source.fmt == "txt" and opts.doc_sep == "file"
        docs, chars = [], 0
        for doc in iter_documents(source, opts, stats):
            docs.append(doc)
            chars += len(doc)
            if chars >= _BATCH_CHARS:
                yield keep_layout, docs
                docs, chars = [], 0
        if docs:
            yield keep_layout, docs


def _source_record(s: Source) -> dict:
    if s.kind == "hf_hub":
        return {"path": s.path, "kind": s.kind, "bytes": None, "sha256": None}
    if s.kind == "hf_disk":
        h = hashlib.sha256()
        for f in sorted(Path(s.path).rglob("*")):
            if f.is_file():
                h.update(f.relative_to(s.path).as_posix().encode() + b"\0" + sha256_file(f).encode())
        return {"path": s.path, "kind": s.kind, "bytes": s.bytes, "sha256": h.hexdigest()}
    return {
        "path": s.path,
        "kind": s.kind,
        "format": s.fmt + (f".{s.compression}" if s.compression else ""),
        "bytes": s.bytes,
        "sha256": sha256_file(s.path),
    }


def _fingerprint(sources: list[Source], tok_hash: str, cfg: PrepareConfig) -> str:
    def ident(s: Source):
        if s.kind == "hf_hub":
            return [s.path, cfg.hf_config, cfg.split]
        st = os.stat(s.path)
        return [os.path.abspath(s.path), s.bytes, st.st_mtime_ns]

    options = {
        k: getattr(cfg, k)
        for k in (
            "text_field",
            "doc_sep",
            "encoding",
            "errors",
            "skip_bad_records",
            "min_chars",
            "val_fraction",
            "seed",
            "max_tokens",
            "shard_tokens",
            "split",
            "hf_config",
        )
    }
    blob = json.dumps(
        {"sources": [ident(s) for s in sources], "tokenizer": tok_hash, "options": options, "format": FORMAT},
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def _check_output(cfg: PrepareConfig) -> dict | None:
    """Refuse an output that is not ours to write (before any work); the meta of the Aura data dir
    already there, or None. An unreadable meta.json in it needs --overwrite: it is never taken as empty."""
    from aura.core.ownership import check_replaceable

    out = Path(cfg.output_dir)
    inputs = [*cfg.inputs, *([cfg.hf_dataset] if cfg.hf_dataset else [])]
    if check_replaceable(out, kind="data", flag="--overwrite", inputs=inputs) != "owned":
        return None
    try:
        return load_meta(out)
    except AuraError:
        if not cfg.overwrite:
            raise
        return {}


def _up_to_date(out: Path, meta: dict | None, fingerprint: str, force: bool) -> bool:
    """True when ``out`` already holds exactly this dataset (nothing to do)."""
    if meta is None or force:
        return False
    if meta.get("fingerprint") == fingerprint:
        return True
    raise AuraError(M("different", path=out))


def prepare(cfg: PrepareConfig) -> Path:
    t0 = time.perf_counter()
    existing = _check_output(cfg)
    with output_lock(cfg.output_dir, command="data prepare"):  # a second writer is refused, naming the first
        return _prepare(cfg, existing, t0)


def _prepare(cfg: PrepareConfig, existing: dict | None, t0: float) -> Path:
    from aura.tokenizer.loading import tokenizer_hash

    out = Path(cfg.output_dir)
    if Path(cfg.tokenizer).is_dir():
        check_links(cfg.tokenizer)  # it is copied into the output: no link leaving it (refused before any work)
    opts = ReaderOptions(
        text_field=cfg.text_field,
        doc_sep=cfg.doc_sep,
        encoding=cfg.encoding,
        errors=cfg.errors,
        skip_bad_records=cfg.skip_bad_records,
        hf_config=cfg.hf_config or None,
        split=cfg.split,
        max_record_bytes=cfg.max_record_bytes,
    )
    sources = expand_inputs(cfg.inputs) + ([hf_source(cfg.hf_dataset)] if cfg.hf_dataset else [])
    check_location(out, inputs=[s.path for s in sources if s.kind != "hf_hub"])  # what patterns expanded to
    tok, backend, eos_id = _load_tokenizer(cfg)
    tok_hash = tokenizer_hash(backend)
    vocab = backend.get_vocab_size(with_added_tokens=True)
    dtype = "uint16" if vocab <= 1 << 16 else "uint32"
    fingerprint = _fingerprint(sources, tok_hash, cfg)
    if _up_to_date(out, existing, fingerprint, cfg.overwrite):
        console.info(M("nothing_to_do", path=out, tokens=sum(s["tokens"] for s in existing["splits"].values())))
        return out
    # The parent is the user's directory: only our own leftovers whose writer is gone (a concurrent
    # `data prepare` into the same path keeps its staging directory).
    remove_stale_tmp(out.parent, prefix=staging_prefixes(out.name), max_age_s=None)

    workers = cfg.workers or os.cpu_count() or 1
    console.info(M("start", n=len(sources), workers=workers, tok=cfg.tokenizer, vocab=vocab, dtype=dtype))
    stats: Counter = Counter()
    initargs = (backend.to_str(), eos_id, dtype, cfg.min_chars, cfg.seed, workers > 1)
    with staged_dir(out, replace=True, kind="data") as tmp:
        train, val = _write_splits(
            cfg, tmp, sources=sources, opts=opts, stats=stats, workers=workers, initargs=initargs, dtype=dtype
        )
        if tok is not None:
            tok.save_pretrained(str(tmp / "tokenizer"))
        else:
            copy_tree(cfg.tokenizer, tmp / "tokenizer", ignore=shutil.ignore_patterns(TMP_PREFIX + "*", MARKER))
        elapsed = time.perf_counter() - t0
        tokenizer = {"name_or_path": cfg.tokenizer, "hash": tok_hash, "vocab_size": vocab, "eos_token_id": eos_id}
        meta = _meta(
            cfg,
            stats,
            train=train,
            val=val,
            sources=sources,
            tokenizer=tokenizer,
            dtype=dtype,
            fingerprint=fingerprint,
            elapsed=elapsed,
        )
        atomic_write_json(tmp / "meta.json", meta)
    _print_summary(stats, train=train, val=val, elapsed=elapsed)
    console.success(M("done", path=out))
    return out


def _meta(
    cfg: PrepareConfig,
    stats: Counter,
    *,
    train,
    val,
    sources,
    tokenizer: dict,
    dtype: str,
    fingerprint: str,
    elapsed: float,
) -> dict:
    """``meta.json``: the format, the tokenizer, each split's tokens, documents and shards, the sources, what the
    cleaning removed, the options and the fingerprint a rerun compares."""
    cleaning = {
        "documents_read": stats["read"],
        "documents_kept": train.documents + val.documents,
        "duplicates": stats["dups"],
        "too_short": stats["short"],
        "bad_records": stats["bad_records"],
        "bad_encoding": stats["bad_encoding"],
        "min_chars": cfg.min_chars,
        "stopped_at_max_tokens": bool(stats["stopped"]),
    }
    meta = {
        "format": FORMAT,
        "tokenizer": tokenizer,
        "dtype": dtype,
        "splits": {
            name: {"tokens": w.tokens, "documents": w.documents, "shards": w.shards}
            for name, w in (("train", train), ("val", val))
        },
        "sources": [_source_record(s) for s in sources],
        "cleaning": cleaning,
        "seed": cfg.seed,
        "val_fraction": cfg.val_fraction,
        "options": {
            k: getattr(cfg, k)
            for k in (
                "text_field",
                "doc_sep",
                "encoding",
                "errors",
                "max_tokens",
                "shard_tokens",
                "hf_config",
                "split",
            )
        },
        "fingerprint": fingerprint,
        "seconds": round(elapsed, 3),
        "aura_version": __version__,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    return meta


def _load_tokenizer(cfg: PrepareConfig):
    """(transformers tokenizer or None, its ``tokenizers`` backend, its EOS id): a local tokenizer.json is
    read without importing transformers (and its files are copied as they are); else transformers loads it."""
    from aura.tokenizer.loading import backend_of, load_tokenizer, local_backend

    fast = None if cfg.trust_remote_code else local_backend(cfg.tokenizer)
    if fast is not None:
        return None, *fast
    tok = load_tokenizer(cfg.tokenizer, trust_remote_code=cfg.trust_remote_code)
    if tok.eos_token_id is None:
        raise AuraError(M("no_eos", name=cfg.tokenizer))
    return tok, backend_of(tok, cfg.tokenizer), int(tok.eos_token_id)


def _write_splits(
    cfg: PrepareConfig,
    tmp: Path,
    *,
    sources: list[Source],
    opts: ReaderOptions,
    stats: Counter,
    workers: int,
    initargs: tuple,
    dtype: str,
) -> tuple[ShardWriter, ShardWriter]:
    """Tokenise the sources into the train and validation shards under ``tmp`` (with ``workers`` processes);
    a validation split that got no document borrows the train document scored closest to it."""
    train = ShardWriter(tmp, "train", shard_tokens=cfg.shard_tokens, dtype=dtype)
    val = ShardWriter(tmp, "val", shard_tokens=cfg.shard_tokens, dtype=dtype)
    pool = None
    if workers > 1:
        pool = _worker_context().Pool(workers, initializer=_init_worker, initargs=initargs)
    else:
        _init_worker(*initargs)
    try:
        best = _run(cfg, sources, opts, stats, pool, workers, train, val)
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()
    train.close()
    val.close()
    kept = train.documents + val.documents
    if kept == 0:
        raise AuraError(M("no_docs"))
    if cfg.val_fraction > 0 and val.documents == 0:
        if kept < 2:
            raise AuraError(M("too_small", docs=kept))
        move_to_val(train, val, tmp, best[1], best[2])
        train.documents, val.documents = train.documents - 1, 1
        val.close()
    return train, val


def _print_summary(stats: Counter, *, train: ShardWriter, val: ShardWriter, elapsed: float) -> None:
    kept = train.documents + val.documents
    console.table(
        M("summary"),
        [M("col_item"), M("col_value")],
        [
            (M("row_read"), num(stats["read"])),
            (M("row_kept"), num(kept)),
            (M("row_dups"), num(stats["dups"])),
            (M("row_short"), num(stats["short"])),
            (M("row_bad"), num(stats["bad_records"])),
            (M("row_enc"), num(stats["bad_encoding"])),
            (M("row_train"), num(train.tokens)),
            (M("row_val"), num(val.tokens)),
            (M("row_shards"), f"{len(train.shards)} + {len(val.shards)}"),
            (
                M("row_time"),
                console.format_duration(elapsed)
                + " ("
                + num((train.tokens + val.tokens) / max(elapsed, 1e-9), ",.0f")
                + " tokens/s)",
            ),
        ],
    )


def _run(cfg: PrepareConfig, sources, opts, stats, pool, workers, train: ShardWriter, val: ShardWriter):
    """Stream batches through the workers (at most 2 per worker in flight); returns the train document
    with the lowest split score as (score, start, length), in case validation must borrow it."""
    seen = DigestSet()  # 8 bytes per kept document (aura.data.dedup)
    best = (2.0, 0, 0)
    total_bytes = sum(s.bytes for s in sources) or None
    pending: deque = deque()
    batches = _batches(sources, opts, stats)
    with console.Progress(M("progress"), total=total_bytes, unit="bytes", extra_units=("docs", "tokens")) as bar:
        done_bytes = 0
        exhausted = False
        while True:
            while not exhausted and len(pending) < 2 * workers:
                batch = next(batches, None)
                if batch is None:
                    exhausted = True
                    break
                pending.append(pool.apply_async(_process, (batch,)) if pool else _process(batch))
            if not pending:
                break
            r = pending.popleft()
            r = r.get() if pool else r
            stats["read"] += r["read"]
            stats["short"] += r["short"]
            keep = seen.add(r["keys"])
            stats["dups"] += int((~keep).sum())
            lengths, tokens, scores = r["lengths"], r["tokens"], r["scores"]
            if cfg.max_tokens:
                room = cfg.max_tokens - train.tokens - val.tokens
                cum = np.cumsum(np.where(keep, lengths, 0))
                over = np.nonzero(cum >= room)[0]
                if len(over):  # keep whole documents up to the one that reaches the limit
                    keep[over[0] + 1 :] = False
                    stats["stopped"] = 1
            is_val = scores < cfg.val_fraction
            tok_keep = np.repeat(keep, lengths)
            tok_val = np.repeat(is_val, lengths)
            to_train = keep & ~is_val
            if to_train.any():
                starts = train.tokens + np.cumsum(np.where(to_train, lengths, 0)) - lengths
                j = int(np.argmin(np.where(to_train, scores, 2.0)))
                if scores[j] < best[0]:
                    best = (float(scores[j]), int(starts[j]), int(lengths[j]))
            train.write(tokens[tok_keep & ~tok_val])
            val.write(tokens[tok_keep & tok_val])
            train.documents += int(to_train.sum())
            val.documents += int((keep & is_val).sum())
            pos = sum(s.position for s in sources)
            bar.update(pos - done_bytes, docs=r["read"], tokens=int(lengths[keep].sum()))
            done_bytes = pos
            if stats["stopped"]:
                console.info(M("max_tokens", n=num(cfg.max_tokens)))
                break
    return best
