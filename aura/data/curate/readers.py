"""Inputs of ``aura data curate``: WARC/WET crawls, HTML files and the text formats of ``aura data prepare``.

``find_inputs`` expands files, directories and patterns into a sorted list of ``InputFile``; the
pipeline's first step, ``CurateReader``, reads its task's share (``files[rank::world_size]``) with
warcio (through datatrove's WARC record parser), as raw HTML, or with Aura's own text readers
(``aura.text.readers``: txt, jsonl, json, csv, tsv, parquet, plain or .gz/.zst), and a Hugging Face
dataset (saved with save_to_disk, or streamed from the hub, e.g. FineWeb-2's ``spa_Latn``) shared between
the tasks record by record (``aura.text.hf``). A record keeps its own ``id`` (the document's id) and its
other fields (``url``, FineWeb's ``dump``, ``date``...) in ``metadata``, as datatrove's readers do; a record
without an id gets ``FILE#N``. ``limit`` is the whole run's number of documents read, split between the
tasks. Documents that are
HTML (WARC responses, HTML files, and text records that are a whole HTML page: ``is_html_document``)
are marked ``metadata["format"] = "html"`` so that only they go through text extraction.

A damaged file stops its task with ``CurateInputError``, which names the file, the record and the
byte offset where reading failed.
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from datatrove.data import Document, DocumentsPipeline
from datatrove.pipeline.readers.base import BaseReader

from aura.core.errors import AuraError
from aura.core.i18n import Messages
from aura.text.readers import ReaderOptions, iter_records
from aura.text.sources import Source, walk_inputs

M = Messages(
    "curate_readers",
    {
        "unsupported": (
            "Formato no compatible: {path}. Formatos aceptados: {exts}.",
            "Unsupported format: {path}. Accepted formats: {exts}.",
        ),
        "truncated": (
            "quedan {size:byte|bytes} sin leer al final: el archivo está cortado",
            "{size:byte is|bytes are} left unread at the end: the file is cut short",
        ),
        "cut_record": (
            "al registro le faltan {size:byte|bytes}: el archivo está cortado",
            "the record lacks {size:byte|bytes}: the file is cut short",
        ),
        "bad_record": (
            "{path}, registro {record} (byte {offset}): {err}. El archivo está dañado o truncado; "
            "vuelve a descargarlo o quítalo de las entradas.",
            "{path}, record {record} (byte {offset}): {err}. The file is damaged or truncated; "
            "download it again or remove it from the inputs.",
        ),
    },
)

WARC_SUFFIXES = (".warc", ".warc.gz", ".wet", ".wet.gz", ".warc.wet", ".warc.wet.gz", ".arc.gz")
HTML_SUFFIXES = (".html", ".htm", ".html.gz", ".htm.gz")
TEXT_SUFFIXES = tuple(
    f".{f}{c}" for f in ("txt", "jsonl", "json", "csv", "tsv", "parquet") for c in ("", ".gz", ".zst")
)
ACCEPTED = "WARC/WET (.warc, .warc.gz, .wet.gz), HTML (.html, .htm), txt, jsonl, json, csv, tsv, parquet (+ .gz/.zst)"


@dataclass(frozen=True)
class InputFile:
    path: str
    kind: str  # warc | html | text | hf_disk | hf_hub (a dataset: read by every task, its share)
    fmt: str = ""  # text formats: txt | jsonl | ...
    compression: str = ""

    @property
    def shared(self) -> bool:
        return self.kind in ("hf_disk", "hf_hub")


def is_html_document(text: str) -> bool:
    """True for a whole HTML page (crawls often ship pages in a JSONL/parquet text field): the text
    starts, after white space and an optional BOM or XML declaration, with ``<!doctype html`` or
    ``<html``. Only the first characters are looked at; a text that merely contains tags is text."""
    head = text[:512].lstrip("\ufeff \t\r\n")
    if head[:5].lower() == "<?xml":
        head = head[head.find("?>") + 2 :].lstrip() if "?>" in head else ""
    head = head[:14].lower()
    if head.startswith("<!doctype html"):
        return True
    return head.startswith("<html") and head[5:6] in (">", " ", "\t", "\n", "\r")


class CurateInputError(Exception):
    """A damaged input; its message is the user-facing text (it crosses process boundaries as a string)."""


def _classify(p: Path) -> InputFile | None:
    name = p.name.lower()
    if name.endswith(WARC_SUFFIXES):
        return InputFile(str(p), "warc")
    if name.endswith(HTML_SUFFIXES):
        return InputFile(str(p), "html", compression="gz" if name.endswith(".gz") else "")
    for suffix in TEXT_SUFFIXES:
        if name.endswith(suffix):
            parts = suffix[1:].split(".")
            return InputFile(str(p), "text", parts[0], parts[1] if len(parts) > 1 else "")
    return None


def find_inputs(inputs: list[str]) -> list[InputFile]:
    """Files, directories and patterns, walked as ``aura data prepare`` walks them (``walk_inputs``),
    classified as WARC/WET, HTML or text; a path given twice is read once."""
    found: list[InputFile] = []
    seen: set[str] = set()
    for p in walk_inputs(inputs, lambda f: _classify(f) is not None, ACCEPTED):
        f = _classify(p)
        if f is None:
            raise AuraError(M("unsupported", path=p, exts=ACCEPTED))
        if f.path not in seen:
            seen.add(f.path)
            found.append(f)
    return found


def _read_warc(path: str) -> Iterator[dict]:
    from datatrove.pipeline.readers.warc import process_record
    from warcio.archiveiterator import ArchiveIterator
    from warcio.exceptions import ArchiveLoadFailed

    record_no, offset = 0, 0
    try:
        with open(path, "rb") as f:
            records = ArchiveIterator(f)
            for record in records:  # record_no: records read whole so far
                offset = records.offset  # start of this record (get_record_offset() would read it to its end)
                data = process_record(record)
                while record.raw_stream.read(1 << 16):  # the rest of the record, to see if it is whole
                    pass
                if getattr(record.raw_stream, "limit", 0) > 0:
                    raise EOFError(M("cut_record", size=record.raw_stream.limit))
                record_no += 1
                if data:
                    data["format"] = "html" if record.rec_type == "response" else "text"
                    yield data
            if records.offset < os.path.getsize(path):  # warcio stops quietly at a cut gzip member
                offset = records.offset
                raise EOFError(M("truncated", size=os.path.getsize(path) - records.offset))
    except (ArchiveLoadFailed, EOFError, OSError, zlib.error, ValueError) as e:
        detail = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CurateInputError(M("bad_record", path=path, record=record_no + 1, offset=offset, err=detail)) from None


def _read_html(f: InputFile) -> Iterator[dict]:
    try:
        if f.compression == "gz":
            with gzip.open(f.path, "rb") as fh:
                raw = fh.read()
        else:
            raw = Path(f.path).read_bytes()
    except (EOFError, OSError, zlib.error) as e:
        raise CurateInputError(M("bad_record", path=f.path, record=1, offset=0, err=e)) from None
    yield {"text": raw.decode("utf-8", errors="replace"), "format": "html"}


class CurateReader(BaseReader):
    """Reads this task's share of the inputs, in a fixed order, as datatrove documents."""

    name = "📚 Aura inputs (WARC, HTML, text)"

    def __init__(self, files: list[InputFile], *, root: str, options: ReaderOptions, limit: int = -1):
        super().__init__(limit=limit)
        self.files = list(files)
        self.root = root
        self.options = options

    def _records(self, f: InputFile, rank: int, world_size: int) -> Iterator[dict]:
        if f.kind == "warc":  # id (WARC-Record-ID), url and date kept like a text record's fields
            for data in _read_warc(f.path):
                yield {"text": data.pop("text"), "format": data.pop("format"), "fields": data}
        elif f.kind == "html":
            yield from _read_html(f)
        else:
            if f.shared:
                source = Source(f.kind, f.path)
                opts = replace(self.options, keep_fields=True, task=(rank, world_size))
            else:
                source = Source("file", f.path, f.fmt, f.compression, os.path.getsize(f.path))
                opts = replace(self.options, keep_fields=True)
            try:
                for text, fields in iter_records(source, opts, Counter()):
                    yield {"text": text, "format": "html" if is_html_document(text) else "text", "fields": fields}
            except AuraError as e:
                raise CurateInputError(str(e)) from None

    def _task_limit(self, rank: int, world_size: int) -> int:
        if self.limit == -1:
            return -1
        return self.limit // world_size + (1 if rank < self.limit % world_size else 0)

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        if data:
            yield from data
        produced, limit = 0, self._task_limit(rank, world_size)
        mine = [f for f in self.files if f.shared] + [f for f in self.files if not f.shared][rank::world_size]
        for f in mine:
            self.stat_update("input_files")
            rel = f.path if f.kind == "hf_hub" else (os.path.relpath(f.path, self.root) if self.root else f.path)
            for i, record in enumerate(self._records(f, rank, world_size)):
                if not record.get("text"):
                    continue
                if limit != -1 and produced >= limit:
                    return
                fields = dict(record.get("fields") or {})
                own_id = fields.pop("id", None)
                metadata = {"source": rel, **_metadata_of(fields), "format": record["format"]}
                if own_id in (None, ""):
                    own_id = f"{rel}#{i}" if not f.shared else f"{rel}#{rank}.{i}"
                doc = Document(text=record["text"], id=str(own_id), metadata=metadata)
                self.update_doc_stats(doc)
                produced += 1
                yield doc


def _metadata_of(fields: dict) -> dict:
    """A record's fields as datatrove's readers store them: its own ``metadata`` object merged with the
    rest (a ``metadata`` that is JSON text is parsed; one that is not an object is kept under its name)."""
    meta = fields.pop("metadata", {})
    if isinstance(meta, str):
        try:
            meta = json.loads(meta)
        except ValueError:
            pass
    if not isinstance(meta, dict):
        meta = {"metadata": meta}
    return {**meta, **fields}
