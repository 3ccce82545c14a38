"""Documents from txt/jsonl/json/csv/tsv/parquet files (+.gz/.zst) and Hugging Face datasets, read as
streams with clear errors naming the file and line; ``clean_text``; the reader flags commands share.
"""

from __future__ import annotations

import csv
import gzip
import io
import re
import sys
import unicodedata
from collections import Counter
from dataclasses import dataclass
from typing import Iterator

from aura.core.config import arg
from aura.core.errors import AuraError
from aura.core.files import loads_json
from aura.text.fields import other_fields, record_text
from aura.text.hf import hf_disk_records, hf_hub_records
from aura.text.records import MAX_RECORD_BYTES, blocks as _blocks, json_array, size as _size
from aura.text.sources import BLOCK_BYTES, M, Source, open_binary

Record = tuple[str, "dict | None"]  # (raw text, the record's other fields when kept, else None)


@dataclass(frozen=True)
class ReaderOptions:
    text_field: str = "text"
    doc_sep: str = "line"  # txt only: line | blankline | file
    encoding: str = "utf-8"
    errors: str = "strict"  # strict | replace | ignore
    skip_bad_records: bool = False
    hf_config: str | None = None
    split: str = "train"
    max_record_bytes: int = MAX_RECORD_BYTES
    keep_fields: bool = False  # yield each record's other fields (id, url...) beside its text
    task: tuple[int, int] = (0, 1)  # (index, count): this reader's share of a streamed dataset

    def __post_init__(self):
        if self.max_record_bytes < 1:
            raise AuraError(M("bad_record_limit", value=self.max_record_bytes))


def _check_encoding(encoding: str) -> None:
    import codecs

    try:
        codecs.lookup(encoding)
    except LookupError:
        raise AuraError(M("bad_encoding_name", encoding=encoding)) from None


