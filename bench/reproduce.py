"""Re-run the CPU benchmarks of docs/benchmarks.md and set each figure beside the published one.

    bash bench/reproduce.sh [--quick] [-o TABLE.md] [-j JOBS] [SECTION...]
    bash bench/reproduce.sh --list

The convention (each bench script declares its own runs, so a new script joins by adding lines, not by
editing this file): comment lines anywhere in ``bench/*.py``

    # reproduce: ARGS           one full run (the command docs/benchmarks.md gives); several lines, several runs;
                                a long line ends in " \\" and goes on in the next comment line
    # reproduce-quick: ARGS     the smallest setting: what ``--quick`` (and CI) runs
    # reproduce-needs: NEEDS    what the full runs need (space-separated: root, file:PATH, module:NAME, cmd:NAME)
    # reproduce-quick-needs: NEEDS
    # reproduce-excluded: WHY   not run here (GPU only, hours long): listed in the table's notes

``{tmp}`` in ARGS is a fresh temporary folder for that run. A script prints each published figure with
``bench/figures.py``'s ``figure(key, value)`` (a line ``FIGURE key = value``); the table "Every figure and the
command that prints it" of docs/benchmarks.md gives each key's published value. A full run writes a table
(figure, published, now, command); ``--quick`` runs every script at its smallest setting and only checks
that it exits 0 and prints its FIGURE lines (not their values). A script that fails, times out, prints no
figure, or lacks what it needs fails the run, naming the script. SECTION: script names or parts of them
(``finetune``, ``bench_gguf``).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
DOC = ROOT / "docs" / "benchmarks.md"
INVENTORY_HEADING = "## Every figure and the command that prints it"
DIRECTIVE = re.compile(r"^# reproduce(-quick|-needs|-quick-needs|-excluded)?: ?(.*)$")
FIGURE = re.compile(r"^FIGURE (\S+) = (.*)$")


@dataclass
class Script:
    path: Path
    full: list[str] = field(default_factory=list)
    quick: str | None = None
    needs: list[str] = field(default_factory=list)
    quick_needs: list[str] = field(default_factory=list)
    excluded: str = ""

    @property
    def name(self) -> str:
        return self.path.name


def _joined(lines: list[str]) -> list[str]:
    """The lines with each comment that ends in `` \\`` joined to the comment line after it (a long directive
    wrapped at the code's width, as a shell command is)."""
    out: list[str] = []
    for line in lines:
        if out and out[-1].endswith(" \\") and line.startswith("#"):
            out[-1] = out[-1][:-1] + line[1:].strip()
        else:
            out.append(line)
    return out


def discover(bench: Path = BENCH) -> list[Script]:
    scripts = []
    for path in sorted(bench.glob("*.py")):
        s = Script(path)
        for line in _joined(path.read_text(encoding="utf-8").splitlines()):
            m = DIRECTIVE.match(line)
            if not m:
                continue
            kind, value = m.group(1) or "", m.group(2).strip()
            if kind == "":
                s.full.append(value)
            elif kind == "-quick":
                s.quick = value
            elif kind == "-needs":
                s.needs += value.split()
            elif kind == "-quick-needs":
                s.quick_needs += value.split()
            else:
                s.excluded = value
        if s.full or s.quick is not None or s.excluded:
            scripts.append(s)
    return scripts


def missing(needs: list[str]) -> list[str]:
    """The needs this machine lacks."""
    out = []
    for need in needs:
        kind, _, arg = need.partition(":")
        ok = {
            "root": lambda: os.geteuid() == 0,
            "file": lambda: Path(arg).exists(),
            "module": lambda: importlib.util.find_spec(arg) is not None,
            "cmd": lambda: shutil.which(arg) is not None,
        }.get(kind, lambda: False)()
        if not ok:
            out.append(need)
    return out


def published(doc: Path = DOC) -> dict[tuple[str, str], str]:
    """{(key, command): published value} from docs/benchmarks.md's inventory (key alone: command "")."""
    rows: dict[tuple[str, str], str] = {}
    text = doc.read_text(encoding="utf-8")
    if INVENTORY_HEADING not in text:
        return rows
    section = text.split(INVENTORY_HEADING, 1)[1].split("\n## ", 1)[0]
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and re.fullmatch(r"`[^`]+`", cells[0]):
            key, value, command = cells[0].strip("`"), cells[1], cells[2].strip("`")
            rows[(key, command)] = value
            rows.setdefault((key, ""), value)
    return rows


def command_text(script: Script, args: str) -> str:
    return f"python bench/{script.name} {args}".strip()


@dataclass
class Run:
    script: Script
    args: str
    rc: int = 0
    seconds: float = 0.0
    figures: list[tuple[str, str]] = field(default_factory=list)
    log: str = ""
    problem: str = ""


def run_one(script: Script, args: str, timeout: float | None) -> Run:
    r = Run(script, args)
    with tempfile.TemporaryDirectory(prefix="aura-reproduce-") as tmp:
        argv = [sys.executable, str(script.path)] + shlex.split(args.replace("{tmp}", tmp))
        env = dict(
            os.environ, PYTHONPATH=str(ROOT), AURA_PLAIN="1", PYTHONUNBUFFERED="1", TOKENIZERS_PARALLELISM="false"
        )
        t = time.perf_counter()
        try:
            p = subprocess.run(
                argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, start_new_session=True
            )
            r.rc, r.log = p.returncode, p.stdout + p.stderr
        except subprocess.TimeoutExpired as e:
            r.rc, r.problem = 124, f"timed out after {e.timeout:.0f} s"
            r.log = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        r.seconds = time.perf_counter() - t
    for line in r.log.splitlines():
        m = FIGURE.match(line.strip())
        if m:
            r.figures.append((m.group(1), m.group(2).strip()))
    if r.rc != 0 and not r.problem:
        r.problem = f"exit {r.rc}"
    elif r.rc == 0 and not r.figures:
        r.problem = "printed no FIGURE line"
    return r


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bash bench/reproduce.sh", description=__doc__.split("\n\n")[0])
    p.add_argument("sections", nargs="*", help="script names or parts of them (default: every script)")
    p.add_argument("--quick", action="store_true", help="each script's smallest setting; checks it runs")
    p.add_argument("-o", "--output", help="write the markdown table here (default: stdout)")
    p.add_argument("-j", "--jobs", type=int, default=1, help="scripts at once (default 1: timings stay clean)")
    p.add_argument("--timeout", type=float, default=0, help="seconds per run (default: 300 quick, none full)")
    p.add_argument("--list", action="store_true", help="list the scripts and their runs, run nothing")
    p.add_argument("--bench-dir", type=Path, default=BENCH, help=argparse.SUPPRESS)  # tests
    a = p.parse_args(argv)

    scripts = discover(a.bench_dir)
    if a.sections:
        scripts = [s for s in scripts if any(sec in s.path.stem for sec in a.sections)]
        if not scripts:
            print(f"no bench script matches {a.sections}", file=sys.stderr)
            return 2
    if a.list:
        for s in scripts:
            if s.excluded:
                print(f"{s.name}: excluded ({s.excluded})")
                continue
            for args in s.full:
                print(
                    f"{s.name}: full   {command_text(s, args)}" + (f"   [needs {' '.join(s.needs)}]" if s.needs else "")
                )
            print(f"{s.name}: quick  {command_text(s, s.quick or '')}")
        return 0

    timeout = a.timeout or (300 if a.quick else None)
    plan: list[tuple[Script, str]] = []
    failures: list[str] = []
    notes: list[str] = []
    for s in scripts:
        if s.excluded:
            notes.append(f"{s.name}: not run ({s.excluded})")
            continue
        if a.quick:
            if s.quick is None:
                failures.append(f"{s.name}: no '# reproduce-quick:' line")
                continue
            lack = missing(s.quick_needs)
            if lack:
                failures.append(f"{s.name}: needs {' '.join(lack)} for its quick run")
                continue
            plan.append((s, s.quick))
        else:
            lack = missing(s.needs)
            if lack:
                notes.append(f"{s.name}: not run here (needs {' '.join(lack)})")
                continue
            plan += [(s, args) for args in s.full]

    start = time.perf_counter()
    print(
        f"{'quick' if a.quick else 'full'}: {len(plan)} runs of {len({s.name for s, _ in plan})} scripts",
        file=sys.stderr,
        flush=True,
    )

    def job(item: tuple[Script, str]) -> Run:
        r = run_one(item[0], item[1], timeout)
        state = "ok" if not r.problem else f"FAILED ({r.problem})"
        print(f"  {r.seconds:6.1f} s  {state:24s} {command_text(r.script, r.args)}", file=sys.stderr, flush=True)
        return r

    with ThreadPoolExecutor(max(1, a.jobs)) as pool:
        runs = list(pool.map(job, plan))

    ours = published()
    lines = ["| figure | published | now | command |", "|---|---|---|---|"]
    for r in runs:
        if r.problem:
            tail = "\n".join("    " + ln for ln in r.log.strip().splitlines()[-25:])
            failures.append(f"{command_text(r.script, r.args)}: {r.problem}\n{tail}")
        cmd = command_text(r.script, r.args)
        for key, value in r.figures:
            was = ours.get((key, cmd)) or ours.get((key, ""), "–")
            lines.append(f"| `{key}` | {was} | {value} | `{cmd}` |")
    body = "\n".join(lines) + "\n"
    if notes:
        body += "\n" + "\n".join(f"- {n}" for n in notes) + "\n"
    body += (
        f"\n{'Quick' if a.quick else 'Full'} run, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{time.perf_counter() - start:.0f} s, load average {os.getloadavg()[0]:.1f} at the end\n"
    )
    if a.output:
        Path(a.output).write_text(body, encoding="utf-8")
        print(f"table written to {a.output}", file=sys.stderr)
    elif not a.quick:
        print(body)
    if failures:
        print("\nFAILED:\n" + "\n".join(failures), file=sys.stderr)
        return 1
    print(
        f"{'quick' if a.quick else 'full'} run: every script ran and printed its figures "
        f"({time.perf_counter() - start:.0f} s)",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
