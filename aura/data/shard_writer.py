"""Writing a prepared dataset's token shards (``ShardWriter``), beside the module that reads them."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np


class ShardWriter:
    """Appends tokens to ``{prefix}_00000.bin``, ``_00001.bin``... of at most ``shard_tokens`` each."""

    def __init__(self, root: Path, prefix: str, *, shard_tokens: int, dtype: str):
        self.root, self.prefix, self.shard_tokens = root, prefix, shard_tokens
        self.dtype = np.dtype(dtype)
        self.shards: list[dict] = []
        self.tokens = self.documents = 0
        self._f = None

    def write(self, arr: np.ndarray) -> None:
        while len(arr):
            if self._f is None or self.shards[-1]["tokens"] >= self.shard_tokens:
                self._open()
            take = min(len(arr), self.shard_tokens - self.shards[-1]["tokens"])
            self._f.write(arr[:take].tobytes())
            self.shards[-1]["tokens"] += take
            self.tokens += take
            arr = arr[take:]

    def _open(self) -> None:
        if self._f is not None:
            self._f.close()
        name = f"{self.prefix}_{len(self.shards):05d}.bin"
        self._f = open(self.root / name, "wb")
        self.shards.append({"file": name, "tokens": 0})

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None


def move_to_val(train: ShardWriter, val: ShardWriter, root: Path, start: int, length: int) -> None:
    """Move tokens [start, start+length) of the train stream to val (the forced validation document)."""
    old, train_tokens = train.shards, train.tokens
    for shard in old:
        os.replace(root / shard["file"], root / f"old-{shard['file']}")
    train.shards, train.tokens = [], 0
    pos = 0
    for shard in old:
        arr = np.fromfile(root / f"old-{shard['file']}", dtype=val.dtype)
        a, b = max(start - pos, 0), min(start + length - pos, len(arr))
        if a < b:
            train.write(arr[:a])
            val.write(arr[a:b])
            train.write(arr[b:])
        else:
            train.write(arr)
        pos += len(arr)
        os.unlink(root / f"old-{shard['file']}")
    train.close()
    assert train.tokens == train_tokens - length