def iter_text_blocks(source: Source, opts: ReaderOptions, stats: Counter) -> Iterator[tuple[int, str]]:
    """(first line number, decoded text) blocks of whole lines, streamed: memory holds a block and at
    most one line of ``opts.max_record_bytes``; bad bytes name their offset, a longer line its number."""
    _check_encoding(opts.encoding)
    ascii_compatible = "\n".encode(opts.encoding) == b"\n"

    def too_long(line: int):
        raise AuraError(
            M(
                "too_long",
                path=source.path,
                line=line,
                limit=_size(opts.max_record_bytes),
                more=str(opts.max_record_bytes * 4),
            )
        )

    try:
        with open_binary(source) as f:
            if not ascii_compatible:  # e.g. UTF-16: lines split after decoding, offsets unknown
                per_char = len("a\n".encode(opts.encoding)) - len("a".encode(opts.encoding))
                text_f = io.TextIOWrapper(f, encoding=opts.encoding, errors=opts.errors, newline="")
                line = 1
                try:
                    for block, n in _blocks(
                        lambda: text_f.read(BLOCK_BYTES // per_char), "\n", opts.max_record_bytes // per_char, too_long
                    ):
                        yield line, block
                        line += n
                except UnicodeDecodeError as e:
                    raise AuraError(
                        M("bad_encoding", path=source.path, encoding=opts.encoding, offset="?", line=f"≥ {line}")
                    ) from e
                return
            offset, line = 0, 1
            for block, n in _blocks(lambda: f.read(BLOCK_BYTES), b"\n", opts.max_record_bytes, too_long):
                if (
                    offset == 0
                    and block.startswith(b"\xef\xbb\xbf")
                    and opts.encoding.lower().replace("_", "-") in ("utf-8", "utf8")
                ):
                    block, offset = block[3:], 3  # a UTF-8 byte-order mark is not text
                try:
                    text = block.decode(opts.encoding)
                except UnicodeDecodeError as e:
                    if opts.errors == "strict":
                        bad_line = line + block.count(b"\n", 0, e.start)
                        raise AuraError(
                            M(
                                "bad_encoding",
                                path=source.path,
                                encoding=opts.encoding,
                                offset=offset + e.start,
                                line=bad_line,
                            )
                        ) from None
                    stats["bad_encoding"] += sum(1 for ln in block.splitlines(True) if not _decodes(ln, opts.encoding))
                    text = block.decode(opts.encoding, errors=opts.errors)
                yield line, text
                offset += len(block)
                line += n
    except (EOFError, gzip.BadGzipFile, OSError) as e:
        if isinstance(e, OSError) and not isinstance(e, gzip.BadGzipFile) and source.compression == "":
            raise AuraError(M("unreadable", path=source.path, err=getattr(e, "strerror", None) or e)) from None
        raise AuraError(M("bad_compressed", path=source.path, err=e)) from None
    except Exception as e:  # zstandard.ZstdError
        if type(e).__name__ == "ZstdError":
            raise AuraError(M("bad_compressed", path=source.path, err=e)) from None
        raise


def _decodes(line: bytes, encoding: str) -> bool:
    try:
        line.decode(encoding)
        return True
    except UnicodeDecodeError:
        return False


def iter_lines(source: Source, opts: ReaderOptions, stats: Counter) -> Iterator[tuple[int, str]]:
    """(line number, line without its end) for every line of a text file."""
    for first, text in iter_text_blocks(source, opts, stats):
        for i, ln in enumerate(text.splitlines(), first):
            yield i, ln


def read_whole(source: Source, opts: ReaderOptions, stats: Counter) -> str:
    """The whole decoded file, as one record: at most ``opts.max_record_bytes`` of text."""
    parts, size = [], 0
    for _, text in iter_text_blocks(source, opts, stats):
        size += len(text)
        if size > opts.max_record_bytes:
            raise AuraError(
                M("too_big", path=source.path, limit=_size(opts.max_record_bytes), more=str(opts.max_record_bytes * 4))
            )
        parts.append(text)
    return "".join(parts)


def _txt(source: Source, opts: ReaderOptions, stats: Counter) -> Iterator[str]:
    """Documents of a text file (no fields: the hot path of ``aura data prepare`` yields bare strings)."""
    if opts.doc_sep == "file":
        yield read_whole(source, opts, stats)
    elif opts.doc_sep == "blankline":
        para: list[str] = []
        for _, ln in iter_lines(source, opts, stats):
            if ln.strip():
                para.append(ln)
            elif para:
                yield "\n".join(para)
                para = []
        if para:
            yield "\n".join(para)
    else:
        for _first, text in iter_text_blocks(source, opts, stats):
            yield from filter(str.strip, text.splitlines())  # a blank line separates, it is no document


def _txt_records(source: Source, opts: ReaderOptions, stats: Counter) -> Iterator[Record]:
    return ((text, None) for text in _txt(source, opts, stats))


def _fields(record, opts: ReaderOptions) -> dict | None:
    return other_fields(record, opts.text_field) if opts.keep_fields else None


def _jsonl(source: Source, opts: ReaderOptions, stats: Counter) -> Iterator[Record]:
    loads = loads_json  # nesting too deep is a ValueError too
    for n, ln in iter_lines(source, opts, stats):
        if not ln.strip():
            continue
        try:
            record = loads(ln)
        except ValueError as e:
            if opts.skip_bad_records:
                stats["bad_records"] += 1
                continue
            raise AuraError(M("bad_json", path=source.path, line=n, err=e)) from None
        text = record_text(record, source=source, opts=opts, stats=stats, where=n)
        if text is not None:
            yield text, _fields(record, opts)


def _json(source: Source, opts: ReaderOptions, stats: Counter) -> Iterator[Record]:
    first = next((text.lstrip()[:1] for _, text in iter_text_blocks(source, opts, stats) if text.strip()), "")
    if first == "[":  # a list of records: streamed element by element
        records = json_array(
            (text for _, text in iter_text_blocks(source, opts, stats)), path=source.path, limit=opts.max_record_bytes
        )
    else:  # one object (or JSON Lines saved as .json): one record, at most --max-record-bytes
        raw = read_whole(source, opts, stats)
        try:
            data = loads_json(raw)
        except ValueError as e:
            if "Extra data" in str(e):  # JSON Lines saved as .json: read it as such
                yield from _jsonl(source, opts, stats)
                return
            raise AuraError(M("bad_json_file", path=source.path, err=e)) from None
        records = enumerate([data], 1)
    for i, record in records:
        text = record_text(record, source=source, opts=opts, stats=stats, where=i)
        if text is not None:
            yield text, _fields(record, opts)


def _csv(source: Source, opts: ReaderOptions, stats: Counter) -> Iterator[Record]:
    csv.field_size_limit(min(opts.max_record_bytes, sys.maxsize))
    lines = (ln for _, text in iter_text_blocks(source, opts, stats) for ln in text.splitlines(True))
    reader = csv.reader(lines, dialect="excel-tab" if source.fmt == "tsv" else "excel")
    try:
        header = next(reader)
    except StopIteration:
        raise AuraError(M("empty", path=source.path)) from None
    except csv.Error as e:
        raise AuraError(M("bad_json_file", path=source.path, err=e)) from None
    header = [h.strip() for h in header]
    if opts.text_field not in header:
        raise AuraError(M("missing_column", path=source.path, field=opts.text_field, found=", ".join(header) or "-"))
    col = header.index(opts.text_field)
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            if "field limit" in str(e):  # a field over --max-record-bytes
                raise AuraError(
                    M(
                        "too_long",
                        path=source.path,
                        line=reader.line_num,
                        limit=_size(opts.max_record_bytes),
                        more=str(opts.max_record_bytes * 4),
                    )
                ) from None
            stats["bad_records"] += 1
            if not opts.skip_bad_records:
                raise
            continue
        if len(row) <= col:
            if row:
                stats["bad_records"] += 1
            continue
        yield row[col], (_fields(dict(zip(header, row)), opts) if opts.keep_fields else None)


def _parquet(source: Source, opts: ReaderOptions, stats: Counter) -> Iterator[Record]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        if source.compression:
            with open_binary(source) as f:
                pf = pq.ParquetFile(pa.BufferReader(f.read()))
        else:
            pf = pq.ParquetFile(source.path)
    except (pa.ArrowInvalid, OSError) as e:
        raise AuraError(M("bad_parquet", path=source.path, err=e)) from None
    names = pf.schema_arrow.names
    if opts.text_field not in names:
        raise AuraError(M("missing_column", path=source.path, field=opts.text_field, found=", ".join(names)))
    total = max(pf.metadata.num_rows, 1)
    columns = None if opts.keep_fields else [opts.text_field]  # the other columns only when kept
    for batch in pf.iter_batches(columns=columns, batch_size=4096):
        texts = batch.column(names.index(opts.text_field) if opts.keep_fields else 0).to_pylist()
        rows = batch.to_pylist() if opts.keep_fields else None
        for i, value in enumerate(texts):
            if isinstance(value, str):
                yield value, (_fields(rows[i], opts) if rows is not None else None)
            else:
                stats["bad_records"] += 1
        source.position += int(source.bytes * batch.num_rows / total)


_READERS = {"txt": _txt_records, "jsonl": _jsonl, "json": _json, "csv": _csv, "tsv": _csv, "parquet": _parquet}


def iter_records(source: Source, opts: ReaderOptions, stats: Counter) -> Iterator[Record]:
    """(raw text, other fields) of every record of one source, not yet cleaned; the other fields (every
    field or column but the text: ``id``, ``url``...) only with ``opts.keep_fields``, else None; a .txt
    document has none. Counts bad records in ``stats``."""
    if source.kind == "hf_disk":
        return hf_disk_records(source, opts, stats)
    if source.kind == "hf_hub":
        return hf_hub_records(source, opts, stats)
    return _READERS[source.fmt](source, opts, stats)


def iter_documents(source: Source, opts: ReaderOptions, stats: Counter) -> Iterator[str]:
    """Raw documents of one source (not yet cleaned); counts bad records in ``stats``."""
    if source.kind == "file" and source.fmt == "txt":
        return _txt(source, opts, stats)
    return (text for text, _ in iter_records(source, opts, stats))


# C0/C1 control characters except \t and \n (\r is turned into \n first); U+FEFF byte-order marks.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ufeff]")


_UNI_SPACE = re.compile("[\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]")


_HSPACE = re.compile(r"\t[ \t]*| [ \t]+")  # only runs that change: cheap on normal text


_LINE_EDGES = re.compile(r"[ \t]*\n[ \t]*")


_TRAILING = re.compile(r"[ \t]+\n")


_MANY_NL = re.compile(r"\n{3,}")


def clean_text(text: str, *, keep_layout: bool = False) -> str:
    """NFC, no control characters, normalised whitespace; accents, ñ, ¿ and ¡ stay as they are.

    ``keep_layout`` (whole-file documents) keeps tabs and indentation; otherwise runs of spaces and
    tabs become one space. Line breaks stay (at most one blank line in a row), lines are stripped.
    """
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    if not text.isascii():
        text = unicodedata.normalize("NFC", text)
        text = _UNI_SPACE.sub(" ", text)
    text = _CONTROL.sub("", text)
    if keep_layout:
        text = _TRAILING.sub("\n", text)
    else:
        text = _HSPACE.sub(" ", text)
        if "\n" in text:
            text = _LINE_EDGES.sub("\n", text)
    if "\n\n\n" in text:
        text = _MANY_NL.sub("\n\n", text)
    return text.strip()


@dataclass
class ReaderArgs:
    """How text inputs are read: shared by ``aura data prepare`` and ``aura tokenizer train``."""

    text_field: str = arg(
        "text",
        es="Campo o columna con el texto (jsonl, json, csv, parquet, datasets; admite a.b para campos anidados).",
        en="Field or column holding the text (jsonl, json, csv, parquet, datasets; a.b for nested fields).",
    )
    doc_sep: str = arg(
        "line",
        choices=("line", "blankline", "file"),
        es="Documentos en .txt: uno por línea, separados por línea en blanco, o el archivo entero.",
        en="Documents in .txt: one per line, separated by blank lines, or the whole file.",
    )
    encoding: str = arg("utf-8", es="Codificación de los archivos de texto.", en="Text files' encoding.")
    errors: str = arg(
        "strict",
        choices=("strict", "replace", "ignore"),
        es="Bytes no válidos: strict (error con su posición), replace o ignore (se cuentan).",
        en="Invalid bytes: strict (error with their offset), replace or ignore (counted).",
    )
    max_record_bytes: int = arg(
        MAX_RECORD_BYTES,
        es="Tamaño máximo de un registro en bytes (una línea, un "
        "elemento JSON, un campo CSV, el archivo entero con --doc-sep file): uno mayor es un "
        "error que nombra su línea. Acota la memoria (64 MiB por defecto).",
        en="Largest record in bytes (a line, a JSON element, a CSV field, the whole file with "
        "--doc-sep file): a larger one is an error naming its line. Bounds memory (64 MiB by "
        "default).",
    )
