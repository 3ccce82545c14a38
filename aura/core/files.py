"""Files that come from elsewhere (a colleague's checkpoint, a downloaded model, an edited config),
checked before a library parses them, so that damage is an error naming the file and the fix rather
than a traceback from deep inside json, safetensors or transformers.

* ``loads_json``: ``json.loads`` whose every failure is a ``ValueError`` (nesting deeper than Python's
  parser recurses is a ``RecursionError`` otherwise), so a reader's ``except ValueError`` covers it.
* ``read_json_object``: the JSON object a file holds (a config, a manifest), or an ``AuraError``.
* ``check_safetensors``: the header of a ``.safetensors`` file agrees with its size (a truncated copy,
  a header that lies about the data) without reading the tensors.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

from aura.core.errors import AuraError
from aura.core.i18n import Messages

M = Messages(
    "files",
    {
        "too_deep": (
            "anidado a más profundidad de la que admite el lector de Python (unos {depth:nivel|niveles})",
            "nested deeper than Python's parser allows (about {depth:level|levels})",
        ),
        "bad_json": ("{path} no es JSON válido ({err}). {fix}", "{path} is not valid JSON ({err}). {fix}"),
        "not_object": (
            '{path} debe contener un objeto JSON ({{"clave": valor, ...}}) y contiene {kind}. {fix}',
            '{path} must hold a JSON object ({{"key": value, ...}}) but holds {kind}. {fix}',
        ),
        "unreadable": ("No se puede leer {path}: {err}.", "Cannot read {path}: {err}."),
        "fix_copy": (
            "Vuelve a copiarlo desde su origen o regenéralo con el comando que lo creó.",
            "Copy it again from where it came from, or write it again with the command that made it.",
        ),
        "bad_weights": (
            "{path} está dañado o incompleto: {why}. Vuelve a copiarlo desde su origen (o usa otro "
            "checkpoint de la ejecución).",
            "{path} is damaged or incomplete: {why}. Copy it again from where it came from (or use "
            "another checkpoint of the run).",
        ),
        "w_short": ("tiene {size:byte|bytes}, menos que la cabecera", "it has {size:byte|bytes}, less than its header"),
        "w_header": ("la cabecera no es válida ({err})", "its header is not valid ({err})"),
        "w_offsets": ("el tensor '{name}' tiene desplazamientos no válidos", "tensor '{name}' has invalid offsets"),
        "w_size": (
            "la cabecera describe {expected:byte|bytes} y el archivo tiene {size} (¿copia cortada?)",
            "its header describes {expected:byte|bytes} and the file has {size} (a cut-off copy?)",
        ),
        "k_list": ("una lista", "a list"),
        "k_str": ("un texto", "a string"),
        "k_num": ("un número", "a number"),
        "k_bool": ("un booleano", "a boolean"),
        "k_null": ("el valor null", "null"),
    },
)

# safetensors' own reader refuses headers above 100 MB; a real one is a few hundred KB at most.
MAX_HEADER_BYTES = 100_000_000


def loads_json(text: str | bytes):
    """``json.loads``, with nesting deeper than the parser can recurse reported as a ``ValueError``."""
    try:
        return json.loads(text)
    except RecursionError:
        import sys

        raise ValueError(M("too_deep", depth=sys.getrecursionlimit())) from None


def raw_decode_json(text: str, pos: int = 0) -> tuple[object, int]:
    """``json.JSONDecoder().raw_decode`` (one value starting at ``pos``, and where it ends), with the same
    ``ValueError`` as ``loads_json`` for nesting too deep."""
    try:
        return _DECODER.raw_decode(text, pos)
    except RecursionError:
        import sys

        raise ValueError(M("too_deep", depth=sys.getrecursionlimit())) from None


_DECODER = json.JSONDecoder()


def _kind(value) -> str:
    key = {list: "k_list", str: "k_str", int: "k_num", float: "k_num", bool: "k_bool", type(None): "k_null"}.get(
        type(value)
    )
    return M(key) if key else type(value).__name__


def read_json_object(path: str | os.PathLike, *, fix: str | None = None) -> dict:
    """The JSON object in ``path``; anything else (unreadable, not JSON, too deep, a list) is an
    ``AuraError`` naming the file, what it holds and ``fix`` (default: copy or write it again)."""
    path = Path(path)
    fix = fix or M("fix_copy")
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise AuraError(M("unreadable", path=path, err=e.strerror or e)) from None
    try:
        data = loads_json(raw)
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError, too deep
        raise AuraError(M("bad_json", path=path, err=e, fix=fix)) from None
    if not isinstance(data, dict):
        raise AuraError(M("not_object", path=path, kind=_kind(data), fix=fix))
    return data


def check_safetensors(path: str | os.PathLike) -> None:
    """Refuse a ``.safetensors`` file whose header is not valid JSON describing exactly the bytes that
    follow it (8-byte length, header, then the tensors end to end). Reads the header only."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(8)
            n = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
            if n < 0 or n > MAX_HEADER_BYTES or 8 + n > size:
                raise AuraError(M("bad_weights", path=path, why=M("w_short", size=size)))
            header = loads_json(f.read(n))
    except OSError as e:
        raise AuraError(M("unreadable", path=path, err=e.strerror or e)) from None
    except ValueError as e:
        raise AuraError(M("bad_weights", path=path, why=M("w_header", err=e))) from None
    if not isinstance(header, dict):
        raise AuraError(M("bad_weights", path=path, why=M("w_header", err=_kind(header))))
    end = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        offsets = info.get("data_offsets") if isinstance(info, dict) else None
        if not (
            isinstance(offsets, list)
            and len(offsets) == 2
            and all(type(o) is int for o in offsets)
            and 0 <= offsets[0] <= offsets[1]
        ):
            raise AuraError(M("bad_weights", path=path, why=M("w_offsets", name=name)))
        end = max(end, offsets[1])
    if 8 + n + end != size:
        raise AuraError(M("bad_weights", path=path, why=M("w_size", expected=8 + n + end, size=size)))


def check_model_files(directory: str | os.PathLike) -> None:
    """A local model dir's config.json is a JSON object and its ``*.safetensors`` files are whole."""
    directory = Path(directory)
    if (directory / "config.json").is_file():
        read_json_object(directory / "config.json")
    for f in sorted(directory.glob("*.safetensors")):
        check_safetensors(f)
