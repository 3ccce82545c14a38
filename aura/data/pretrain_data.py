"""Rank-aware, resumable batches of token windows for pretraining.

The train split is cut into ``num_windows`` windows of ``seq_len + 1`` tokens that overlap by one
(window w covers tokens [w T, w T + T]); every token of the stream is predicted exactly once per epoch.
Each epoch visits the windows in a permutation drawn from ``seed + epoch`` (the same on every rank);
global micro-batch g holds permuted windows [g W B, (g+1) W B) and rank r takes the r-th run of B of
them, so ranks read disjoint parts and 2 ranks x batch b see exactly what 1 process x batch 2b sees.

A batch is ``{"input_ids": (B, T) int64, "shift_labels": (B, T) int64}``: targets already shifted
(``shift_labels[:, t]`` is the token after ``input_ids[:, t]``), the training loop's protocol for
"predict every position". The position (epoch, micro-batch) is the whole state: ``state_dict()`` /
``load_state_dict()`` resume exactly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from aura.core.errors import AuraError
from aura.core.i18n import Messages
from aura.data.tokens import TokenShards

M = Messages(
    "pretrain_data",
    {
        "too_short": (
            "La partición '{split}' de {path} tiene {tokens:token|tokens}; con --seq-length {seq} y "
            "--batch-size {batch} ({world:proceso|procesos}) hacen falta al menos {need}. Reduce "
            "--seq-length o --batch-size, o usa más datos.",
            "The '{split}' split of {path} has {tokens:token|tokens}; --seq-length {seq} with "
            "--batch-size {batch} ({world:process|processes}) needs at least {need}. Lower --seq-length "
            "or --batch-size, or use more data.",
        ),
        "incompatible": (
            "El estado de datos guardado no corresponde a estos datos ({field}: guardado {saved}, "
            "ahora {now}). Reanuda con los mismos datos, --seq-length y --batch-size.",
            "The saved data state does not match this data ({field}: saved {saved}, now {now}). "
            "Resume with the same data, --seq-length and --batch-size.",
        ),
        # what each saved-state key is to the user
        "k_seq_len": ("--seq-length", "--seq-length"),
        "k_seed": ("--seed", "--seed"),
        "k_num_windows": ("ventanas de entrenamiento", "training windows"),
        "k_shuffle": ("orden aleatorio", "shuffling"),
    },
)


class PretrainBatches:
    """Micro-batches of one rank over the train split; one epoch = ``batches_per_epoch`` calls."""

    def __init__(
        self,
        shards: TokenShards,
        *,
        seq_len: int,
        batch_size: int,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        shuffle: bool = True,
        pin_memory: bool = False,
    ):
        self.shards, self.seq_len, self.batch_size = shards, seq_len, batch_size
        self.seed, self.rank, self.world_size = seed, rank, world_size
        self.shuffle, self.pin_memory = shuffle, pin_memory
        self.num_windows = (len(shards) - 1) // seq_len if len(shards) > 1 else 0
        self.batches_per_epoch = self.num_windows // (batch_size * world_size)
        if self.batches_per_epoch < 1:
            need = batch_size * world_size * seq_len + 1
            raise AuraError(
                M(
                    "too_short",
                    split=shards.split,
                    path=shards.path,
                    tokens=len(shards),
                    seq=seq_len,
                    batch=batch_size,
                    world=world_size,
                    need=need,
                )
            )
        self.epoch = 0
        self.position = 0  # micro-batches of this epoch already handed out
        self._order: np.ndarray | None = None
        self._order_epoch = -1

    def _windows(self, epoch: int) -> np.ndarray:
        if self._order_epoch != epoch:
            if self.shuffle:
                self._order = np.random.default_rng([self.seed, epoch]).permutation(self.num_windows)
            else:
                self._order = np.arange(self.num_windows)
            self._order_epoch = epoch
        assert self._order is not None
        return self._order

    def batch_at(self, epoch: int, index: int) -> dict[str, torch.Tensor]:
        """Micro-batch ``index`` of ``epoch`` for this rank (pure: no state changes)."""
        order = self._windows(epoch)
        start = (index * self.world_size + self.rank) * self.batch_size
        T = self.seq_len
        buf = np.empty((self.batch_size, T + 1), dtype=np.int64)  # (B, T+1)
        for row, w in enumerate(order[start : start + self.batch_size]):
            buf[row] = self.shards.read(int(w) * T, T + 1)
        return _to_batch(buf, self.pin_memory)

    def next_batch(self) -> dict[str, torch.Tensor] | None:
        """The next micro-batch of the current epoch, or None once the epoch is exhausted."""
        if self.position >= self.batches_per_epoch:
            return None
        batch = self.batch_at(self.epoch, self.position)
        self.position += 1
        return batch

    def start_epoch(self, epoch: int) -> None:
        self.epoch, self.position = epoch, 0

    def state_dict(self) -> dict:
        return {
            "epoch": self.epoch,
            "position": self.position,
            "seed": self.seed,
            "seq_len": self.seq_len,
            "batch_size": self.batch_size,
            "world_size": self.world_size,
            "num_windows": self.num_windows,
            "shuffle": self.shuffle,
        }

    def load_state_dict(self, state: dict) -> None:
        for key in ("seq_len", "num_windows", "seed", "shuffle"):
            if state.get(key) != getattr(self, key):
                raise AuraError(M("incompatible", field=M("k_" + key), saved=state.get(key), now=getattr(self, key)))
        # Another world size or batch resumes at the same number of consumed windows (elastic).
        consumed = int(state["position"]) * int(state["batch_size"]) * int(state["world_size"])
        self.epoch = int(state["epoch"])
        self.position = consumed // (self.batch_size * self.world_size)


class EvalBatches:
    """The validation split in order, split across ranks, at most ``max_batches`` per rank."""

    def __init__(
        self,
        shards: TokenShards,
        *,
        seq_len: int,
        batch_size: int,
        rank: int = 0,
        world_size: int = 1,
        max_batches: int = 0,
    ):
        self.shards, self.seq_len, self.batch_size = shards, seq_len, batch_size
        self.rank, self.world_size = rank, world_size
        windows = (len(shards) - 1) // seq_len if len(shards) > 1 else 0
        per_rank = windows // world_size  # equal count on every rank keeps collectives in step
        self.num_batches = -(-per_rank // batch_size) if per_rank else 0
        if max_batches:
            self.num_batches = min(self.num_batches, max_batches)
        self._per_rank = per_rank

    def __len__(self) -> int:
        return self.num_batches

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        T = self.seq_len
        for b in range(self.num_batches):
            lo = b * self.batch_size
            hi = min(lo + self.batch_size, self._per_rank)
            buf = np.empty((hi - lo, T + 1), dtype=np.int64)
            for row, i in enumerate(range(lo, hi)):
                w = i * self.world_size + self.rank
                buf[row] = self.shards.read(w * T, T + 1)
            yield _to_batch(buf, False)


def _to_batch(buf: np.ndarray, pin: bool) -> dict[str, torch.Tensor]:
    """(B, T+1) windows -> contiguous (B, T) inputs and shifted targets (pinned for async H2D copies)."""
    inputs = torch.from_numpy(np.ascontiguousarray(buf[:, :-1]))  # (B, T)
    targets = torch.from_numpy(np.ascontiguousarray(buf[:, 1:]))  # (B, T)
    if pin:
        inputs, targets = inputs.pin_memory(), targets.pin_memory()
    return {"input_ids": inputs, "shift_labels": targets}


def open_splits(path: str | Path) -> tuple[TokenShards, TokenShards | None]:
    """Train and (if present and non-empty) validation streams of a prepared dir."""
    train = TokenShards(path, "train")
    val = None
    if "val" in train.meta.get("splits", {}):
        v = TokenShards(path, "val")
        val = v if len(v) > 1 else None
    return train, val
