"""Exact deduplication with a fixed-size digest per document: 8 bytes each, whatever the documents' size.

``aura data prepare`` keeps the 64-bit content digest (the first 8 bytes of a blake2b digest of the
cleaned text) of every distinct document it has kept. A Python ``set`` of ints costs about 60-100 bytes
per document (an int object plus a hash-table slot, see docs/benchmarks.md); ``DigestSet`` keeps them
as sorted numpy runs of ``uint64``: 8 bytes per document, 16 at the instant the two largest runs merge.

Each batch's new digests become a sorted run; runs of similar length are merged (a binary counter), so
there are at most log2(n) runs, a batch is looked up with one ``searchsorted`` per run, and the work of
all merges is O(n log n). 100 million documents take 800 MB. Two different documents share a 64-bit
digest with probability about n^2 / 2^65 (one in 3,700 for 100 million documents): then the second is
dropped as a duplicate.
"""

from __future__ import annotations

import numpy as np


class DigestSet:
    """A set of uint64 digests (see the module docstring)."""

    def __init__(self) -> None:
        self._runs: list[np.ndarray] = []  # sorted, disjoint; lengths shrink towards the end
        self._n = 0

    def __len__(self) -> int:
        return self._n

    @property
    def nbytes(self) -> int:
        """Bytes held by the digests (the object overhead is a few hundred bytes in all)."""
        return sum(r.nbytes for r in self._runs)

    def _seen(self, keys: np.ndarray) -> np.ndarray:
        found = np.zeros(len(keys), bool)
        for run in self._runs:
            i = np.searchsorted(run, keys)
            i[i == len(run)] = 0
            found |= run[i] == keys
        return found

    def add(self, keys) -> np.ndarray:
        """Add ``keys`` (in order); True where a key is new: not in the set and its first time in ``keys``."""
        keys = np.asarray(keys, dtype=np.uint64)
        new = np.zeros(len(keys), bool)
        if not len(keys):
            return new
        uniq, first = np.unique(keys, return_index=True)
        fresh = ~self._seen(uniq)
        new[first[fresh]] = True
        run = uniq[fresh]
        if len(run):
            self._runs.append(run)
            self._n += len(run)
            while len(self._runs) > 1 and len(self._runs[-2]) <= 2 * len(self._runs[-1]):
                b, a = self._runs.pop(), self._runs.pop()
                merged = np.concatenate((a, b))
                merged.sort()
                self._runs.append(merged)
        return new
