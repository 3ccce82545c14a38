"""Every CUDA path of Aura in one run of under 8 minutes, with MFU and memory figures: `bash bench/gpu_suite.sh`.

Made for a lent GPU with a few minutes on it (no package registry, 12 kB of output returned, one output
folder): one driver, one worker process that imports torch and Aura once and runs the checks of
``bench/gpu_checks.py`` in order, the most telling first. The driver gives each check its own timeout: a check
that outlives it is recorded as ``timeout`` and the worker is started again for the checks after it; a worker
that dies (a CUDA fault, a segfault) is recorded the same way. ``--budget`` seconds bound the whole run: a
check that could not finish inside what is left is recorded as ``skipped (budget)``, so a lease that runs out
still returns every line. Optional packages that are not installed (bitsandbytes, DeepSpeed, vLLM, Liger,
llama.cpp) make their checks ``skipped``, never ``pass``.

Output: one JSON line per check (``gpu_suite.jsonl``) and the table (``gpu_suite.md``) in ``--out`` (default:
``$OUT`` when set, else the work folder), the table on stdout. Each check's folder is deleted when it ends
(its size is recorded), so the run leaves little on disk; the work folder is removed at the end unless given.

    bash bench/gpu_suite.sh                       # on a GPU
    bash bench/gpu_suite.sh --cpu                 # tiny shapes on the CPU: CI runs it so the script never rots
    bash bench/gpu_suite.sh --only mfu_eager,fp16_lora_resume
Exit status: 0 when no check failed or timed out.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from gpu_checks import CHECKS, PIPELINES, SELFTEST, Check  # noqa: E402  (no torch at import: the driver stays light)

RESULTS = "results.jsonl"


# ---- the worker: torch and Aura imported once, checks run in order --------------------------------------


def worker(work: Path, names: list[str], *, cpu: bool, deadline: float) -> int:
    os.environ.update(
        AURA_LANG="en",
        AURA_PLAIN="1",
        PYTHONUNBUFFERED="1",  # children import this tree's Aura
        PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
    )
    if cpu:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    import gpu_checks

    ctx = gpu_checks.Context(work, cpu=cpu)
    by_name = {c.name: c for c in CHECKS}
    for name in names:
        c = by_name[name]
        if (
            time.time() + (c.cpu_expect if cpu else c.expect) > deadline
        ):  # would end as a timeout: leave the time to others
            _record(work, name, status="skipped (budget)", figure="not enough of the budget left", seconds=0)
            continue
        _record(work, name, event="start", started=time.time())
        t0 = time.time()
        try:
            if c.gpu_only and cpu:
                r = gpu_checks.Result("GPU only", None)
            else:
                r = c.fn(ctx)
            status = "skipped" if r.ok is None else ("pass" if r.ok else "FAIL")
            row = dict(status=status, figure=r.figure, target=r.target, metrics=r.metrics)
        except Exception as err:  # noqa: BLE001 - one failed check must not hide the others
            import traceback

            text = str(err).strip() or type(err).__name__
            row = dict(
                status="FAIL",
                figure=f"{type(err).__name__}: {text.splitlines()[-1][:300]}",
                traceback=traceback.format_exc()[-2500:],
            )
        size = _size(work / "checks" / name) if (work / "checks" / name).exists() else 0
        if not c.keep:
            shutil.rmtree(work / "checks" / name, ignore_errors=True)
        gpu_checks.release()
        _record(work, name, seconds=round(time.time() - t0, 1), disk_gb=round(size / 1e9, 2), **row)
    return 0


def _record(work: Path, name: str, **fields) -> None:
    with open(work / RESULTS, "a", encoding="utf-8") as f:
        f.write(json.dumps({"check": name, **fields}, default=str) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# ---- the driver: timeouts, restarts, the budget ----------------------------------------------------------


def _read(work: Path) -> list[dict]:
    path = work / RESULTS
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:  # a line cut by a killed worker
            pass
    return rows


def drive(work: Path, checks: list[Check], *, cpu: bool, budget: float, log, out: Path) -> list[dict]:
    """Run ``checks`` in workers until each has a final line; returns those lines in order. Every final
    line is copied to ``out/gpu_suite.jsonl`` as it comes: a lease cut short still returns what ran."""
    deadline = time.time() + budget
    pending = [c.name for c in checks]
    by_name = {c.name: c for c in checks}
    while pending:
        if time.time() + 5 > deadline:
            for name in pending:
                _record(work, name, status="skipped (budget)", figure="not enough of the budget left", seconds=0)
            break
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--worker",
            "--workdir",
            str(work),
            "--checks",
            ",".join(pending),
            "--deadline",
            str(deadline),
            *(["--cpu"] if cpu else []),
        ]
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=work,
            start_new_session=True,
            env={**os.environ, "AURA_SUITE_OUT": str(out)},
        )  # where checks leave files to keep
        while proc.poll() is None:
            time.sleep(0.5)
            _copy_final(work, out)
            final = {r["check"] for r in _read(work) if "status" in r}
            started = [r for r in _read(work) if r.get("event") == "start" and r["check"] not in final]
            now = time.time()
            if started:
                name, t0 = started[-1]["check"], started[-1]["started"]
                c = by_name[name]
                limit = c.cpu_timeout if cpu else c.timeout
                if now - t0 > limit or now > deadline:
                    _kill(proc)
                    why = "timeout" if now - t0 > limit else "timeout (budget)"
                    _record(
                        work,
                        name,
                        status=why,
                        figure=f"stopped after {now - t0:.0f} s (limit {limit:.0f} s)",
                        seconds=round(now - t0, 1),
                        disk_gb=round(_size(work / "checks" / name) / 1e9, 2)
                        if (work / "checks" / name).exists()
                        else 0,
                    )
                    shutil.rmtree(work / "checks" / name, ignore_errors=True)
                    break
            elif now > deadline:
                _kill(proc)
                break
        code = proc.wait()
        rows = _read(work)
        final = {r["check"] for r in rows if "status" in r}
        started = [r for r in rows if r.get("event") == "start" and r["check"] not in final]
        if started:  # the worker died inside a check
            name = started[-1]["check"]
            _record(
                work,
                name,
                status="crashed",
                figure=f"the worker exited with {code} during the check (see worker.log)",
                seconds=0,
            )
        left = [n for n in pending if n not in _final(work)]
        if left == pending:  # it died before any check (an import, the device): starting it again would too
            for name in left:
                _record(
                    work,
                    name,
                    status="crashed",
                    figure=f"the worker exited with {code} before its first check (see worker.log)",
                    seconds=0,
                )
            left = []
        pending = left
    final = _final(work)
    return [final[c.name] for c in checks if c.name in final]


def _final(work: Path) -> dict[str, dict]:
    final: dict[str, dict] = {}
    for r in _read(work):
        if "status" in r:
            final.setdefault(r["check"], r)
    return final


def _copy_final(work: Path, out: Path) -> None:
    rows = list(_final(work).values())
    path = out / "gpu_suite.jsonl"
    if rows and (not path.is_file() or path.read_text(encoding="utf-8").count("\n") != len(rows)):
        tmp = path.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(r, default=str) + "\n" for r in rows), encoding="utf-8")
        os.replace(tmp, path)


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the worker and any child it started (torchrun, bench scripts)
    except ProcessLookupError:
        pass
    proc.wait()


def table(rows: list[dict], checks: list[Check], *, cpu: bool, env: dict, total_s: float) -> str:
    titles = {c.name: c.title for c in checks}
    lines = [
        f"### GPU suite, {time.strftime('%Y-%m-%d')}{' (--cpu, tiny shapes)' if cpu else ''}",
        "",
        f"Device: {env.get('device', '?')}; driver {env.get('driver', '-')}; torch {env.get('torch', '?')}; "
        f"CUDA {env.get('cuda', '-')}. Command: `bash bench/gpu_suite.sh{' --cpu' if cpu else ''}`; "
        f"{total_s:.0f} s in all.",
        "",
        "| Check | Figure | Target | Result |",
        "|---|---|---|---|",
    ]

    def cell(x):
        return str(x).replace("|", "\\|").replace("\n", " ")

    for r in rows:
        lines.append(
            f"| {cell(titles.get(r['check'], r['check']))} | {cell(r.get('figure', ''))} | "
            f"{cell(r.get('target') or '-')} | {r['status']} ({r.get('seconds', 0):.0f} s) |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", action="store_true", help="tiny shapes on the CPU (CI); GPU-only checks are skipped")
    ap.add_argument("--workdir", help="where runs are written (default: a new temporary folder, removed at the end)")
    ap.add_argument("--out", help="where gpu_suite.jsonl and gpu_suite.md go (default: $OUT, else the work folder)")
    ap.add_argument("--budget", type=float, help="seconds for the whole run (default: 450 on a GPU, none on the CPU)")
    ap.add_argument("--only", help="comma-separated check names, run in that order (environment and setup first)")
    ap.add_argument(
        "--pipelines",
        action="store_true",
        help="the shipped GPU pipelines scaled to minutes (bench/gpu_pipelines.py) instead of the checks",
    )
    ap.add_argument("--list", action="store_true", help="list the checks and exit")
    ap.add_argument("--selftest", action="store_true", help="add a check that outlives its timeout (tests)")
    ap.add_argument("--append", action="store_true", help="append the table to docs/benchmarks.md")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--checks", help=argparse.SUPPRESS)
    ap.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(Path(a.workdir), a.checks.split(","), cpu=a.cpu, deadline=a.deadline)
    if a.list:
        for c in CHECKS:
            print(f"{c.name:18} {c.timeout:4.0f} s  {c.title}")
        return 0
    # the checks, or (--pipelines) the pipelines; --only picks from both
    group = set(PIPELINES) if a.pipelines else {c.name for c in CHECKS} - set(PIPELINES)
    checks = [
        c
        for c in CHECKS
        if c.name not in SELFTEST and (a.only or c.name in group or c.name in ("environment", "setup"))
    ]
    if a.selftest:
        checks[2:2] = [c for c in CHECKS if c.name in SELFTEST]
    if a.only:
        wanted = set(a.only.split(",")) | {"environment", "setup", *(SELFTEST if a.selftest else ())}
        unknown = wanted - {c.name for c in CHECKS}
        if unknown:
            print(f"Unknown checks: {', '.join(sorted(unknown))} (see --list)", file=sys.stderr)
            return 2
        given = a.only.split(",")  # in the order given, after environment and setup
        checks = sorted(
            (c for c in checks if c.name in wanted),
            key=lambda c: (
                checks.index(c)
                if c.name in ("environment", "setup") or c.name not in given
                else given.index(c.name) + 4
            ),
        )
    if not a.cpu:
        probe = subprocess.run(
            [sys.executable, "-c", "import torch; print(torch.cuda.is_available())"], capture_output=True, text=True
        )
        if probe.stdout.strip() != "True":
            print("No CUDA device: run `bash bench/gpu_suite.sh --cpu` for the CPU mode.", file=sys.stderr)
            return 2
    own = a.workdir is None
    work = Path(a.workdir or tempfile.mkdtemp(prefix="aura-gpu-suite-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    (work / RESULTS).unlink(missing_ok=True)
    out = Path(a.out or os.environ.get("OUT") or work).resolve()
    out.mkdir(parents=True, exist_ok=True)
    budget = a.budget if a.budget is not None else (float("inf") if a.cpu else 450.0)
    t0 = time.time()
    with open(work / "worker.log", "w", encoding="utf-8") as log:
        rows = drive(work, checks, cpu=a.cpu, budget=min(budget, 1e9), log=log, out=out)
    env = next((r.get("metrics", {}) for r in rows if r["check"] == "environment"), {})
    text = table(rows, checks, cpu=a.cpu, env=env, total_s=time.time() - t0)
    with open(out / "gpu_suite.jsonl", "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, default=str) + "\n")
    (out / "gpu_suite.md").write_text(text, encoding="utf-8")
    if out != work and (work / "worker.log").is_file():  # the tail of the worker's console, for failures
        (out / "worker.log").write_text(
            (work / "worker.log").read_text(encoding="utf-8", errors="replace")[-200_000:], encoding="utf-8"
        )
    print(text)
    if a.append:
        with open(ROOT / "docs" / "benchmarks.md", "a", encoding="utf-8") as f:
            f.write("\n" + text)
    if own:
        shutil.rmtree(work, ignore_errors=True)
    bad = [r for r in rows if r["status"] in ("FAIL", "crashed") or r["status"].startswith("timeout")]
    return 1 if bad else 0


# reproduce-excluded: GPU only (bash bench/gpu_suite.sh on a lent GPU; its --cpu mode runs in tests/test_gpu_suite.py)

if __name__ == "__main__":
    sys.exit(main())
