"""The bad-input suite as one figure: every case of ``tests/bad_inputs`` (malformed and hostile inputs for
every command) is built and run, and the refusal judged clear or not (exit code 2, no traceback, the
message names the offending file or field, nothing left that a later command takes as complete).
Prints one line per case, a per-command tally and ``N/M clear``.

Cases run in-process through ``aura.cli.main`` (as ``tests/test_bad_inputs.py`` does), or each in a
fresh ``python -m aura`` with ``--subprocess`` (what a user's shell sees; slower: one interpreter start
per case). The inputs the cases copy (a tokenizer, tiny Llama/GPT-2, a LoRA adapter, a prepared corpus,
a 2-step pretraining run) are built first, about 30 s.

    .venv/bin/python bench/bench_bad_inputs.py [--subprocess] [--only SUBSTRING ...] [--verbose]
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def in_process(*args):
    from tests.conftest import run_aura_here

    saved = sys.stdin
    sys.stdin = io.StringIO("hola\n")  # chat reads its turns from stdin (a refusal comes before)
    try:
        return run_aura_here(*args)
    finally:
        sys.stdin = saved


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--subprocess", action="store_true", help="run each case in a fresh `python -m aura`")
    ap.add_argument("--only", nargs="*", default=[], help="cases whose name contains one of these")
    ap.add_argument("--verbose", action="store_true", help="print the output of every case not clear")
    opts = ap.parse_args()
    os.environ.setdefault("AURA_LANG", "en")
    os.environ["AURA_PLAIN"] = "1"
    import torch

    torch.set_num_threads(1)
    from tests.bad_inputs import CASES, build_fixtures, run_case
    from tests.conftest import run_aura

    runner = (lambda *args: run_aura(*args, input="hola\n")) if opts.subprocess else in_process
    names = [n for n in CASES if not opts.only or any(o in n for o in opts.only)]
    with tempfile.TemporaryDirectory(prefix="aura-bad-inputs-") as tmp:
        t0 = time.perf_counter()
        fx = build_fixtures(Path(tmp) / "fixtures")
        print(
            f"fixtures built in {time.perf_counter() - t0:.0f} s; {len(names)} cases "
            f"({'subprocess' if opts.subprocess else 'in-process'})\n",
            flush=True,
        )
        clear, total = Counter(), Counter()
        t0 = time.perf_counter()
        for name in names:
            case = CASES[name]
            t = time.perf_counter()
            problems, output = run_case(name, fx, Path(tmp) / "cases" / name, runner)
            ok = not problems
            total[case.command] += 1
            clear[case.command] += ok
            print(
                f"{'clear' if ok else 'NOT CLEAR'}  {name:44s} {time.perf_counter() - t:5.1f} s  {'; '.join(problems)}",
                flush=True,
            )
            if problems and opts.verbose:
                print("    | " + "\n    | ".join(output.strip().splitlines()[-8:]))
        seconds = time.perf_counter() - t0
    print("\nper command:")
    for command in sorted(total):
        print(f"  aura {command:18s} {clear[command]}/{total[command]} clear")
    n_clear, n = sum(clear.values()), sum(total.values())
    print(
        f"\n{n_clear}/{n} clear ({sum(CASES[x].hostile for x in names)} of them hostile; "
        f"{len(total)} commands; {seconds:.0f} s)"
    )
    from figures import figure

    figure("bad_inputs.clear", f"{n_clear}/{n}")
    return 0 if n_clear == n else 1


# reproduce:
# reproduce-quick: --only prepare_missing_input runs_run_json_garbage

if __name__ == "__main__":
    sys.exit(main())
