"""Writes that matter are atomic: a temp file or directory beside the target, fsync, rename.

A reader therefore sees either the previous complete object or the new complete one, never a
half-written one, whatever instant the writer dies at (kill -9, power loss, disk full).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import socket
import tempfile
import time
from pathlib import Path
from typing import Iterator

from aura.errors import AuraError
from aura.i18n import Messages

TMP_PREFIX = ".tmp-"
# Staging names end with "~PID@HOST": who is writing them, so that cleanup removes only the leftovers
# of writers that are gone (``remove_stale_tmp``), never a live sibling's work in progress.
_OWNER_RE = re.compile(r"~(\d+)@([A-Za-z0-9._-]+)$")
# A leftover whose writer cannot be checked (no owner in its name, or another host) is removed only
# when nothing in it has changed for this long.
STALE_UNKNOWN_S = 3600.0
_OLD = "old~"  # .tmp-old~NAME~PID@HOST: a replaced directory moved aside until the new one is in place


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname())[:64] or "host"


def owner_suffix() -> str:
    """``~PID@HOST`` of this process, the ending of every staging name it creates."""
    return f"~{os.getpid()}@{_host()}"


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
            mode = os.stat(path).st_mode & 0o7777
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
def staged_dir(final: str | os.PathLike, *, replace: bool = False, kind: str | None = None) -> Iterator[Path]:
    """Build a directory under a temp name beside ``final``; rename it into place on success.

    On any exception (or KeyboardInterrupt) the temp directory is removed and ``final`` is untouched.
    With ``kind`` the new directory gets Aura's ownership marker (``aura.utils.ownership``), written
    last. With ``replace=True`` an existing ``final`` is swapped out only after the new one is
    complete, and only when it is empty or carries the marker of the same ``kind``: a directory Aura
    did not write is never removed (AuraError), whatever the caller's flags.
    """
    from aura.utils import ownership

    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.exists() and replace and kind is not None:
        ownership.check_replaceable(final, kind=kind)
    tmp = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{final.name}-", suffix=owner_suffix(), dir=final.parent))
    try:
        os.chmod(tmp, user_mode(directory=True))  # mkdtemp's 0700 would hide the output from the group
        yield tmp
        if kind is not None:
            ownership.write_marker(tmp, kind)
        fsync_tree(tmp)
        if final.exists():
            if not replace:
                raise FileExistsError(final)
            if kind is not None:
                ownership.check_replaceable(final, kind=kind)
            old = final.parent / tmp_name(f"{_OLD}{final.name}")
            try:
                os.replace(final, old)
            except OSError as e:
                if e.errno not in (errno.EBUSY, errno.EXDEV):
                    raise
                raise AuraError(_M("busy", path=final)) from None  # a mount point cannot be renamed
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
        fsync_dir(final.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def tmp_owner(name: str) -> tuple[int, str] | None:
    """(pid, host) of the writer of a staging name, or None when the name does not say."""
    m = _OWNER_RE.search(name)
    return (int(m.group(1)), m.group(2)) if m else None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # it exists (another user's) or cannot be checked: assume alive
    return True


def _last_change(path: Path) -> float:
    """The newest mtime in ``path`` (a file or a tree): a writer appending to a shard moves it."""
    newest = path.lstat().st_mtime
    if path.is_dir() and not path.is_symlink():
        for dirpath, dirnames, filenames in os.walk(path):
            for name in dirnames + filenames:
                with contextlib.suppress(OSError):
                    newest = max(newest, os.lstat(os.path.join(dirpath, name)).st_mtime)
    return newest


def is_stale_tmp(path: str | os.PathLike, *, max_age_s: float | None = STALE_UNKNOWN_S) -> bool:
    """True when the staging entry ``path`` is a leftover: its writer (``~PID@HOST``) is a process of
    this host that no longer runs; or, when the name names no writer of this host, nothing in it has
    changed for ``max_age_s`` seconds (None: such an entry is never taken for a leftover)."""
    path = Path(path)
    owner = tmp_owner(path.name)
    if owner is not None and owner[1] == _host():
        return owner[0] != os.getpid() and not _pid_alive(owner[0])
    if max_age_s is None:
        return False
    try:
        return time.time() - _last_change(path) > max_age_s
    except OSError:
        return False


def staging_prefixes(name: str) -> tuple[str, str]:
    """The ``prefix`` values of ``remove_stale_tmp`` that match ``staged_dir``'s entries for ``name``."""
    return f"{name}-", f"{_OLD}{name}~"


def remove_stale_tmp(parent: str | os.PathLike, *, prefix: str | tuple[str, ...] = "",
                     max_age_s: float | None = STALE_UNKNOWN_S) -> list[Path]:
    """Remove the leftovers of interrupted writes in ``parent``: ``.tmp-{prefix}*`` entries that are stale
    (``is_stale_tmp``). A live writer's staging entry (this or another process) is never touched. In a
    directory that is not Aura's own, pass ``max_age_s=None``: only entries whose writer is provably
    gone are removed.

    A stale ``.tmp-old~NAME~…`` (a replaced directory moved aside) whose ``NAME`` is missing means the
    writer died between its two renames: it is renamed back to ``NAME`` instead of being deleted.
    """
    removed: list[Path] = []
    parent = Path(parent)
    if not parent.is_dir():
        return removed
    prefixes = tuple(TMP_PREFIX + x for x in ((prefix,) if isinstance(prefix, str) else prefix))
    for p in sorted(parent.iterdir()):
        if not p.name.startswith(prefixes) or not is_stale_tmp(p, max_age_s=max_age_s):
            continue
        rest = p.name[len(TMP_PREFIX):]
        if rest.startswith(_OLD) and tmp_owner(rest):
            original = parent / _OWNER_RE.sub("", rest[len(_OLD):])
            if not original.exists() and not original.is_symlink():
                with contextlib.suppress(OSError):
                    os.replace(p, original)
                    continue
        if p.is_dir() and not p.is_symlink():
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


_M = Messages("fsutil", {
    "parent_file": ("No se puede escribir {path} ({flag}): {parent} es un archivo, no un directorio. "
                    "Elige otra ruta.",
                    "Cannot write {path} ({flag}): {parent} is a file, not a directory. Choose another "
                    "path."),
    "not_writable": ("No se puede escribir {path} ({flag}): no se puede crear nada en {parent} ({err}). "
                     "Elige un directorio con permiso de escritura.",
                     "Cannot write {path} ({flag}): nothing can be created in {parent} ({err}). Choose a "
                     "directory you can write to."),
    "busy": ("No se puede reemplazar {path}: es un punto de montaje o el sistema lo tiene en uso. Indica un "
             "directorio dentro de él (por ejemplo {path}/salida).",
             "Cannot replace {path}: it is a mount point or in use by the system. Give a directory inside "
             "it (for example {path}/out)."),
    "EACCES": ("permiso denegado", "permission denied"),
    "EROFS": ("sistema de archivos de solo lectura", "read-only file system"),
    "ENOSPC": ("no queda espacio en el disco", "no space left on the disk"),
    "ENOENT": ("no admite archivos nuevos", "it does not accept new files"),
})


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
        code = {errno.EPERM: "EACCES", errno.EACCES: "EACCES", errno.EROFS: "EROFS",
                errno.ENOSPC: "ENOSPC", errno.ENOENT: "ENOENT"}.get(e.errno or 0)
        reason = _M(code) if code else (e.strerror or type(e).__name__)
        raise AuraError(_M("not_writable", path=path, flag=flag, parent=parent, err=reason)) from None
