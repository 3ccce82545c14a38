"""Where documents come from: input paths and patterns expanded to ``Source`` objects (files, Hugging
Face datasets on disk or on the hub), opened as byte streams with decompression.
"""

from __future__ import annotations

import glob
import gzip
import io
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from aura.core.errors import AuraError
from aura.core.i18n import Messages

BLOCK_BYTES = 4 << 20  # bytes of whole lines decoded at once

M = Messages(
    "readers",
    {
        "missing": (
            "No existe la entrada {path}. Revisa la ruta (se aceptan archivos, directorios y "
            "patrones como 'datos/*.jsonl').",
            "The input {path} does not exist. Check the path (files, directories and patterns "
            "such as 'data/*.jsonl' are accepted).",
        ),
        "unreadable": (
            "No se puede leer {path}: {err}. Comprueba los permisos del archivo.",
            "Cannot read {path}: {err}. Check the file's permissions.",
        ),
        "no_supported": (
            "El directorio {path} no contiene archivos compatibles ({exts}).",
            "The directory {path} holds no supported files ({exts}).",
        ),
        "unsupported": (
            "Formato no compatible: {path}. Formatos aceptados: {exts}.",
            "Unsupported format: {path}. Accepted formats: {exts}.",
        ),
        "empty": (
            "El archivo {path} está vacío (no contiene ningún documento).",
            "The file {path} is empty (it holds no documents).",
        ),
        "bad_json": (
            "{path}, línea {line}: JSON no válido ({err}). Corrige la línea o usa "
            "--skip-bad-records para saltar los registros dañados.",
            "{path}, line {line}: invalid JSON ({err}). Fix the line or use --skip-bad-records "
            "to skip damaged records.",
        ),
        "bad_record_limit": (
            "--max-record-bytes debe ser un número de bytes mayor que 0 (es {value}).",
            "--max-record-bytes must be a number of bytes above 0 (it is {value}).",
        ),
        "too_long": (
            "{path}, línea {line}: el registro ocupa más de {limit} (--max-record-bytes). Aura lee cada "
            "registro entero en memoria; si es un documento de verdad, sube el límite (por ejemplo "
            "--max-record-bytes {more}); si no, al archivo le faltan saltos de línea (¿un "
            "JSON en una sola línea, un archivo binario?).",
            "{path}, line {line}: the record is larger than {limit} (--max-record-bytes). Aura holds each "
            "record whole in memory; if it is a real document, raise the limit (for example "
            "--max-record-bytes {more}); if not, the file lacks line breaks (a JSON on a "
            "single line, a binary file?).",
        ),
        "too_long_record": (
            "{path}, registro {n}: ocupa más de {limit} (--max-record-bytes). Sube el límite si es "
            "un documento de verdad (por ejemplo --max-record-bytes {more}) o divide el archivo.",
            "{path}, record {n}: it is larger than {limit} (--max-record-bytes). Raise the limit if "
            "it is a real document (for example --max-record-bytes {more}) or split the file.",
        ),
        "too_big": (
            "{path}: el archivo entero es un solo registro (un objeto JSON, o un texto leído con --doc-sep 'file') y "
            "ocupa más de "
            "{limit} (--max-record-bytes). Sube el límite (por ejemplo --max-record-bytes {more}) o divídelo en "
            "documentos (JSON Lines, o --doc-sep line|blankline).",
            "{path}: the whole file is one record (a JSON object, or --doc-sep file) and it is larger than "
            "{limit} (--max-record-bytes). Raise the limit (for example --max-record-bytes {more}) or split it into "
            "documents (JSON Lines, or --doc-sep line|blankline).",
        ),
        "bad_json_file": (
            "{path}: JSON no válido ({err}). Un .json debe ser una lista de objetos (o usa "
            "JSON Lines, un objeto por línea, con extensión .jsonl).",
            "{path}: invalid JSON ({err}). A .json file must be a list of objects (or use "
            "JSON Lines, one object per line, with the .jsonl extension).",
        ),
        "missing_field": (
            "{path}, registro {line}: no tiene el campo '{field}'. Campos encontrados: {found}. "
            "Elige uno con --text-field.",
            "{path}, record {line}: there is no field '{field}'. Fields found: {found}. Choose one with --text-field.",
        ),
        "not_text": (
            "{path}, registro {line}: el campo '{field}' no es texto (es {kind}).",
            "{path}, record {line}: the field '{field}' is not text (it is {kind}).",
        ),
        "missing_column": (
            "{path}: no hay columna '{field}'. Columnas encontradas: {found}. Elige una con --text-field.",
            "{path}: there is no column '{field}'. Columns found: {found}. Choose one with --text-field.",
        ),
        "bad_encoding": (
            "{path}: bytes no válidos en {encoding} en la posición {offset} (línea {line}). "
            "Indica la codificación correcta con --encoding (p. ej. latin-1) o usa "
            "--errors replace para sustituir los bytes dañados.",
            "{path}: invalid {encoding} bytes at byte offset {offset} (line {line}). Give the "
            "right encoding with --encoding (e.g. latin-1) or use --errors replace to "
            "replace the damaged bytes.",
        ),
        "bad_compressed": (
            "{path}: el archivo comprimido está dañado o incompleto ({err}).",
            "{path}: the compressed file is damaged or truncated ({err}).",
        ),
        "bad_parquet": (
            "{path}: no es un archivo Parquet válido ({err}).",
            "{path}: is not a valid Parquet file ({err}).",
        ),
        "hf_failed": (
            "No se pudo cargar el dataset de Hugging Face '{name}' ({err}). Comprueba el nombre, "
            "--hf-config, --split y la conexión, o guárdalo antes con save_to_disk.",
            "Could not load the Hugging Face dataset '{name}' ({err}). Check the name, "
            "--hf-config, --split and the connection, or save it first with save_to_disk.",
        ),
        "hf_split": (
            "El dataset {path} no tiene la partición '{split}' (tiene: {have}). Elige una con --split.",
            "The dataset {path} has no '{split}' split (it has: {have}). Choose one with --split.",
        ),
        "bad_encoding_name": ("Codificación desconocida: '{encoding}'.", "Unknown encoding: '{encoding}'."),
    },
)


