"""Aura replaces only what Aura wrote: ownership markers and the checks every output goes through.

Every directory Aura writes (a tokenizer, a prepared dataset, a run, a model, a checkpoint) carries a
small marker file, ``.aura-dir.json`` = ``{kind, aura_version, created}``, written last inside the
staged directory. The rule (docs/architecture.md, "What Aura replaces, and when"):

* an output that does not exist, or is an empty directory, is written;
* an existing output is replaced (``--overwrite``) only when its marker names the same
  kind; a directory without Aura's marker is never replaced or cleared, whatever the flags;
* an output is never ``/``, the home directory, the current directory (or one of its parents), and
  never is, contains or lies inside one of the command's inputs.

Directories written by Aura before markers existed (prepared data, tokenizers, merged models) count as
Aura's only when their layout is exactly Aura's: its metadata file with Aura's content and nothing but
the file names Aura writes there (``legacy_kind``).
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Iterable

from aura.core.errors import AuraError
from aura.core.i18n import Messages

MARKER = ".aura-dir.json"
KINDS = ("tokenizer", "data", "run", "model", "adapter", "checkpoint")

M = Messages(
    "ownership",
    {
        "not_ours": (
            "{path} ya existe y no lo creó Aura (no tiene {marker}{kind_note}). Aura nunca borra ni "
            "sustituye lo que no escribió, tampoco con {flag}. Elige otra ruta de salida, o vacía o "
            "borra ese directorio tú mismo si de verdad quieres usarlo.",
            "{path} already exists and was not created by Aura (it has no {marker}{kind_note}). Aura "
            "never deletes or replaces what it did not write, not even with {flag}. Choose another "
            "output path, or empty or delete that directory yourself if you really want to use it.",
        ),
        "other_kind": (" de tipo '{kind}'; es de tipo '{found}'", " of kind '{kind}'; it is of kind '{found}'"),
        "forbidden": (
            "{path} no puede ser una salida: es {what}. Aura escribe sus resultados en un directorio "
            "propio; indica uno nuevo (por ejemplo {example}).",
            "{path} cannot be an output: it is {what}. Aura writes its results into a directory of "
            "their own; give a new one (for example {example}).",
        ),
        "w_root": ("la raíz del sistema (/)", "the filesystem root (/)"),
        "w_home": ("tu directorio personal", "your home directory"),
        "w_cwd": ("el directorio actual o uno que lo contiene", "the current directory or one that contains it"),
        "overlaps": (
            "La salida {out} {relation} la entrada {inp}: escribirla podría borrar o mezclar tus datos. "
            "Usa una ruta de salida fuera de las entradas.",
            "The output {out} {relation} the input {inp}: writing it could delete or mix up your data. "
            "Use an output path outside the inputs.",
        ),
        "r_is": ("es", "is"),
        "r_inside": ("está dentro de", "lies inside"),
        "r_contains": ("contiene", "contains"),
        "file_not_ours": (
            "{path} ya existe y no lo escribió Aura: {flag} no lo sobrescribe. Elige otro archivo, o "
            "añade --overwrite si de verdad quieres sustituirlo.",
            "{path} already exists and was not written by Aura: {flag} does not overwrite it. Choose "
            "another file, or add --overwrite if you really want to replace it.",
        ),
        "file_is_dir": (
            "{flag} {path} es un directorio, no un archivo. Indica un archivo (por ejemplo {path}/{name}).",
            "{flag} {path} is a directory, not a file. Give a file (for example {path}/{name}).",
        ),
    },
)
# Single-file outputs (aura eval's JSON, aura generate's JSONL, aura plot's image) are recognised as Aura's
# by their content: JSON with "aura_version" at the top (or the exact keys of an older eval.json), and
# the marks generate and plot put in their own formats (``check_output_file(..., ours=...)``).
_OLD_EVAL_KEYS = {"data", "split", "max_tokens", "results"}


def marker_payload(kind: str, **info) -> dict:
    from aura import __version__

    assert kind in KINDS, kind
    return {"kind": kind, "aura_version": __version__, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **info}


def write_marker(directory: str | os.PathLike, kind: str, **info) -> None:
    """Mark ``directory`` as an Aura ``kind`` directory (call last, inside the staged directory)."""
    from aura.core.atomic import atomic_write_json

    atomic_write_json(Path(directory) / MARKER, marker_payload(kind, **info))


def read_marker(directory: str | os.PathLike) -> dict | None:
    """The marker of ``directory``, or None when it has none (or an unreadable one). A marker that is a
    symlink (another directory's marker borrowed to make this one look like Aura's) is no marker."""
    import json

    try:
        fd = os.open(Path(directory) / MARKER, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with open(fd, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("kind"), str) else None


def owned_kind(directory: str | os.PathLike) -> str | None:
    """The kind of Aura directory ``directory`` is: its marker's, else a recognised legacy layout's."""
    marker = read_marker(directory)
    return marker["kind"] if marker else legacy_kind(directory)


# Directories written before the marker existed are recognised by their exact layout: the metadata file
# Aura writes (with Aura's own content) and nothing but the file names Aura itself writes there. One
# foreign name (a user's notes.txt, a .git) and the directory is not Aura's any more.
_TOKENIZER_FILES = {
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "aura_tokenizer.json",
}
_LEGACY = {
    "data": ("meta.json", re.compile(r"meta\.json|(train|val)_\d{5}\.bin|tokenizer")),
    "tokenizer": ("aura_tokenizer.json", re.compile("|".join(re.escape(n) for n in sorted(_TOKENIZER_FILES)))),
    "model": (
        "aura_merge.json",
        re.compile(
            r"aura_merge\.json|config\.json|generation_config\.json|"
            r"model(-\d{5}-of-\d{5})?\.safetensors|model\.safetensors\.index\.json|"
            + "|".join(re.escape(n) for n in sorted(_TOKENIZER_FILES))
        ),
    ),
}


def _legacy_meta_ok(kind: str, meta: dict) -> bool:
    if kind == "data":
        return meta.get("format") == "aura-tokens-v1" and "aura_version" in meta
    if kind == "tokenizer":
        return isinstance(meta.get("hash"), str) and "aura_version" in meta
    return "aura_version" in meta and "adapter" in meta


def legacy_kind(directory: str | os.PathLike) -> str | None:
    """The kind of a directory Aura wrote before ownership markers (see ``_LEGACY``), or None."""
    import json

    path = Path(directory)
    try:
        names = {p.name: p.is_dir() for p in path.iterdir()}
    except OSError:
        return None
    for kind, (meta_name, allowed) in _LEGACY.items():
        if names.get(meta_name) is not False:  # absent, or a directory
            continue
        if not all(allowed.fullmatch(n) and (is_dir == (n == "tokenizer")) for n, is_dir in names.items()):
            continue
        try:
            meta = json.loads((path / meta_name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(meta, dict) and _legacy_meta_ok(kind, meta):
            return kind
    return None


def is_empty_dir(path: Path) -> bool:
    try:
        return path.is_dir() and not any(path.iterdir())
    except OSError:
        return False


def check_location(target: str | os.PathLike, *, inputs: Iterable[str | os.PathLike] = ()) -> Path:
    """Refuse an output that is /, $HOME, the cwd (or a parent of it), or overlaps an input."""
    out = Path(target).expanduser().resolve()
    example = "runs/nuevo" if _lang_es() else "runs/new"
    cwd = Path.cwd().resolve()
    home = Path.home().resolve()
    what = None
    if out == Path(out.anchor):
        what = "w_root"
    elif out == home:
        what = "w_home"
    elif out == cwd or out in cwd.parents:
        what = "w_cwd"
    if what:
        raise AuraError(M("forbidden", path=target, what=M(what), example=example))
    for raw in inputs:
        if raw is None:
            continue
        inp = Path(raw).expanduser()
        if not inp.exists():
            continue
        inp = inp.resolve()
        relation = (
            "r_is" if out == inp else "r_inside" if inp in out.parents else "r_contains" if out in inp.parents else None
        )
        if relation:
            raise AuraError(M("overlaps", out=target, inp=raw, relation=M(relation)))
    return out


def aura_json(path: Path, *, max_bytes: int = 64 << 20) -> bool:
    """True for a JSON file Aura wrote: an object with ``aura_version`` (or an older eval.json's keys)."""
    import json

    try:
        if path.stat().st_size > max_bytes:
            return False
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and ("aura_version" in data or set(data) == _OLD_EVAL_KEYS)


def check_output_file(
    target: str | os.PathLike,
    *,
    flag: str,
    overwrite: bool,
    inputs: Iterable[str | os.PathLike | None] = (),
    ours=aura_json,
) -> Path:
    """Refuse, before any work, a single-file output that is one of the command's inputs or lies inside an
    input folder (a model, a run, a prepared dataset: never, whatever the flags), that is a directory, or
    that is an existing file Aura did not write (``ours(path)`` false, a symlink included) unless
    ``overwrite``. Returns the path."""
    path = Path(target).expanduser()
    out = path.resolve()
    for raw in inputs:
        if not raw:
            continue
        inp = Path(raw).expanduser()
        if not inp.exists():
            continue
        same = path.exists() and os.path.samefile(path, inp)  # a hard link to an input too
        inside = inp.is_dir() and inp.resolve() in out.parents
        if same or inside or out == inp.resolve():
            raise AuraError(M("overlaps", out=target, inp=raw, relation=M("r_is" if not inside else "r_inside")))
    if path.is_dir() and not path.is_symlink():
        raise AuraError(
            M("file_is_dir", flag=flag, path=target, name="resultados.json" if _lang_es() else "results.json")
        )
    if (path.exists() or path.is_symlink()) and not overwrite and (path.is_symlink() or not ours(path)):
        raise AuraError(M("file_not_ours", path=target, flag=flag))
    return path


def check_replaceable(
    target: str | os.PathLike,
    *,
    kind: str | tuple[str, ...],
    flag: str = "--overwrite",
    inputs: Iterable[str | os.PathLike] = (),
) -> str:
    """Where ``target`` stands before a write: "absent", "empty" or "owned" (same-kind Aura dir).

    Raises AuraError for a forbidden location, an overlap with an input, a file in the way, or an
    existing non-empty directory that is not an Aura directory of ``kind`` (never replaced).
    """
    kinds = (kind,) if isinstance(kind, str) else tuple(kind)
    path = Path(target)
    check_location(path, inputs=inputs)
    if not path.exists() and not path.is_symlink():
        return "absent"
    if path.is_dir() and not path.is_symlink():
        if is_empty_dir(path):
            return "empty"
        found = owned_kind(path)
        if found in kinds:
            return "owned"
        note = M("other_kind", kind="/".join(kinds), found=found) if found else ""
        raise AuraError(M("not_ours", path=target, marker=MARKER, kind_note=note, flag=flag))
    raise AuraError(M("not_ours", path=target, marker=MARKER, kind_note="", flag=flag))


def _lang_es() -> bool:
    from aura.core.i18n import current_lang

    return current_lang() == "es"
