"""Paths named inside files stay inside their folder; folders Aura reads or copies keep links in.

A prepared dataset's ``meta.json`` names its shards, a sharded model's ``model.safetensors.index.json``
its weight files, a checkpoint holds the files a resume reads: a name there that is absolute, climbs
out with ``..`` or is a symlink leaving the folder would make Aura read (or, copied into an output,
publish) a file the folder does not hold. ``contained`` and ``check_links`` refuse them, naming the
file that said so.

Model weight files may be symlinks out of their folder only where Hugging Face's own cache puts them
(``snapshots/REV/x -> ../../blobs/HASH``): ``contained(..., follow_links=False)`` checks the name only.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from aura.core.errors import AuraError
from aura.core.i18n import Messages

M = Messages(
    "paths",
    {
        "outside": (
            "{source} nombra '{name}', fuera de {root}: Aura solo lee archivos dentro de esa carpeta (ni "
            "rutas absolutas, ni '..', ni enlaces que salgan de ella). El archivo está dañado o manipulado; "
            "vuelve a generarlo.",
            "{source} names '{name}', outside {root}: Aura reads only files inside that folder (no absolute "
            "paths, no '..', no links leaving it). The file is damaged or tampered with; generate it again.",
        ),
        "link_out": (
            "{path} es un enlace simbólico a {target}, fuera de {root}: Aura no lo sigue. Sustitúyelo "
            "por una copia del archivo o quítalo.",
            "{path} is a symbolic link to {target}, outside {root}: Aura does not follow it. Replace it "
            "with a copy of the file or remove it.",
        ),
        "loop": (
            "{path} es un bucle de enlaces simbólicos (o una cadena demasiado larga): no se puede leer. "
            "Corrige o borra ese enlace.",
            "{path} is a symbolic link loop (or too long a chain): it cannot be read. Fix or delete that link.",
        ),
    },
)


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def resolved(path: str | os.PathLike) -> Path:
    """``path`` with every link resolved; a link loop is a clear AuraError naming it."""
    try:
        return Path(path).resolve(strict=False)
    except (RuntimeError, OSError) as e:  # RuntimeError: Python < 3.13 on a loop
        if isinstance(e, OSError) and e.errno not in (40, None):  # 40: ELOOP
            raise
        raise AuraError(M("loop", path=path)) from None


def contained(root: str | os.PathLike, name: str, *, source: str | os.PathLike, follow_links: bool = True) -> Path:
    """``root/name`` for a ``name`` read from the file ``source``; AuraError when it leaves ``root``:
    absolute, with a ``..`` part, or (``follow_links``) a symlink that resolves outside."""
    root = Path(root)
    pure = PurePosixPath(str(name).replace("\\", "/"))
    if not str(name) or pure.is_absolute() or ".." in pure.parts or str(name).startswith("~"):
        raise AuraError(M("outside", source=source, name=name, root=root))
    target = root / str(name)
    if follow_links and not _inside(resolved(target), resolved(root)):
        raise AuraError(M("outside", source=source, name=name, root=root))
    return target


def check_links(root: str | os.PathLike) -> None:
    """Refuse a symlink under ``root`` that points outside it, or is a loop (to itself, or a directory
    link to one of its own parents), without following any."""
    root = Path(root)
    real = resolved(root)
    for dirpath, dirnames, filenames in os.walk(root):  # os.walk does not descend into linked dirs
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            if p.is_symlink():
                target = resolved(p)
                if not _inside(target, real):
                    raise AuraError(M("link_out", path=p, target=os.readlink(p), root=root))
                if target.is_dir() and _inside(resolved(p.parent), target):
                    raise AuraError(M("loop", path=p))


def copy_tree(src: str | os.PathLike, dest: str | os.PathLike, *, ignore=None) -> None:
    """``shutil.copytree`` of a folder into an output, links kept in: a link pointing inside ``src`` is
    copied as the file it points to, one leaving ``src`` or a loop is refused (AuraError, naming it)."""
    import shutil

    check_links(src)
    shutil.copytree(src, dest, symlinks=False, ignore=ignore)
