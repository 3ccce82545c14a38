"""The pipeline runner's overhead: the same stages through ``aura pipeline run`` and by hand.

Runs a pipeline (default: the tests' one, ``tests/pipelines/tiny.yaml``: fixed step counts, no time budget)
once with the runner, then runs each stage's equivalent ``aura ...`` command (``pipeline.json``'s
``command``) by hand, one ``python -m aura`` per stage, into a second folder. Prints each stage's seconds
both ways, the runner's own time beyond its stages (start-up, validation, fingerprints, the report after
every stage) and the two totals (by hand pays one interpreter start-up per stage).

    .venv/bin/python bench/bench_pipeline.py [--pipeline NAME_OR_FILE] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _aura(args: list[str], env: dict) -> float:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "aura", *args], env=env, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"aura {shlex.join(args)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pipeline", default=str(ROOT / "tests" / "pipelines" / "tiny.yaml"))
    ap.add_argument("--keep", help="Folder for the outputs (default: a temporary one, removed).")
    args = ap.parse_args()
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="aura-bench-pipeline-"))
    env = dict(os.environ, AURA_LANG="en", AURA_PLAIN="1", PYTHONPATH=str(ROOT))
    piped, by_hand = base / "pipeline", base / "by-hand"
    for d in (piped, by_hand):
        shutil.rmtree(d, ignore_errors=True)
    runner_wall = _aura(["pipeline", "run", args.pipeline, "--output-dir", str(piped)], env)
    state = json.loads((piped / "pipeline.json").read_text(encoding="utf-8"))
    rows, hand_total = [], 0.0
    for name in state["order"]:
        stage = state["stages"][name]
        argv = shlex.split(stage["command"].replace(str(piped), str(by_hand)))[1:]
        seconds = _aura(argv, env)
        hand_total += seconds
        rows.append((name, stage["seconds"], seconds))
    inner = sum(r[1] for r in rows)
    print(f"{'stage':<12} {'in runner s':>12} {'by hand s':>10}")
    for name, a, b in rows:
        print(f"{name:<12} {a:>12.2f} {b:>10.2f}")
    print(
        f"runner: {runner_wall:.2f} s wall, of which stages {inner:.2f} s; its own time {runner_wall - inner:.2f} s "
        f"({(runner_wall - inner) / runner_wall:.1%} of the wall time)"
    )
    print(
        f"by hand: {hand_total:.2f} s ({len(rows)} interpreter start-ups); runner / by hand = "
        f"{runner_wall / hand_total:.3f}"
    )
    from figures import figure, ratio

    figure("pipeline.runner_over_by_hand", ratio(runner_wall / hand_total))
    figure("pipeline.runner_own_seconds", f"{runner_wall - inner:.1f} s")
    if not args.keep:
        shutil.rmtree(base, ignore_errors=True)


# reproduce:
# reproduce-quick:

if __name__ == "__main__":
    main()
