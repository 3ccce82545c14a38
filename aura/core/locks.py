"""One writer at a time: an OS lock (``fcntl.flock``) on a small record file, never followed through a link.

The kernel drops a flock when its holder exits, however it exits (kill -9 included), so a dead writer
never leaves a stale lock behind. The file holds the holder's record ({pid, host, since, ...}), which
names it in the refusal a second writer gets.

A lock file is opened with ``O_NOFOLLOW`` and ``O_CREAT``, never ``O_TRUNC``, and must be a regular file
with a single link: a symlink or a hard link planted at its name (to make Aura truncate or rewrite the
file it points to) is refused, and the record is rewritten in place, padded, never truncated.

* ``FileLock``: the lock itself (the run directory's ``.aura-run.lock``, ``aura.core.rundir.RunLock``).
* ``output_lock``: the writer's lock of an output a command builds elsewhere and renames into place
  (``aura data prepare``, ``aura merge``, ``aura export gguf``): ``.NAME.aura-lock`` beside the output,
  removed when the command ends.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import stat
import time
from pathlib import Path
from typing import Iterator

from aura.core.errors import AuraError
from aura.core.i18n import Messages

M = Messages(
    "locks",
    {
        "not_regular": (
            "{path} no es un archivo normal (es un enlace simbólico, un enlace duro u otra cosa): Aura "
            "no lo usa como cerrojo, porque escribir en él cambiaría otro archivo. Bórralo tú mismo "
            "y vuelve a ejecutar el comando.",
            "{path} is not a regular file (it is a symbolic link, a hard link or something else): "
            "Aura does not use it as a lock, since writing it would change another file. Delete it "
            "yourself and run the command again.",
        ),
        "unusable": (
            "No se puede abrir el cerrojo {path}: {err}. Comprueba los permisos del directorio.",
            "Cannot open the lock {path}: {err}. Check the directory's permissions.",
        ),
        "busy": (
            "{path} lo está escribiendo otro proceso de Aura (pid {pid} en {host}, desde {since}). Dos "
            "procesos escribiendo la misma salida la mezclarían. Espera a que termine, detenlo, o elige "
            "otra salida.",
            "{path} is being written by another Aura process (pid {pid} on {host}, since {since}). Two "
            "processes writing one output would mix it up. Wait for it to finish, stop it, or choose "
            "another output.",
        ),
    },
)

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def _open(path: Path, flags: int) -> int:
    """A descriptor of ``path`` (never through a symlink), a regular file with one link."""
    try:
        fd = os.open(path, flags | _NOFOLLOW, 0o666)
    except OSError as e:
        if e.errno == errno.ELOOP:  # O_NOFOLLOW met a symlink
            raise AuraError(M("not_regular", path=path)) from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        os.close(fd)
        raise AuraError(M("not_regular", path=path))
    return fd


def _read_fd(fd: int) -> dict:
    try:
        data = json.loads(os.pread(fd, 1 << 20, 0).decode("utf-8") or "{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def read_lock_record(path: str | os.PathLike) -> dict:
    """The record in the lock file ``path`` ({} when missing, unreadable, not a regular file or a link)."""
    try:
        fd = _open(Path(path), os.O_RDONLY)
    except (OSError, AuraError):
        return {}
    try:
        return _read_fd(fd)
    finally:
        os.close(fd)


def lock_holder(path: str | os.PathLike) -> dict | None:
    """The record of the process holding the lock ``path`` now ({} if unreadable), or None when nobody
    holds it (or there is no lock file)."""
    try:
        import fcntl

        fd = _open(Path(path), os.O_RDONLY)
    except (ImportError, OSError, AuraError):
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return _read_fd(fd)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


class FileLock:
    """An exclusive flock on ``path``. ``acquire`` returns None once held, else the holder's record;
    ``previous`` is the record found in the file when it was taken. With ``remove=True`` the file is
    deleted on release (acquire then checks it still holds the file at ``path``, not one a previous
    holder removed)."""

    def __init__(self, path: str | os.PathLike, *, remove: bool = False):
        self.path = Path(path)
        self.remove = remove
        self.fd: int | None = None
        self.previous: dict = {}
        self.record: dict = {}

    def acquire(self, *, wait_s: float = 1.0, **record) -> dict | None:
        try:
            import fcntl
        except ImportError:  # no flock on this OS: one writer is not enforced
            return None
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fd = _open(self.path, os.O_RDWR | os.O_CREAT)
            except OSError as e:
                raise AuraError(M("unusable", path=self.path, err=e.strerror or e)) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                if time.monotonic() >= deadline:
                    holder = _read_fd(fd)
                    os.close(fd)
                    return holder
                os.close(fd)
                time.sleep(0.1)
                continue
            try:  # the holder before us may have removed the file: then lock the new one
                same = os.lstat(self.path).st_ino == os.fstat(fd).st_ino
            except OSError:
                same = False
            if same:
                break
            os.close(fd)
        self.fd = fd
        self.previous = _read_fd(fd)
        self.record = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            **record,
        }
        self.write()
        return None

    def write(self) -> None:
        """Rewrite the record in place: padded with spaces over a longer old one, never truncated."""
        if self.fd is None:
            return
        data = json.dumps(self.record, ensure_ascii=False).encode("utf-8")
        size = os.fstat(self.fd).st_size
        os.pwrite(self.fd, data + b" " * max(size - len(data) - 1, 0) + b"\n", 0)
        os.fsync(self.fd)

    def release(self) -> None:
        if self.fd is None:
            return
        if self.remove:
            with contextlib.suppress(OSError):
                if os.lstat(self.path).st_ino == os.fstat(self.fd).st_ino:
                    os.unlink(self.path)
        os.close(self.fd)  # closing the descriptor drops the flock
        self.fd = None


def lock_path(target: str | os.PathLike) -> Path:
    """The lock file of the output ``target``: ``.NAME.aura-lock`` beside it."""
    target = Path(target).expanduser().absolute()
    return target.parent / f".{target.name}.aura-lock"


@contextlib.contextmanager
def output_lock(target: str | os.PathLike, *, command: str) -> Iterator[FileLock]:
    """Hold the writer's lock of ``target`` while the block runs; a second writer is refused, naming
    the first's pid and host."""
    path = lock_path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(path, remove=True)
    holder = lock.acquire(wait_s=0.5, command=command)
    if holder is not None:
        raise AuraError(
            M(
                "busy",
                path=target,
                pid=holder.get("pid", "?"),
                host=holder.get("host", "?"),
                since=holder.get("since", "?"),
            )
        )
    try:
        yield lock
    finally:
        lock.release()
