"""Read-only view of a prepared dataset directory (format ``aura-tokens-v1``, see docs/architecture.md).

A split is a list of flat token shards (numpy memmaps); ``TokenShards.read(start, n)`` returns ``n``
consecutive tokens of the split across shard boundaries, so samplers can treat a split as one stream.
"""

from __future__ import annotations

import bisect
from pathlib import Path

import numpy as np

from aura.core.errors import AuraError
from aura.core.files import loads_json
from aura.core.i18n import Messages
from aura.core.paths import contained

FORMAT = "aura-tokens-v1"

M = Messages(
    "tokens",
    {
        "not_dir": (
            "{path} no existe o no es un directorio de datos preparados. Créalo con: "
            "aura data prepare TEXTOS --tokenizer TOK --output-dir {path}",
            "{path} does not exist or is not a prepared data directory. Create it with: "
            "aura data prepare TEXTS --tokenizer TOK --output-dir {path}",
        ),
        "no_meta": (
            "{path} no contiene meta.json: no es un conjunto de datos preparado completo (quizá "
            "se interrumpió). Vuelve a ejecutar 'aura data prepare ... --output-dir {path}'.",
            "{path} has no meta.json: it is not a complete prepared dataset (perhaps it was "
            "interrupted). Run 'aura data prepare ... --output-dir {path}' again.",
        ),
        "bad_meta": (
            "{path}/meta.json no es válido ({err}). Vuelve a preparar los datos con --overwrite.",
            "{path}/meta.json is not valid ({err}). Prepare the data again with --overwrite.",
        ),
        "bad_format": (
            "{path} tiene formato '{found}', se esperaba '{expected}'. Vuelve a preparar los "
            "datos con esta versión de Aura.",
            "{path} has format '{found}', expected '{expected}'. Prepare the data again with this version of Aura.",
        ),
        "bad_field": (
            "{path}: el campo '{field}' debe ser {expected} (es {found}). El archivo se editó o está dañado: "
            "vuelve a preparar los datos con --overwrite.",
            "{path}: the field '{field}' must be {expected} (it is {found}). The file was edited or is "
            "damaged: prepare the data again with --overwrite.",
        ),
        "no_field": (
            "A {path} le falta el campo '{field}' ({expected}). El archivo se editó o está dañado: vuelve a "
            "preparar los datos con --overwrite.",
            "{path} lacks the field '{field}' ({expected}). The file was edited or is damaged: prepare the "
            "data again with --overwrite.",
        ),
        "e_object": ("un objeto", "an object"),
        "e_list": ("una lista de objetos", "a list of objects"),
        "e_count": ("un número entero >= 0", "a whole number >= 0"),
        "e_text": ("un texto", "a string"),
        "e_dtype": ("uint16 o uint32", "uint16 or uint32"),
        "no_split": (
            "{path} no tiene la partición '{split}' (tiene: {have}).",
            "{path} has no '{split}' split (it has: {have}).",
        ),
        "bad_ids": (
            "El shard {file} contiene el id de token {found}, pero el vocabulario de meta.json tiene "
            "{vocab:token|tokens} (ids 0 a {vocab} - 1): el directorio está dañado o no corresponde a este "
            "tokenizador. Vuelve a preparar los datos con --overwrite.",
            "Shard {file} holds token id {found}, but meta.json's vocabulary has {vocab:token|tokens} "
            "(ids 0 to {vocab} - 1): the directory is damaged or does not belong to this tokenizer. "
            "Prepare the data again with --overwrite.",
        ),
        "shard_size": (
            "El shard {file} tiene {found:token|tokens} pero meta.json dice {expected}: el directorio "
            "está dañado. Vuelve a preparar los datos con --overwrite.",
            "Shard {file} holds {found:token|tokens} but meta.json says {expected}: the directory is "
            "damaged. Prepare the data again with --overwrite.",
        ),
    },
)


