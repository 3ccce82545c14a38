"""Instruction data for fine-tuning: every format -> conversations -> token ids with masked labels.

Formats (one record each): CSV/TSV with ``instruction,response`` (optional ``input``, ``system``);
JSON/JSONL/Parquet records with ``messages`` (role/content, multi-turn), ``conversations`` (ShareGPT
from/value), ``instruction``/``response`` (or ``output``), ``prompt``/``completion``, or ``text``
already formatted (e.g. Mistral ``<s>[INST] … [/INST] …</s>``); a Hugging Face dataset saved with
``save_to_disk`` or named on the hub. Without ``--data``, the embedded Spanish sample
(``aura/resources/instrucciones_es.csv``) is used.

Everything becomes a ``Conversation`` (validated: roles, alternation, empty responses, naming the
file and record); ``aura.data.sft_batches`` turns conversations into masked token ids and batches.
"""

from __future__ import annotations

import csv
import os
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from aura.core import console
from aura.core.errors import AuraError
from aura.core.files import loads_json
from aura.core.i18n import Messages
from aura.text.readers import ReaderOptions, iter_text_blocks, read_whole
from aura.text.records import json_array
from aura.text.sources import M as SOURCES_M, Source, expand_inputs, hf_source, is_hf_disk_dir

DEFAULT_DATA = Path(__file__).resolve().parents[1] / "resources" / "instrucciones_es.csv"
ROLES = ("system", "user", "assistant")
_SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "system": "system",
    "chatgpt": "assistant",
    "bing": "assistant",
    "bard": "assistant",
}

M = Messages(
    "sft",
    {
        "no_columns": (
            "{path}: faltan las columnas de instrucciones. Se esperaba 'instruction' y "
            "'response' (opcionales 'input' y 'system'), o 'prompt' y 'completion', o 'text' "
            "o 'messages'. Columnas encontradas: {found}.",
            "{path}: the instruction columns are missing. Expected 'instruction' and "
            "'response' (optional 'input' and 'system'), or 'prompt' and 'completion', or "
            "'text' or 'messages'. Columns found: {found}.",
        ),
        "no_fields": (
            "{where}: el registro no tiene un formato reconocido. Se esperaba 'messages', "
            "'conversations', 'instruction' + 'response', 'prompt' + 'completion' o 'text'. "
            "Campos encontrados: {found}.",
            "{where}: the record has no recognised format. Expected 'messages', "
            "'conversations', 'instruction' + 'response', 'prompt' + 'completion' or 'text'. "
            "Fields found: {found}.",
        ),
        "not_text": (
            "{where}: el campo '{field}' debe ser texto (es {kind}).",
            "{where}: the field '{field}' must be text (it is {kind}).",
        ),
        "bad_messages": (
            "{where}: 'messages' debe ser una lista de objetos con 'role' y 'content'.",
            "{where}: 'messages' must be a list of objects with 'role' and 'content'.",
        ),
        "bad_role": (
            "{where}, mensaje {index}: rol desconocido '{role}'. Roles válidos: system, user, assistant.",
            "{where}, message {index}: unknown role '{role}'. Valid roles: system, user, assistant.",
        ),
        "not_alternating": (
            "{where}, mensaje {index}: se esperaba el rol '{expected}' y llegó '{role}'. "
            "Los mensajes deben ser: un 'system' opcional al principio y luego user, "
            "assistant, user, assistant… terminando en assistant.",
            "{where}, message {index}: expected role '{expected}' but got '{role}'. "
            "Messages must be: an optional 'system' first, then user, assistant, user, "
            "assistant… ending with assistant.",
        ),
        "empty_responses": (
            "{count:ejemplo tiene|ejemplos tienen} la respuesta vacía (p. ej. {examples}). Corrígelos o "
            "usa --empty-responses skip para saltarlos.",
            "{count:example has|examples have} an empty response (e.g. {examples}). Fix them or use "
            "--empty-responses skip to skip them.",
        ),
        "skipped_empty": (
            "Ejemplos saltados por tener la respuesta vacía: {count} (p. ej. {examples}).",
            "Skipped {count:example|examples} with an empty response (e.g. {examples}).",
        ),
        "no_examples": ("{path} no contiene ningún ejemplo de entrenamiento.", "{path} holds no training examples."),
        "bad_json": ("{where}: JSON no válido ({err}).", "{where}: invalid JSON ({err})."),
        "loaded": (
            "Cargando datos: {path} -> {count:conversación|conversaciones}.",
            "Loading data: {path} -> {count:conversation|conversations}.",
        ),
    },
)


