"""Read-only view of a prepared dataset directory (format ``aura-tokens-v1``, see docs/architecture.md).

A split is a list of flat token shards (numpy memmaps); ``TokenShards.read(start, n)`` returns ``n``
consecutive tokens of the split across shard boundaries, so samplers can treat a split as one stream.
"""

from __future__ import annotations

import bisect
import json
from pathlib import Path

import numpy as np

from aura.core.errors import AuraError
from aura.core.i18n import Messages

FORMAT = "aura-tokens-v1"

M = Messages("tokens", {
    "not_dir": ("{path} no existe o no es un directorio de datos preparados. Créalo con: "
                "aura data prepare TEXTOS --tokenizer TOK --output-dir {path}",
                "{path} does not exist or is not a prepared data directory. Create it with: "
                "aura data prepare TEXTS --tokenizer TOK --output-dir {path}"),
    "no_meta": ("{path} no contiene meta.json: no es un conjunto de datos preparado completo (quizá "
                "se interrumpió). Vuelve a ejecutar 'aura data prepare ... --output-dir {path}'.",
                "{path} has no meta.json: it is not a complete prepared dataset (perhaps it was "
                "interrupted). Run 'aura data prepare ... --output-dir {path}' again."),
    "bad_meta": ("{path}/meta.json no es válido ({err}). Vuelve a preparar los datos con --force.",
                 "{path}/meta.json is not valid ({err}). Prepare the data again with --force."),
    "bad_format": ("{path} tiene formato '{found}', se esperaba '{expected}'. Vuelve a preparar los "
                   "datos con esta versión de Aura.",
                   "{path} has format '{found}', expected '{expected}'. Prepare the data again with "
                   "this version of Aura."),
    "no_split": ("{path} no tiene la partición '{split}' (tiene: {have}).",
                 "{path} has no '{split}' split (it has: {have})."),
    "shard_size": ("El shard {file} tiene {found:token|tokens} pero meta.json dice {expected}: el directorio "
                   "está dañado. Vuelve a preparar los datos con --force.",
                   "Shard {file} holds {found:token|tokens} but meta.json says {expected}: the directory is "
                   "damaged. Prepare the data again with --force."),
})


def load_meta(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_dir():
        raise AuraError(M("not_dir", path=path))
    meta_file = path / "meta.json"
    if not meta_file.is_file():
        raise AuraError(M("no_meta", path=path))
    try:
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
        found = meta.get("format")
    except (OSError, ValueError, AttributeError) as e:
        raise AuraError(M("bad_meta", path=path, err=e)) from None
    if found != FORMAT:
        raise AuraError(M("bad_format", path=path, found=found, expected=FORMAT))
    return meta


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
        for shard in splits[split]["shards"]:
            file = self.path / shard["file"]
            arr = np.memmap(file, dtype=self.dtype, mode="r") if shard["tokens"] else np.empty(0, self.dtype)
            if len(arr) != int(shard["tokens"]):
                raise AuraError(M("shard_size", file=file, found=len(arr), expected=shard["tokens"]))
            self._arrays.append(arr)
            self._starts.append(total)
            total += len(arr)
        self._len = total

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
            arr = self._arrays[i]
            take = min(length - filled, len(arr) - pos)
            out[filled:filled + take] = arr[pos:pos + take]
            filled += take
            i, pos = i + 1, 0
        return out
