"""Experiment trackers (``--report-to``): what each costs a training run.

1. **The same run, each tracker on vs off**: a tiny-but-not-trivial ``aura pretrain`` (a separate process, as
   from the CLI) with ``--report-to none`` and with ``--report-to wandb`` (offline), ``mlflow`` (a local
   ``mlflow server`` with a SQLite backend, started here) and ``trackio`` (its local store), a log line every
   step (the trackers' worst case). Rounds alternate the order (none first, then last, ...); for each setting
   the fastest of the rounds: the steady-state step time (median seconds per step over the second half of the
   run, from the log's elapsed ``seconds``) and the whole command's wall time. Prints each tracker's ratio to
   ``none`` (target: at most 1 % slower in steady state).
2. **What the step waits for**: ``Trackers.row`` (the only tracker call on the training thread: a put on a
   bounded queue) timed in this process with the three trackers live, against the step time of part 1.

    python bench/bench_trackers.py [--rounds 3] [--steps 300] [--trackers wandb,mlflow,trackio]
"""

# reproduce: --rounds 2 --steps 20
# reproduce-needs: module:wandb module:mlflow module:trackio
# reproduce-quick: --rounds 1 --steps 4
# reproduce-quick-needs: module:wandb module:mlflow module:trackio

from __future__ import annotations

import argparse
import csv
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TINY = [
    "--model-preset",
    "manual",
    "--embed-size",
    "128",
    "--num-layers",
    "2",
    "--num-heads",
    "4",
    "--seq-length",
    "64",
    "--intermediate-size",
    "512",
    "--batch-size",
    "8",
    "--log-interval",
    "1",
    "--sample-tokens",
    "0",
    "--save-steps",
    "0",
    "--eval-interval",
    "0",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mlflow_server(root: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--backend-store-uri",
            f"sqlite:///{root / 'mlflow.db'}",
            "--default-artifact-root",
            str(root / "artifacts"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    uri = f"http://127.0.0.1:{port}"
    for _ in range(240):
        try:
            urllib.request.urlopen(uri + "/health", timeout=2).read()
            return proc, uri
        except Exception:
            time.sleep(0.5)
    raise SystemExit("mlflow server did not start")


def step_seconds(run: Path) -> float:
    """Median seconds per step over the second half of the run (the log's elapsed time between step rows)."""
    with open(run / "training_log.csv", newline="") as f:
        rows = [(int(r["step"]), float(r["seconds"])) for r in csv.DictReader(f) if r["kind"] == "step"]
    half = rows[len(rows) // 2 :]
    return statistics.median((b[1] - a[1]) / (b[0] - a[0]) for a, b in zip(half, half[1:]))


def prepare(work: Path) -> Path:
    sys.path.insert(0, str(ROOT))
    from tests.test_loop import build_prepared

    return build_prepared(work / "prepared")


def row_cost(work: Path, env: dict, trackers: tuple[str, ...], n: int = 1000) -> float:
    """Microseconds the training thread spends per ``Trackers.row`` with the trackers live (the median of 50
    batches of ``n / 50`` rows, timed while the trackers' thread delivers the earlier ones)."""
    os.environ.update({k: v for k, v in env.items() if k.startswith(("WANDB_", "TRACKIO_", "MLFLOW_"))})
    from aura.train.run.trackers import RunInfo, Trackers

    info = RunInfo(name="row-cost", run_dir=work / "row-cost", kind="pretrain", config={}, plan={}, hardware={})
    (work / "row-cost").mkdir(exist_ok=True)
    t = Trackers(trackers, info, resumed=False)
    row = {
        "time": "",
        "kind": "step",
        "epoch": "1",
        "tokens": "4096",
        "train_loss": "3.5",
        "lr": "1e-3",
        "grad_norm": "1.0",
        "tokens_per_s": "20000",
        "seconds": "1.0",
        "mem_peak_gb": "0.5",
    }
    batches, per = [], n // 50
    for b in range(50):
        start = time.perf_counter()
        for step in range(b * per + 1, (b + 1) * per + 1):
            t.row({**row, "step": str(step)})
        batches.append((time.perf_counter() - start) / per * 1e6)
    t.close(status="finished", outputs={}, timeout=600)
    if t.failed:
        raise SystemExit(f"trackers failed: {sorted(t.failed)}")
    return statistics.median(batches)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--trackers", default="wandb,mlflow,trackio")
    args = ap.parse_args()
    trackers = tuple(args.trackers.split(","))
    work = Path(tempfile.mkdtemp(prefix="aura-bench-trackers-"))
    data = prepare(work)
    server, uri = mlflow_server(work / "mlflow") if "mlflow" in trackers else (None, "")
    env = dict(
        os.environ,
        AURA_LANG="en",
        AURA_PLAIN="1",
        WANDB_MODE="offline",
        WANDB_SILENT="true",
        WANDB_DIR=str(work / "wandb"),
        TRACKIO_DIR=str(work / "trackio"),
        MLFLOW_TRACKING_URI=uri,
        PYTHONPATH=str(ROOT),
    )
    (work / "wandb").mkdir()
    settings = ("none", *trackers)
    step: dict[str, list[float]] = {s: [] for s in settings}
    wall: dict[str, list[float]] = {s: [] for s in settings}
    try:
        cost = row_cost(work, env, trackers)
        print(f"Trackers.row on the training thread ({'+'.join(trackers)} live): {cost:.1f} µs per row", flush=True)
        for r in range(args.rounds):
            order = settings if r % 2 == 0 else tuple(reversed(settings))
            for setting in order:
                run = work / f"run-{setting}-{r}"
                start = time.perf_counter()
                p = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "aura",
                        "pretrain",
                        "--data",
                        str(data),
                        "--output-dir",
                        str(run),
                        *TINY,
                        "--max-steps",
                        str(args.steps),
                        "--report-to",
                        setting,
                    ],
                    env=env,
                    capture_output=True,
                    text=True,
                )
                wall[setting].append(time.perf_counter() - start)
                if p.returncode != 0 or "disabled" in p.stdout + p.stderr:
                    raise SystemExit(f"{setting}: {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
                step[setting].append(step_seconds(run))
                print(
                    f"round {r + 1} {setting:8s} step {step[setting][-1] * 1000:.2f} ms  "
                    f"command {wall[setting][-1]:.1f} s",
                    flush=True,
                )
        base_step, base_wall = min(step["none"]), min(wall["none"])
        print(f"\nfastest of {args.rounds} ({args.steps} steps, a log line per step):")
        print("| --report-to | step (ms) | step / none | command (s) | command / none |")
        print("|---|---|---|---|---|")
        for s in settings:
            print(
                f"| {s} | {min(step[s]) * 1000:.2f} | {min(step[s]) / base_step:.3f} | {min(wall[s]):.1f} | "
                f"{min(wall[s]) / base_wall:.3f} |"
            )
        print(
            f"\nTrackers.row on the training thread ({'+'.join(trackers)} live): {cost:.1f} µs per row = "
            f"{100 * cost / 1e6 / base_step:.3f} % of a {base_step * 1000:.2f} ms step"
        )
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from figures import figure, ratio

        figure("trackers.row_cost", f"{cost:.1f} µs")
        for s in trackers:
            figure(f"trackers.{s}.step_over_none", ratio(min(step[s]) / base_step, 3))
    finally:
        if server is not None:
            os.killpg(server.pid, signal.SIGTERM)


if __name__ == "__main__":
    main()