@dataclass
class Conversation:
    """One training example: chat ``messages`` (role/content), or an already formatted ``text``."""

    messages: list[dict[str, str]] | None = None
    text: str | None = None
    where: str = ""  # "file, record N" for messages naming the example

    def response_is_empty(self) -> bool:
        if self.messages is None:
            return not (self.text or "").strip()
        return any(m["role"] == "assistant" and not m["content"].strip() for m in self.messages)


# ---------------------------------------------------------------------------------------------------
# Records -> conversations


def _text_field(record: dict, name: str, where: str) -> str:
    value = record.get(name)
    if value is None:
        return ""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise AuraError(M("not_text", where=where, field=name, kind=type(value).__name__))
    return value


def check_messages(raw, where: str) -> list[dict[str, str]]:
    if not isinstance(raw, list) or not raw or not all(isinstance(m, dict) for m in raw):
        raise AuraError(M("bad_messages", where=where))
    messages = []
    for i, m in enumerate(raw, 1):
        if "from" in m and "role" not in m:  # ShareGPT
            role = _SHAREGPT_ROLES.get(str(m.get("from")).lower(), str(m.get("from")))
            content = m.get("value")
        else:
            role, content = m.get("role"), m.get("content")
        if role not in ROLES:
            raise AuraError(M("bad_role", where=where, index=i, role=role))
        if content is None:
            content = ""
        if not isinstance(content, str):
            raise AuraError(M("not_text", where=f"{where}, message {i}", field="content", kind=type(content).__name__))
        messages.append({"role": role, "content": content.strip()})
    expected_first = 1 if messages[0]["role"] == "system" else 0
    for i, m in enumerate(messages[expected_first:], expected_first):
        expected = "user" if (i - expected_first) % 2 == 0 else "assistant"
        if m["role"] != expected:
            raise AuraError(M("not_alternating", where=where, index=i + 1, expected=expected, role=m["role"]))
    if messages[-1]["role"] != "assistant":
        raise AuraError(M("not_alternating", where=where, index=len(messages) + 1, expected="assistant", role="-"))
    return messages


def record_to_conversation(record, where: str) -> Conversation:
    """One record of any supported schema -> a Conversation (raises AuraError naming ``where``)."""
    if not isinstance(record, dict):
        raise AuraError(M("no_fields", where=where, found=type(record).__name__))
    keys = {k.strip().lower() if isinstance(k, str) else k: k for k in record}
    rec = {low: record[orig] for low, orig in keys.items()}
    if "messages" in rec or "conversations" in rec:
        raw = rec.get("messages", rec.get("conversations"))
        if isinstance(raw, str):  # a CSV cell holding JSON
            try:
                raw = loads_json(raw)
            except ValueError as e:
                raise AuraError(M("bad_json", where=where, err=e)) from None
        return Conversation(messages=check_messages(raw, where), where=where)
    pairs = (("instruction", "response"), ("instruction", "output"), ("prompt", "completion"))
    for q, a in pairs:
        if q in rec and a in rec:
            user = _text_field(rec, q, where).strip()
            extra = _text_field(rec, "input", where).strip()
            if extra:
                user = f"{user}\n\n{extra}" if user else extra
            messages = []
            system = _text_field(rec, "system", where).strip()
            if system:
                messages.append({"role": "system", "content": system})
            messages += [
                {"role": "user", "content": user},
                {"role": "assistant", "content": _text_field(rec, a, where).strip()},
            ]
            return Conversation(messages=messages, where=where)
    if "text" in rec:
        return Conversation(text=_text_field(rec, "text", where), where=where)
    raise AuraError(M("no_fields", where=where, found=", ".join(map(str, record)) or "-"))


