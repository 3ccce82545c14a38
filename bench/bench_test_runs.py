"""The suite's CLI runs forked from a warm interpreter (``tests/forkserver.py``, what ``run_aura`` does) against a new
interpreter per run (``AURA_TEST_FORK=0``), on the same test files in one process.

Most of the suite's tests run ``python -m aura ...`` on tiny models, where importing torch, transformers and peft
is most of each run's time. The fork server imports them once per pytest worker and forks each run from it. This
script runs pytest on FILES both ways, alternated ``--repeats`` times, each in one process with one thread
(``OMP_NUM_THREADS=1``, as each pytest-xdist worker of ``scripts/test.sh``), and prints the wall and CPU seconds
(pytest and every process it started) of each run, then the ratio of the medians. Both ways must pass.

    python bench/bench_test_runs.py [--repeats 2] [FILES...]   (default: tests/test_finetune.py)
"""

# reproduce: --repeats 2
# reproduce-quick: --repeats 1 tests/test_finetune.py::test_every_data_format_end_to_end

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from figures import figure, ratio  # noqa: E402


def run_pytest(files: list[str], *, fork: bool) -> tuple[float, float]:
    """(wall s, CPU s of pytest and its children) of one pytest run; fails the bench if a test fails."""
    env = dict(os.environ, AURA_TEST_FORK="1" if fork else "0", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env["RAYON_NUM_THREADS"] = "1"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *files],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        how = "forked" if fork else "new interpreters"
        sys.exit(f"pytest failed ({how}):\n{proc.stdout[-4000:]}{proc.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", default=["tests/test_finetune.py"])
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    runs: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    for i in range(args.repeats):
        for fork in (False, True):
            wall, cpu = run_pytest(args.files, fork=fork)
            runs[fork].append((wall, cpu))
            how = "forked" if fork else "new interpreters"
            print(f"run {i + 1}, {how}: {wall:.1f} s wall, {cpu:.1f} s CPU", flush=True)
    (new_wall, new_cpu), (fork_wall, fork_cpu) = (
        tuple(statistics.median(x[k] for x in runs[fork]) for k in (0, 1)) for fork in (False, True)
    )
    print(f"files: {' '.join(args.files)}")
    print(f"new interpreter per run: {new_wall:.1f} s wall, {new_cpu:.1f} s CPU (median of {args.repeats})")
    print(f"forked from a warm one:  {fork_wall:.1f} s wall, {fork_cpu:.1f} s CPU")
    figure("tests.fork.wall_speed", ratio(new_wall / fork_wall))
    figure("tests.fork.cpu_saving", ratio(new_cpu / fork_cpu))


if __name__ == "__main__":
    main()
