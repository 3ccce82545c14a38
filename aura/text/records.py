"""Records read in bounded memory: whole lines streamed in blocks and JSON lists element by element,
each record at most ``--max-record-bytes`` (``MAX_RECORD_BYTES`` by default), refused as soon as it is
known to be longer (naming its line or record), never held whole first."""

from __future__ import annotations

from typing import Iterator

from aura.core.errors import AuraError
from aura.core.files import raw_decode_json
from aura.text.sources import M

# The longest record (line, JSON element, CSV field, whole-file document) a reader holds in memory. A
# record is held a few times over while it is decoded, parsed and cleaned (bytes, str, the parsed
# object, the cleaned text: about 5x), so 64 MiB bounds one record at about 300 MB, while the longest
# real documents are far shorter (a whole novel such as Don Quijote is about 2 MiB of UTF-8).
MAX_RECORD_BYTES = 64 << 20


def blocks(read, sep, limit: int, too_long) -> Iterator[tuple[object, int]]:
    """(block, lines in it): blocks of whole lines of about ``BLOCK_BYTES`` (bytes or str, as ``read``
    returns), the last one possibly without its line end. A line longer than ``limit`` is refused
    (``too_long(line number)``) as soon as it is known to be, never held whole."""
    empty = sep[:0]
    pending: list = []  # the pieces of the unfinished line that starts the next block
    pending_len, line = 0, 1
    while True:
        chunk = read()
        if not chunk:
            if pending:
                yield empty.join(pending), 1
            return
        cut = chunk.rfind(sep)
        if cut < 0:
            pending.append(chunk)
            pending_len += len(chunk)
            if pending_len > limit:
                too_long(line)
            continue
        block = empty.join([*pending, chunk[: cut + 1]])
        rest = chunk[cut + 1 :]
        pending, pending_len = ([rest] if rest else []), len(rest)
        n = block.count(sep)
        if len(block) > limit:  # only then can one of its lines be too long
            start = 0
            for i in range(n):
                end = block.index(sep, start) + 1
                if end - start > limit:
                    too_long(line + i)
                start = end
        yield block, n
        line += n
        if pending_len > limit:
            too_long(line)


def size(n: int) -> str:
    """A byte count as the --max-record-bytes value a user would type (64MiB, 512KiB, 1000)."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def json_array(blocks: Iterator[str], *, path, limit: int) -> Iterator[tuple[int, object]]:
    """(record number, record) of a JSON list given as text ``blocks``, parsed element by element:
    memory holds one element (at most ``limit`` characters) and a block, never the whole list."""
    decode = raw_decode_json  # nesting too deep is a ValueError too
    buf, pos, eof = "", 0, False

    def more() -> bool:
        nonlocal buf, pos, eof
        text = next(blocks, None)
        if text is None:
            eof = True
            return False
        buf, pos = buf[pos:] + text, 0
        return True

    def skip() -> str:  # the next non-space character ("" at the end)
        nonlocal pos
        while True:
            while pos < len(buf) and buf[pos] in " \t\r\n":
                pos += 1
            if pos < len(buf) or not more():
                return buf[pos : pos + 1]

    def bad(err) -> AuraError:
        return AuraError(M("bad_json_file", path=path, err=f"{err} (record {n})"))

    skip()
    pos += 1  # the "["
    n = 0
    if skip() == "]":
        return
    while True:
        n += 1
        skip()  # raw_decode takes no leading space
        while True:
            try:
                record, end = decode(buf, pos)
            except ValueError as e:
                if len(buf) - pos > limit:
                    raise AuraError(
                        M("too_long_record", path=path, n=n, limit=size(limit), more=str(limit * 4))
                    ) from None
                if not eof and more():
                    continue
                raise bad(e.args[0] if e.args else e) from None
            if end == len(buf) and not eof and more():  # a number may go on in the next block
                continue
            break
        if end - pos > limit:
            raise AuraError(M("too_long_record", path=path, n=n, limit=size(limit), more=str(limit * 4)))
        pos = end
        yield n, record
        c = skip()
        if c == "]":
            pos += 1
            if skip():
                raise bad("Extra data")
            return
        if c != ",":
            raise bad(f"expected ',' or ']', found {c or 'the end of the file'!r}")
        pos += 1
