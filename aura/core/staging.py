"""Directories written whole: ``staged_dir`` builds a directory under a staging name and renames it
into place (marker last), and ``remove_stale_tmp`` removes only the leftovers of writers that are gone.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import stat
import tempfile
import time
from pathlib import Path
from typing import Iterator

from aura.core.atomic import TMP_PREFIX, fsync_dir, fsync_tree, host_name, owner_suffix, tmp_name, user_mode
from aura.core.errors import AuraError
from aura.core.i18n import Messages

_M = Messages(
    "staging",
    {
        "busy": (
            "No se puede reemplazar {path}: es un punto de montaje o el sistema lo tiene en uso. Indica un "
            "directorio dentro de él (por ejemplo {path}/salida).",
            "Cannot replace {path}: it is a mount point or in use by the system. Give a directory inside "
            "it (for example {path}/out).",
        ),
    },
)


# Staging names end with "~PID@HOST": who is writing them, so that cleanup removes only the leftovers
# of writers that are gone (``remove_stale_tmp``), never a live sibling's work in progress.
_OWNER_RE = re.compile(r"~(\d+)@([A-Za-z0-9._-]+)$")


# A leftover whose writer cannot be checked (no owner in its name, or another host) is removed only
# when nothing in it has changed for this long.
STALE_UNKNOWN_S = 3600.0


_OLD = "old~"  # .tmp-old~NAME~PID@HOST: a replaced directory moved aside until the new one is in place


@contextlib.contextmanager
def staged_dir(final: str | os.PathLike, *, replace: bool = False, kind: str | None = None) -> Iterator[Path]:
    """Build a directory under a temp name beside ``final``; rename it into place on success.

    On any exception (or KeyboardInterrupt) the temp directory is removed and ``final`` is untouched.
    With ``kind`` the new directory gets Aura's ownership marker (``aura.core.ownership``), written
    last. With ``replace=True`` an existing ``final`` is swapped out only after the new one is
    complete, and only when it is empty or carries the marker of the same ``kind``: a directory Aura
    did not write is never removed (AuraError), whatever the caller's flags.
    """
    from aura.core import ownership

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
        open_up_private(tmp)
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
            # renamed before it is deleted: a writer killed mid-delete leaves ".tmp-NAME-gone~…", which
            # cleanup removes, never a half-deleted ".tmp-old~NAME~…" that it would rename back to NAME
            gone = final.parent / tmp_name(f"{final.name}-gone")
            os.replace(old, gone)
            shutil.rmtree(gone, ignore_errors=True)
        else:
            os.replace(tmp, final)
        fsync_dir(final.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def open_up_private(root: str | os.PathLike) -> None:
    """Give the user's usual permissions to what a library created private under ``root``.

    Some writers go through their own temp files: safetensors' ``save_file`` (and so ``save_pretrained``
    and peft's adapters) leaves ``model.safetensors`` at mkstemp's 0600 whatever the umask, and a
    colleague, a container user or a web server could not read the model. A file at 0600 (a directory at
    0700) becomes what a plain ``open`` (``mkdir``) gives under the umask; any other mode is left alone.
    """
    modes = {0o600: user_mode(directory=False), 0o700: user_mode(directory=True)}
    for dirpath, dirnames, filenames in os.walk(root):
        for path in [dirpath, *(os.path.join(dirpath, n) for n in filenames)]:
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                continue
            private = 0o700 if stat.S_ISDIR(st.st_mode) else 0o600
            if st.st_mode & 0o7777 == private and modes[private] != private:
                os.chmod(path, modes[private])


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
    if owner is not None and owner[1] == host_name():
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


def remove_stale_tmp(
    parent: str | os.PathLike, *, prefix: str | tuple[str, ...] = "", max_age_s: float | None = STALE_UNKNOWN_S
) -> list[Path]:
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
        rest = p.name[len(TMP_PREFIX) :]
        if rest.startswith(_OLD) and tmp_owner(rest):
            original = parent / _OWNER_RE.sub("", rest[len(_OLD) :])
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
