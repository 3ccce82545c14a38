"""The text a training stage read, as ``(where, text)`` pairs, for the contamination check
(``aura.data.contamination``).

A prepared directory (``aura data prepare``) is read back from its ``train`` token shards, decoded with its
own tokenizer, one document per EOS; a file (txt/md, jsonl, json, csv/tsv, parquet; ``.gz`` too) or a
directory of them is read as it is: every string of a JSON record (an SFT conversation, a preference pair,
a GRPO prompt), every cell of a CSV row, every string column of a Parquet row, a text file in overlapping
blocks of lines (so an n-gram that crosses a block's end is still seen whole). ``where`` names the file
and line (or the shard position). A source that is none of these (a hub dataset name) is reported, not read.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections.abc import Iterator
from pathlib import Path

TEXT_EXTS = (".txt", ".md", ".text")
JSON_EXTS = (".jsonl", ".json", ".ndjson")
TABLE_EXTS = (".csv", ".tsv")
PARQUET_EXTS = (".parquet",)
LINES_PER_BLOCK, OVERLAP_LINES = 2000, 40


def _strings(value) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)


def _open_text(path: Path):
    raw = gzip.open(path, "rb") if path.name.endswith(".gz") else path.open("rb")  # noqa: SIM115 - the caller's with
    return io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline="")


def _kind(path: Path) -> str | None:
    name = path.name.lower().removesuffix(".gz")
    for kind, exts in (("text", TEXT_EXTS), ("json", JSON_EXTS), ("table", TABLE_EXTS), ("parquet", PARQUET_EXTS)):
        if name.endswith(exts):
            return kind
    return None


def _text_blocks(path: Path) -> Iterator[tuple[str, str]]:
    with _open_text(path) as f:
        lines, first = [], 1
        for n, line in enumerate(f, 1):
            lines.append(line)
            if len(lines) >= LINES_PER_BLOCK:
                yield f"{path}:{first}", "".join(lines)
                lines, first = lines[-OVERLAP_LINES:], n - OVERLAP_LINES + 1
        if lines:
            yield f"{path}:{first}", "".join(lines)


def _json_records(path: Path) -> Iterator[tuple[str, str]]:
    with _open_text(path) as f:
        head = f.read(1 << 16)
        f.seek(0)
        if head.lstrip().startswith("["):  # a JSON array
            for i, record in enumerate(json.load(f), 1):
                yield f"{path}[{i}]", "\n".join(_strings(record))
            return
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    yield f"{path}:{n}", "\n".join(_strings(json.loads(line)))
                except ValueError:
                    yield f"{path}:{n}", line


def _table_rows(path: Path) -> Iterator[tuple[str, str]]:
    delimiter = "\t" if path.name.lower().removesuffix(".gz").endswith(".tsv") else ","
    with _open_text(path) as f:
        for n, row in enumerate(csv.reader(f, delimiter=delimiter), 1):
            yield f"{path}:{n}", "\n".join(row)


def _parquet_rows(path: Path) -> Iterator[tuple[str, str]]:
    import pyarrow.parquet as pq

    n = 0
    for batch in pq.ParquetFile(path).iter_batches(batch_size=1024):
        for row in batch.to_pylist():
            n += 1
            yield f"{path}#{n}", "\n".join(_strings(row))


def _prepared(path: Path, *, chunk: int = 1 << 20) -> Iterator[tuple[str, str]]:
    from transformers import AutoTokenizer

    from aura.data.tokens import TokenShards

    shards = TokenShards(path, "train")
    tok = AutoTokenizer.from_pretrained(str(path / "tokenizer"))
    doc, start, doc_start = [], 0, 0
    while start < len(shards):
        ids = shards.read(start, min(chunk, len(shards) - start)).tolist()
        for i, t in enumerate(ids):
            if t == shards.eos_id:
                if doc:
                    yield f"{path} (train, token {doc_start})", tok.decode(doc)
                doc, doc_start = [], start + i + 1
            else:
                doc.append(t)
        start += len(ids)
    if doc:
        yield f"{path} (train, token {doc_start})", tok.decode(doc)


READERS = {"text": _text_blocks, "json": _json_records, "table": _table_rows, "parquet": _parquet_rows}


def readable(path: str | Path) -> bool:
    """True when ``training_texts`` can read ``path`` (a prepared dir, a known file, a dir of them)."""
    from aura.data.tokens import is_prepared_dir

    p = Path(path)
    return is_prepared_dir(p) or (p.is_file() and _kind(p) is not None) or p.is_dir()


def training_texts(path: str | Path) -> Iterator[tuple[str, str]]:
    """Every document of ``path`` as ``(where, text)``."""
    from aura.data.tokens import is_prepared_dir

    p = Path(path)
    if is_prepared_dir(p):
        yield from _prepared(p)
        return
    files = sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
    for f in files:
        kind = _kind(f)
        if kind is not None:
            yield from READERS[kind](f)