def load_meta(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_dir():
        raise AuraError(M("not_dir", path=path))
    meta_file = path / "meta.json"
    if not meta_file.is_file():
        raise AuraError(M("no_meta", path=path))
    try:
        meta = loads_json(meta_file.read_bytes())
        found = meta.get("format")
    except (OSError, ValueError, AttributeError) as e:
        raise AuraError(M("bad_meta", path=path, err=e)) from None
    if found != FORMAT:
        raise AuraError(M("bad_format", path=path, found=found, expected=FORMAT))
    check_meta(meta, meta_file)
    return meta


def check_meta(meta: dict, meta_file: Path) -> None:
    """Every field readers use has its type (an edited or damaged meta.json is named, not a KeyError)."""

    def need(value, field: str, kind: str):
        ok = {
            "e_object": isinstance(value, dict),
            "e_list": isinstance(value, list) and all(isinstance(v, dict) for v in value),
            "e_text": isinstance(value, str),
            "e_count": type(value) is int and value >= 0,
            "e_dtype": value in ("uint16", "uint32"),
        }[kind]
        if value is _MISSING:
            raise AuraError(M("no_field", path=meta_file, field=field, expected=M(kind)))
        if not ok:
            raise AuraError(M("bad_field", path=meta_file, field=field, expected=M(kind), found=repr(value)[:60]))
        return value

    tok = need(meta.get("tokenizer", _MISSING), "tokenizer", "e_object")
    for key in ("vocab_size", "eos_token_id"):
        need(tok.get(key, _MISSING), f"tokenizer.{key}", "e_count")
    need(tok.get("hash", _MISSING), "tokenizer.hash", "e_text")
    need(meta.get("dtype", _MISSING), "dtype", "e_dtype")
    for name, split in need(meta.get("splits", _MISSING), "splits", "e_object").items():
        need(split, f"splits.{name}", "e_object")
        for i, shard in enumerate(need(split.get("shards", _MISSING), f"splits.{name}.shards", "e_list")):
            need(shard.get("file", _MISSING), f"splits.{name}.shards[{i}].file", "e_text")
            need(shard.get("tokens", _MISSING), f"splits.{name}.shards[{i}].tokens", "e_count")


_MISSING = object()


def is_prepared_dir(path: str | Path) -> bool:
    p = Path(path)
    return p.is_dir() and (p / "meta.json").is_file()


class TokenShards:
    """The token stream of one split (``train`` or ``val``) of a prepared directory."""

    def __init__(self, path: str | Path, split: str = "train"):
        self.path = Path(path)
        self.meta = load_meta(self.path)
        splits = self.meta.get("splits", {})
        if split not in splits:
            raise AuraError(M("no_split", path=self.path, split=split, have=", ".join(splits) or "-"))
        self.split = split
        self.dtype = np.dtype(self.meta["dtype"])
        self.eos_id = int(self.meta["tokenizer"]["eos_token_id"])
        self.vocab_size = int(self.meta["tokenizer"]["vocab_size"])
        self.num_documents = int(splits[split].get("documents", 0))
        self._arrays: list[np.ndarray] = []
        self._starts: list[int] = []
        total = 0
        self._files: list[Path] = []
        for shard in splits[split]["shards"]:
            file = contained(self.path, shard["file"], source=self.path / "meta.json")  # never outside the dir
            arr = np.memmap(file, dtype=self.dtype, mode="r") if shard["tokens"] else np.empty(0, self.dtype)
            if len(arr) != int(shard["tokens"]):
                raise AuraError(M("shard_size", file=file, found=len(arr), expected=shard["tokens"]))
            self._arrays.append(arr)
            self._files.append(file)
            self._starts.append(total)
            total += len(arr)
        self._len = total
        self._checked = [False] * len(self._arrays)  # ids below the vocabulary: one max() per shard, once

    def _check_ids(self, i: int) -> None:
        arr = self._arrays[i]
        top = int(arr.max()) if len(arr) else -1
        if top >= self.vocab_size:
            raise AuraError(M("bad_ids", file=self._files[i], found=top, vocab=self.vocab_size))
        self._checked[i] = True

    def __len__(self) -> int:
        return self._len

    @property
    def tokenizer_hash(self) -> str:
        return self.meta["tokenizer"]["hash"]

    def read(self, start: int, length: int) -> np.ndarray:
        """``length`` tokens from position ``start`` of the split (as int64), across shards."""
        if start < 0 or start + length > self._len:
            raise IndexError(f"read({start}, {length}) outside a split of {self._len} tokens")
        out = np.empty(length, dtype=np.int64)
        i = bisect.bisect_right(self._starts, start) - 1
        pos, filled = start - self._starts[i], 0
        while filled < length:
            if not self._checked[i]:
                self._check_ids(i)
            arr = self._arrays[i]
            take = min(length - filled, len(arr) - pos)
            out[filled : filled + take] = arr[pos : pos + take]
            filled += take
            i, pos = i + 1, 0
        return out