def _rec_where(path: str, n: int, unit: str = "record") -> str:
    from aura.core.i18n import bi

    return f"{path}, {bi('línea', 'line') if unit == 'line' else bi('registro', 'record')} {n}"


SFT_COLUMNS = (
    {"instruction", "response"},
    {"instruction", "output"},
    {"prompt", "completion"},
    {"text"},
    {"messages"},
    {"conversations"},
)


def _csv_records(source: Source, opts: ReaderOptions, header_check=None) -> Iterator[tuple[str, dict]]:
    csv.field_size_limit(sys.maxsize)
    stats: Counter = Counter()
    blocks = iter_text_blocks(source, opts, stats)
    lines = (ln for _, text in blocks for ln in text.splitlines(True))
    reader = csv.reader(lines, dialect="excel-tab" if source.fmt == "tsv" else "excel")
    header = [h.strip().lower() for h in next(reader, [])]
    if header_check is not None:  # another kind of records (preference pairs) checks its own columns
        header_check(source.path, header)
    elif not any(k <= set(header) for k in SFT_COLUMNS):
        raise AuraError(M("no_columns", path=source.path, found=", ".join(header) or "-"))
    for row in reader:
        if not any(cell.strip() for cell in row):
            continue
        # reader.line_num counts physical lines (quoted cells can span several): name the row's last
        yield _rec_where(source.path, reader.line_num, "line"), dict(zip(header, row))


def _json_records(source: Source, opts: ReaderOptions) -> Iterator[tuple[str, dict]]:
    stats: Counter = Counter()
    if source.fmt == "jsonl":
        for first, text in iter_text_blocks(source, opts, stats):
            for n, ln in enumerate(text.splitlines(), first):
                if ln.strip():
                    where = _rec_where(source.path, n, "line")
                    try:
                        yield where, loads_json(ln)
                    except ValueError as e:
                        raise AuraError(M("bad_json", where=where, err=e)) from None
        return
    first = next((t.lstrip()[:1] for _, t in iter_text_blocks(source, opts, stats) if t.strip()), "")
    if first == "[":  # a list of records, streamed element by element (each at most MAX_RECORD_BYTES)
        blocks = (t for _, t in iter_text_blocks(source, opts, stats))
        for i, rec in json_array(blocks, path=source.path, limit=opts.max_record_bytes):
            yield _rec_where(source.path, i), rec
        return
    raw = read_whole(source, opts, stats)  # one JSON object: at most MAX_RECORD_BYTES
    try:
        data = loads_json(raw)
    except ValueError as e:
        raise AuraError(M("bad_json", where=source.path, err=e)) from None
    for i, rec in enumerate(data if isinstance(data, list) else [data], 1):
        yield _rec_where(source.path, i), rec


def _table_records(rows: Iterable[dict], name: str) -> Iterator[tuple[str, dict]]:
    for i, rec in enumerate(rows, 1):
        yield _rec_where(name, i), rec


def _hf_records(source: Source, split: str) -> Iterator[tuple[str, dict]]:
    import datasets

    from aura.text.readers import M as RM

    try:
        if source.kind == "hf_disk":
            ds = datasets.load_from_disk(source.path)
            if isinstance(ds, datasets.DatasetDict):
                if split not in ds:
                    raise AuraError(RM("hf_split", path=source.path, split=split, have=", ".join(ds)))
                ds = ds[split]
        else:  # a hub dataset, streamed: rows arrive as training reads them, nothing is downloaded whole
            return _streamed(datasets.load_dataset(source.path, split=split, streaming=True), source.path)
    except AuraError:
        raise
    except Exception as e:  # no connection, unknown name, damaged arrow files
        raise AuraError(RM("hf_failed", name=source.path, err=e)) from None
    return _table_records(ds, source.path)


