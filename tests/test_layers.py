"""The package layers of docs/architecture.md hold: import-linter's contracts (.importlinter) pass, and no
import circle exists between Aura's modules (function-level imports included)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.evidence import importorskip, require_or_skip

# Checks of the source tree, not of behaviour (not counted as behavioural tests).
pytestmark = pytest.mark.catalogue

ROOT = Path(__file__).resolve().parent.parent


def _lint_imports() -> str | None:
    exe = Path(sys.executable).parent / "lint-imports"
    return str(exe) if exe.exists() else shutil.which("lint-imports")


def test_import_contracts_are_kept():
    exe = _lint_imports()
    if exe is None:
        require_or_skip("import-linter", "import-linter is not installed (pip install -e '.[test]')")
    r = subprocess.run([exe, "--config", str(ROOT / ".importlinter")], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 broken" in r.stdout


def test_aura_holds_only_packages_and_entry_files():
    loose = sorted(p.name for p in (ROOT / "aura").glob("*.py"))
    assert loose == ["__init__.py", "__main__.py"]


def test_no_import_circle_between_modules():
    grimp = importorskip("grimp", "import-linter")
    graph = grimp.build_graph("aura")
    edges = {m: {d for d in graph.find_modules_directly_imported_by(m)} for m in graph.modules}
    # Tarjan-free check: a depth-first search that reports the first back edge as a cycle.
    state: dict[str, int] = {}
    cycle: list[str] = []

    def visit(m: str, path: list[str]) -> bool:
        state[m] = 1
        for d in sorted(edges.get(m, ())):
            if state.get(d) == 1:
                cycle.extend(path[path.index(d):] + [m, d] if d in path else [m, d])
                return True
            if state.get(d) is None and visit(d, path + [m]):
                return True
        state[m] = 2
        return False

    for m in sorted(edges):
        if state.get(m) is None and visit(m, []):
            break
    assert not cycle, " -> ".join(cycle)
