"""A record's text and its other fields (``id``, ``url``, FineWeb's ``dump``, ``language_score``...): the
text is what every command reads; the other fields travel with it only where a command keeps them
(``aura data curate``), JSON-friendly so any writer can store them."""

from __future__ import annotations

import datetime
import decimal
from collections import Counter

from aura.core.errors import AuraError
from aura.text.sources import M


def get_field(record, name: str):
    """record['a.b'] also looks into nested objects (``--text-field meta.text``)."""
    if isinstance(record, dict) and name in record:
        return record[name]
    cur = record
    for part in name.split("."):
        if not isinstance(cur, dict) or part not in cur:
            raise KeyError(name)
        cur = cur[part]
    return cur


def record_text(record, *, source, opts, stats: Counter, where: int) -> str | None:
    """The text field of one record, or None (counted in ``stats``) for a record without usable text when
    bad records are skipped; otherwise a missing or non-text field is an error naming the record."""
    try:
        value = get_field(record, opts.text_field)
    except KeyError:
        if opts.skip_bad_records:
            stats["bad_records"] += 1
            return None
        found = ", ".join(map(str, record.keys())) if isinstance(record, dict) else type(record).__name__
        raise AuraError(
            M("missing_field", path=source.path, line=where, field=opts.text_field, found=found or "-")
        ) from None
    if value is None:
        stats["bad_records"] += 1
        return None
    if not isinstance(value, str):
        if opts.skip_bad_records:
            stats["bad_records"] += 1
            return None
        raise AuraError(M("not_text", path=source.path, line=where, field=opts.text_field, kind=type(value).__name__))
    return value


def other_fields(record, text_field: str) -> dict:
    """Every field of ``record`` but its (top-level) text field, with values JSON can hold."""
    if not isinstance(record, dict):
        return {}
    return {str(k): jsonable(v) for k, v in record.items() if k != text_field}


def jsonable(value):
    """``value`` as JSON can hold it: dates as ISO text, bytes as text, decimals as floats; containers kept."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if hasattr(value, "tolist"):  # numpy scalars and arrays
        return jsonable(value.tolist())
    return str(value)