def _streamed(ds, name: str) -> Iterator[tuple[str, dict]]:
    """A streamed dataset's rows; a connection lost halfway is named like one refused at the start."""
    from aura.text.readers import M as RM

    rows = iter(ds)
    n = 0
    while True:
        try:
            rec = next(rows)
        except StopIteration:
            return
        except Exception as e:  # noqa: BLE001 - the network, the hub, a damaged parquet file
            raise AuraError(RM("hf_failed", name=name, err=e)) from None
        n += 1
        yield _rec_where(name, n), rec


def iter_records(
    data: str | os.PathLike | None,
    *,
    split: str = "train",
    encoding: str = "utf-8",
    default: Path = DEFAULT_DATA,
    header_check=None,
) -> Iterator[tuple[str, dict]]:
    """(where, record) for every record of ``data`` (files, dirs, globs, HF datasets; None = ``default``).
    ``header_check(path, columns)`` replaces the instruction-column check of CSV/TSV headers."""
    name = str(data) if data else str(default)
    p = Path(os.path.expanduser(name))
    if (
        not p.exists()
        and not any(ch in name for ch in "*?[")
        and "/" in name
        and not name.startswith((".", "/", "~"))
        and name.count("/") == 1
        and not p.suffix
    ):
        sources = [hf_source(name)]  # looks like "owner/dataset" on the hub
    elif is_hf_disk_dir(p):
        sources = [Source("hf_disk", str(p))]
    else:
        sources = expand_inputs([name])
    opts = ReaderOptions(encoding=encoding)
    for source in sources:
        if source.kind != "file":
            yield from _hf_records(source, split)
        elif source.fmt in ("csv", "tsv"):
            yield from _csv_records(source, opts, header_check)
        elif source.fmt in ("jsonl", "json"):
            yield from _json_records(source, opts)
        elif source.fmt == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            try:
                rows = pq.read_table(source.path).to_pylist()
            except (pa.ArrowInvalid, OSError) as e:  # random bytes, a truncated file
                raise AuraError(SOURCES_M("bad_parquet", path=source.path, err=e)) from None
            yield from _table_records(rows, source.path)
        else:  # .txt: one already formatted text per line
            for n, ln in (
                (n, ln)
                for first, t in iter_text_blocks(source, opts, Counter())
                for n, ln in enumerate(t.splitlines(), first)
            ):
                if ln.strip():
                    yield _rec_where(source.path, n, "line"), {"text": ln}


def load_conversations(
    data: str | os.PathLike | None = None, *, empty_responses: str = "fail", split: str = "train"
) -> list[Conversation]:
    """All conversations of ``data``; empty responses fail (naming them) or are skipped, counted."""
    convs, empty = [], []
    for where, record in iter_records(data, split=split):
        conv = record_to_conversation(record, where)
        (empty if conv.response_is_empty() else convs).append(conv)
    name = data or DEFAULT_DATA
    if empty:
        examples = "; ".join(c.where for c in empty[:3])
        if empty_responses == "fail":
            raise AuraError(M("empty_responses", count=len(empty), examples=examples))
        console.warn(M("skipped_empty", count=len(empty), examples=examples))
    if not convs:
        raise AuraError(M("no_examples", path=name))
    console.info(M("loaded", path=name, count=len(convs)))
    return convs


def split_train_val(items: list, *, val_fraction: float, seed: int) -> tuple[list, list]:
    """A deterministic (by seed) validation split: at least one example when there are two or more."""
    import random

    if val_fraction <= 0 or len(items) < 2:
        return list(items), []
    n_val = min(len(items) - 1, max(1, round(len(items) * val_fraction)))
    order = list(range(len(items)))
    random.Random(seed).shuffle(order)
    val_idx = set(order[:n_val])
    train = [x for i, x in enumerate(items) if i not in val_idx]
    val = [x for i, x in enumerate(items) if i in val_idx]
    return train, val
