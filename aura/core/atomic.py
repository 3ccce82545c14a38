"""Writes that matter are atomic: a temp file beside the target, fsync, rename.

A reader therefore sees either the previous complete object or the new complete one, never a
half-written one, whatever instant the writer dies at (kill -9, power loss, disk full). Also the small
file-system facts every layer needs: staging names, the user's permissions, sizes, writability.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import socket
import stat
import tempfile
from pathlib import Path

from aura.core.errors import AuraError
from aura.core.files import loads_json
from aura.core.i18n import Messages, num

TMP_PREFIX = ".tmp-"


def host_name() -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname())[:64] or "host"


def owner_suffix() -> str:
    """``~PID@HOST`` of this process, the ending of every staging name it creates."""
    return f"~{os.getpid()}@{host_name()}"


def tmp_name(base: str) -> str:
    """A staging name for ``base`` owned by this process: ``.tmp-BASE~PID@HOST``."""
    return f"{TMP_PREFIX}{base}{owner_suffix()}"


def current_umask() -> int:
    """The process umask, read without changing it where the OS allows (Linux /proc)."""
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def user_mode(*, directory: bool) -> int:
    """The mode a plain ``mkdir`` / ``open`` would give: 0o777 / 0o666 minus the umask.

    ``mkdtemp`` / ``mkstemp`` create 0700 / 0600 (private) on purpose; outputs renamed into place
    from them must get the user's normal permissions instead.
    """
    return (0o777 if directory else 0o666) & ~current_umask()


def fsync_dir(path: str | os.PathLike) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX + path.name + ".", suffix=owner_suffix(), dir=path.parent)
    try:
        try:  # a replaced file keeps its mode; a new one gets the user's usual mode, not mkstemp's 0600
            st = os.lstat(path)  # a symlink in the way is replaced, its target's mode never copied
            mode = st.st_mode & 0o777 if stat.S_ISREG(st.st_mode) else user_mode(directory=False)
        except OSError:
            mode = user_mode(directory=False)
        if hasattr(os, "fchmod"):
            os.fchmod(fd, mode)
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
    """The JSON value in ``path``; any parse failure (nesting too deep included) is a ValueError."""
    with open(path, "rb") as f:
        return loads_json(f.read())


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
            return f"{num(n, '.1f')} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{num(n, '.1f')} TB"


_M = Messages(
    "fsutil",
    {
        "parent_file": (
            "No se puede escribir {path} ({flag}): {parent} es un archivo, no un directorio. Elige otra ruta.",
            "Cannot write {path} ({flag}): {parent} is a file, not a directory. Choose another path.",
        ),
        "not_writable": (
            "No se puede escribir {path} ({flag}): no se puede crear nada en {parent} ({err}). "
            "Elige un directorio con permiso de escritura.",
            "Cannot write {path} ({flag}): nothing can be created in {parent} ({err}). Choose a "
            "directory you can write to.",
        ),
        "EACCES": ("permiso denegado", "permission denied"),
        "EROFS": ("sistema de archivos de solo lectura", "read-only file system"),
        "ENOSPC": ("no queda espacio en el disco", "no space left on the disk"),
        "ENOENT": ("no admite archivos nuevos", "it does not accept new files"),
    },
)


def check_writable(path: str | os.PathLike, *, flag: str) -> None:
    """Refuse, before any work, an output ``path`` (file or dir, given with ``flag``) that cannot be
    created: a parent that is a file, or a nearest existing folder where nothing can be written (tried
    for real, so root, read-only mounts and /proc answer truthfully)."""
    target = Path(os.path.expanduser(str(path))).absolute()
    parent = target if target.is_dir() else target.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise AuraError(_M("parent_file", path=path, flag=flag, parent=parent))
    try:
        fd, probe = tempfile.mkstemp(prefix=f"{TMP_PREFIX}write-probe", dir=parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        code = {
            errno.EPERM: "EACCES",
            errno.EACCES: "EACCES",
            errno.EROFS: "EROFS",
            errno.ENOSPC: "ENOSPC",
            errno.ENOENT: "ENOENT",
        }.get(e.errno or 0)
        reason = _M(code) if code else (e.strerror or type(e).__name__)
        raise AuraError(_M("not_writable", path=path, flag=flag, parent=parent, err=reason)) from None
