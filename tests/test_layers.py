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
                cycle.extend(path[path.index(d) :] + [m, d] if d in path else [m, d])
                return True
            if state.get(d) is None and visit(d, path + [m]):
                return True
        state[m] = 2
        return False

    for m in sorted(edges):
        if state.get(m) is None and visit(m, []):
            break
    assert not cycle, " -> ".join(cycle)


def _ruff() -> str | None:
    exe = Path(sys.executable).parent / "ruff"
    return str(exe) if exe.exists() else shutil.which("ruff")


def test_ruff_lint_and_format_pass():
    """The shared linter and formatter (pyproject.toml's [tool.ruff]) report nothing, as in .ci/run."""
    exe = _ruff()
    if exe is None:
        require_or_skip("ruff", "ruff is not installed (pip install -e '.[test]')")
    lint = subprocess.run([exe, "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout[-3000:] + lint.stderr
    fmt = subprocess.run([exe, "format", "--check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True)
    assert fmt.returncode == 0, fmt.stdout[-3000:] + fmt.stderr


LONG = 80  # lines of a function (as ruff formats it) above which its docstring must say why it is kept whole
KEPT_WHOLE = "Kept whole"


def _functions():
    import ast

    for path in sorted((ROOT / "aura").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield path.relative_to(ROOT), node


def test_long_functions_say_why_they_are_kept_whole():
    """No function in aura/ over LONG lines unless its docstring gives the reason ("Kept whole: ...")."""
    import ast

    long = [
        (f"{path}:{node.lineno} {node.name}", node.end_lineno - node.lineno + 1)
        for path, node in _functions()
        if node.end_lineno - node.lineno + 1 > LONG and KEPT_WHOLE not in (ast.get_docstring(node) or "")
    ]
    assert not long, f"functions over {LONG} lines without '{KEPT_WHOLE}: <reason>' in their docstring: {long}"


def test_no_private_name_imported_from_another_module():
    """What modules share is public: no ``from aura.x import _name`` between two of Aura's modules."""
    import ast

    found = []
    for path in sorted((ROOT / "aura").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("aura"):
                found += [
                    f"{path.relative_to(ROOT)}:{node.lineno} {node.module}.{a.name}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                ]
    assert not found, found