TEXT_FORMATS = ("txt", "jsonl", "json", "csv", "tsv", "parquet")


COMPRESSIONS = ("gz", "zst")


SUPPORTED = tuple(f".{f}" for f in TEXT_FORMATS) + tuple(f".{f}.{c}" for f in TEXT_FORMATS for c in COMPRESSIONS)


@dataclass
class Source:
    """One input: a file, a dataset saved with save_to_disk, or a hub dataset name."""

    kind: str  # file | hf_disk | hf_hub
    path: str
    fmt: str = ""  # txt | jsonl | json | csv | tsv | parquet (files only)
    compression: str = ""  # "" | gz | zst
    bytes: int = 0
    position: int = field(default=0, compare=False)  # raw bytes consumed so far (progress)


def _format_of(path: Path) -> tuple[str, str] | None:
    parts = path.name.lower().split(".")
    if len(parts) < 2:
        return None
    comp = parts[-1] if parts[-1] in COMPRESSIONS else ""
    fmt = parts[-2] if comp and len(parts) >= 3 else (parts[-1] if not comp else "")
    return (fmt, comp) if fmt in TEXT_FORMATS else None


def is_hf_disk_dir(path: Path) -> bool:
    return path.is_dir() and (
        (path / "dataset_info.json").is_file()
        and (path / "state.json").is_file()
        or (path / "dataset_dict.json").is_file()
    )


def _file_source(p: Path) -> Source:
    fc = _format_of(p)
    if fc is None:
        raise AuraError(M("unsupported", path=p, exts=", ".join(SUPPORTED[:6]) + " (+ .gz, .zst)"))
    try:
        size = p.stat().st_size
        with open(p, "rb"):
            pass
    except OSError as e:
        raise AuraError(M("unreadable", path=p, err=e.strerror or e)) from None
    if size == 0:
        raise AuraError(M("empty", path=p))
    return Source("file", str(p), fc[0], fc[1], size)


def walk_inputs(
    inputs: list[str], accepts: Callable[[Path], bool], exts: str, *, whole_dir: Callable[[Path], bool] | None = None
) -> Iterator[Path]:
    """The one walk of input arguments: a file as given, a directory's files that ``accepts`` takes
    (searched recursively, hidden entries skipped, sorted), a glob pattern's matches (sorted), in the
    order given. A directory for which ``whole_dir`` is true is yielded itself (a saved dataset).
    ``exts`` names the accepted formats in the message of a directory with none of them."""
    for item in inputs:
        p = Path(os.path.expanduser(item))
        if glob.has_magic(item) and not p.exists():
            matches = sorted(glob.glob(os.path.expanduser(item), recursive=True))
            if not matches:
                raise AuraError(M("missing", path=item))
            yield from walk_inputs(matches, accepts, exts, whole_dir=whole_dir)
        elif whole_dir is not None and whole_dir(p):
            yield p
        elif p.is_dir():
            found = [
                f
                for f in sorted(p.rglob("*"))
                if f.is_file() and accepts(f) and not any(part.startswith(".") for part in f.relative_to(p).parts)
            ]
            if not found:
                raise AuraError(M("no_supported", path=p, exts=exts))
            yield from found
        elif p.is_file():
            yield p
        elif p.exists():
            raise AuraError(M("unreadable", path=p, err="not a regular file"))
        else:
            raise AuraError(M("missing", path=item))


def expand_inputs(inputs: list[str]) -> list[Source]:
    """Files, directories (searched recursively) and glob patterns -> sources, in a stable order."""
    exts = ", ".join(SUPPORTED[:6]) + " (+ .gz, .zst)"
    return [
        Source("hf_disk", str(p), bytes=_tree_bytes(p)) if p.is_dir() else _file_source(p)
        for p in walk_inputs(inputs, lambda f: _format_of(f) is not None, exts, whole_dir=is_hf_disk_dir)
    ]


def _tree_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


class _Counting(io.RawIOBase):
    """Wraps the raw file so progress can follow the bytes read from disk (compressed or not)."""

    def __init__(self, f, source: Source):
        self.f, self.source = f, source

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = self.f.readinto(b)
        self.source.position += n or 0
        return n

    def close(self) -> None:
        self.f.close()
        super().close()


def open_binary(source: Source):
    """A buffered binary stream of the decompressed content of a file source."""
    raw = _Counting(open(source.path, "rb", buffering=0), source)
    if source.compression == "gz":
        return io.BufferedReader(gzip.GzipFile(fileobj=io.BufferedReader(raw), mode="rb"), BLOCK_BYTES)
    if source.compression == "zst":
        import zstandard

        reader = zstandard.ZstdDecompressor().stream_reader(io.BufferedReader(raw), read_across_frames=True)
        return io.BufferedReader(reader, BLOCK_BYTES)
    return io.BufferedReader(raw, BLOCK_BYTES)


def hf_source(name: str) -> Source:
    """``--hf-dataset NAME``: a local save_to_disk directory, or a hub dataset streamed by name."""
    p = Path(os.path.expanduser(name))
    if is_hf_disk_dir(p):
        return Source("hf_disk", str(p), bytes=_tree_bytes(p))
    return Source("hf_hub", name)
