"""The runs folder the studio serves, and the names its routes accept for what is inside it.

A run NAME is a folder directly under the runs folder holding a run.json, or ``PIPELINE/STAGE``: a run that
is a stage of a pipeline folder (``pipeline.json``) directly under it; either reached without leaving it
(no ``..`` or symlink out). Every route resolves its NAME here, so the rule is written once.
"""

from __future__ import annotations

from pathlib import Path

from aura.core.files import loads_json
from aura.pipeline.pipeline_state import STATE_FILE


def plain(name: str) -> bool:
    """A single folder name: not empty, no separator, not ``.``/``..``, no NUL."""
    return bool(name) and name not in (".", "..") and not any(c in name for c in "/\\\0")


def inside(d: Path, parent: Path) -> bool:
    """``d`` is a real folder (no symlink) directly inside ``parent``."""
    try:
        return not d.is_symlink() and d.resolve(strict=True).parent == parent.resolve(strict=True)
    except (OSError, RuntimeError):
        return False


class RunsFolder:
    """``root`` and the names of its runs and pipelines as the routes write them."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def pipeline_dir(self, name: str) -> Path | None:
        d = self.root / name
        return d if plain(name) and inside(d, self.root) and (d / STATE_FILE).is_file() else None

    def run_dir(self, name: str) -> Path | None:
        """NAME (a run directly in the folder) or PIPELINE/STAGE (a run that is a pipeline's stage)."""
        parts = name.split("/")
        if len(parts) == 2:
            pipe = self.pipeline_dir(parts[0])
            if pipe is None or not plain(parts[1]):
                return None
            d, parent = pipe / parts[1], pipe
        elif len(parts) == 1 and plain(name):
            d, parent = self.root / name, self.root
        else:
            return None
        return d if inside(d, parent) and (d / "run.json").is_file() else None

    def run_id(self, d: Path) -> str | None:
        """The NAME of the routes, for runs directly in the folder or stages of its pipelines."""
        parent, real_root = d.parent.resolve(), self.root.resolve()
        if parent == real_root:
            return d.name
        if (
            parent.parent == real_root
            and (d.parent / STATE_FILE).is_file()
            and self.run_dir(f"{d.parent.name}/{d.name}") is not None
        ):
            return f"{d.parent.name}/{d.name}"
        return None

    def is_stage(self, d: Path) -> bool:
        """``d`` is a pipeline's stage, not a run directly in the folder."""
        return d.parent.resolve() != self.root.resolve()


def run_info(d: Path) -> dict:
    """A run's run.json, or {} when it cannot be read."""
    try:
        info = loads_json((d / "run.json").read_bytes())
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}
