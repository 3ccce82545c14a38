"""Writes that matter are atomic: a temp file or directory beside the target, fsync, rename.

A reader therefore sees either the previous complete object or the new complete one, never a
half-written one, whatever instant the writer dies at (kill -9, power loss, disk full).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

TMP_PREFIX = ".tmp-"


def fsync_dir(path: str | os.PathLike) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX + path.name + ".", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n")


def read_json(path: str | os.PathLike):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def fsync_tree(root: str | os.PathLike) -> None:
    """fsync every file and directory under root (before renaming it into place)."""
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(dirpath)


@contextlib.contextmanager
def staged_dir(final: str | os.PathLike, *, replace: bool = False) -> Iterator[Path]:
    """Build a directory under a temp name beside ``final``; rename it into place on success.

    On any exception (or KeyboardInterrupt) the temp directory is removed and ``final`` is untouched.
    With ``replace=True`` an existing ``final`` is swapped out only after the new one is complete.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{final.name}-", dir=final.parent))
    try:
        yield tmp
        fsync_tree(tmp)
        if final.exists():
            if not replace:
                raise FileExistsError(final)
            old = final.parent / f"{TMP_PREFIX}old-{final.name}-{os.getpid()}"
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
        fsync_dir(final.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def remove_stale_tmp(parent: str | os.PathLike) -> list[Path]:
    """Remove leftovers of interrupted writes (``.tmp-*``) in a directory."""
    removed = []
    parent = Path(parent)
    if not parent.is_dir():
        return removed
    for p in parent.iterdir():
        if p.name.startswith(TMP_PREFIX):
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
            removed.append(p)
    return removed


def sha256_file(path: str | os.PathLike, *, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def dir_size(path: str | os.PathLike) -> int:
    total = 0
    for dirpath, _d, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.path.getsize(os.path.join(dirpath, name))
    return total


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1024 or unit == "TB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TB"
