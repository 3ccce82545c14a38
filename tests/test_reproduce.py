"""bench/reproduce.sh: every published figure comes from a script that prints it, and a bench script that
breaks, stops printing its figure or loses its quick setting fails the run, naming the script.

The quick run of every script (``bash bench/reproduce.sh --quick``) is a step of ``.ci/run`` after the tests,
not a test here: it takes minutes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import reproduce  # noqa: E402  (bench/reproduce.py)


def _run(*args: str, bench: Path | None = None) -> subprocess.CompletedProcess:
    extra = ["--bench-dir", str(bench)] if bench else []
    return subprocess.run(
        ["bash", str(ROOT / "bench" / "reproduce.sh"), *args, *extra],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"},
        timeout=120,
    )


@pytest.mark.catalogue
def test_every_published_figure_names_a_script_that_prints_it():
    """Each row of docs/benchmarks.md's inventory: its command runs a bench script that declares that command
    (a ``# reproduce:`` line) and prints the key with ``figure(...)``."""
    rows = reproduce.published()
    assert len({k for k, c in rows if c}) >= 30, "the inventory table of docs/benchmarks.md is missing"
    scripts = {s.name: s for s in reproduce.discover()}
    problems = []
    for key, command in sorted(k for k in rows if k[1]):
        m = re.match(r"python bench/(\S+\.py)\s*(.*)$", command)
        if not m or m.group(1) not in scripts:
            problems.append(f"{key}: '{command}' is not a bench script's command")
            continue
        script = scripts[m.group(1)]
        if m.group(2).strip() not in [a.strip() for a in script.full]:
            problems.append(f"{key}: '{command}' is not a '# reproduce:' line of {script.name}")
        text = script.path.read_text(encoding="utf-8")
        for module in re.findall(r"^import (\w+)", text, flags=re.M):  # a bench harness it prints through
            if (ROOT / "bench" / f"{module}.py").is_file():
                text += (ROOT / "bench" / f"{module}.py").read_text(encoding="utf-8")
        head = key.split(".")[0]
        if "figure(" not in text or head not in text:
            problems.append(f"{key}: {script.name} does not print it (no figure(...) naming '{head}')")
    assert not problems, "\n".join(problems)


@pytest.mark.catalogue
def test_every_cpu_bench_script_has_a_quick_setting():
    missing = [s.name for s in reproduce.discover() if not s.excluded and s.quick is None]
    assert not missing, f"bench scripts without a '# reproduce-quick:' line: {missing}"
    twice = [  # only the last one would run: join them into one
        path.name
        for path in sorted((ROOT / "bench").glob("*.py"))
        if sum(line.startswith("# reproduce-quick:") for line in path.read_text(encoding="utf-8").splitlines()) > 1
    ]
    assert not twice, f"bench scripts with more than one '# reproduce-quick:' line (only the last runs): {twice}"
    for path in sorted((ROOT / "bench").glob("*.py")):
        text = path.read_text(encoding="utf-8")
        if "figure(" in text and '__name__ == "__main__"' in text:  # a script, not a harness module
            assert "# reproduce" in text, f"{path.name} prints figures but declares no '# reproduce:' run"


def test_a_broken_script_fails_the_quick_run_naming_it(tmp_path):
    (tmp_path / "bench_good.py").write_text(
        "print('FIGURE good.ratio = 1.50×')\n# reproduce: --big\n# reproduce-quick:\n"
    )
    (tmp_path / "bench_crash.py").write_text("import sys\nsys.exit('boom: the reason')\n# reproduce-quick: --small\n")
    (tmp_path / "bench_silent.py").write_text("print('a table, no figure line')\n# reproduce-quick:\n")
    (tmp_path / "bench_noquick.py").write_text("print('FIGURE x = 1')\n# reproduce: --full\n")
    (tmp_path / "bench_gpu.py").write_text("# reproduce-excluded: GPU only\n")
    r = _run("--quick", bench=tmp_path)
    assert r.returncode == 1, r.stderr
    failed = r.stderr.split("FAILED:", 1)[1]
    assert "python bench/bench_crash.py --small: exit 1" in failed and "boom: the reason" in failed
    assert "python bench/bench_silent.py: printed no FIGURE line" in failed
    assert "bench_noquick.py: no '# reproduce-quick:' line" in failed
    assert "bench_good.py" not in failed and "bench_gpu.py" not in failed

    r = _run("--quick", "good", bench=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "every script ran and printed its figures" in r.stderr


def test_the_full_run_writes_the_table_and_lists_what_it_could_not_run(tmp_path):
    (tmp_path / "bench_a.py").write_text(
        "import sys\nprint('FIGURE a.speed = ' + sys.argv[1])\n"
        "# reproduce: 2.00×\n# reproduce: 3.00×\n# reproduce-quick: 0\n"
    )
    (tmp_path / "bench_root.py").write_text(
        "# reproduce: --x\n# reproduce-needs: file:/nonexistent/corpus.txt\n# reproduce-quick:\n"
    )
    (tmp_path / "bench_gpu.py").write_text("# reproduce-excluded: GPU only\n")
    out = tmp_path / "table.md"
    r = _run("-o", str(out), bench=tmp_path)
    assert r.returncode == 0, r.stderr
    table = out.read_text()
    assert "| `a.speed` | – | 2.00× | `python bench/bench_a.py 2.00×` |" in table
    assert "| `a.speed` | – | 3.00× | `python bench/bench_a.py 3.00×` |" in table
    assert "bench_root.py: not run here (needs file:/nonexistent/corpus.txt)" in table
    assert "bench_gpu.py: not run (GPU only)" in table


def test_list_names_the_scripts_of_the_repository():
    r = _run("--list")
    assert r.returncode == 0, r.stderr
    for name in ("bench_finetune.py: full", "versus_trl_grpo.py: quick", "gpu_suite.py: excluded"):
        assert name in r.stdout
