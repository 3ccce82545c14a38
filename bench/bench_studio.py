"""Aura Studio's server side on a large runs folder: 200 runs, one with a 100k-step log.

Measures the time of the requests the page makes for its first render (``/api/runs``; a run page's
``/api/runs/NAME/metrics?max_points=1500`` cold, then a 2 s poll after 100 new rows), against
``aura.watch.runs.read_log`` of the same log (the full read ``aura plot`` does) in the same run.
Not measured here: the browser's own render time and the tokens/s of a pretrain with the page open.

    python bench/bench_studio.py
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from starlette.testclient import TestClient

from aura.studio.app import create_app
from aura.watch.runs import read_log

HEADER = "epoch,step,tokens,train_loss,val_loss,lr,grad_norm,tokens_per_s,mfu,seconds,kind,time\n"


def row(s: int) -> str:
    return f"1,{s},{s * 4096},{3 + 1 / s:.6f},{'' if s % 100 else 3.1},0.0003,1.0,50000,0.4,{s * 0.1:.1f},step,\n"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for i in range(200):
            d = root / f"run{i:03d}"
            d.mkdir()
            (d / "run.json").write_text(json.dumps({"kind": "pretrain", "status": "finished", "last_step": 100}))
            (d / "training_log.csv").write_text(HEADER + "".join(row(s) for s in range(1, 101 if i else 100_001)))
        c = TestClient(create_app(root), base_url="http://127.0.0.1:7860")
        t = time.perf_counter(); runs = c.get("/api/runs").json(); t_runs = time.perf_counter() - t
        t = time.perf_counter(); m = c.get("/api/runs/run000/metrics?max_points=1500").json()
        t_cold = time.perf_counter() - t
        with open(root / "run000" / "training_log.csv", "a") as f:
            f.write("".join(row(s) for s in range(100_001, 100_101)))
        t = time.perf_counter(); m2 = c.get("/api/runs/run000/metrics?max_points=1500").json()
        t_poll = time.perf_counter() - t
        t = time.perf_counter(); full = read_log(root / "run000"); t_full = time.perf_counter() - t
    assert len(runs) == 200 and m["rows"] == 100_000 and m2["rows"] == 100_100 == len(full)
    print(f"/api/runs, 200 runs (one 100k-step log): {t_runs:.3f} s")
    print(f"metrics of the 100k-step run, first request (cold, {len(m['series']['train_loss']['x'])} points sent): "
          f"{t_cold:.3f} s")
    print(f"metrics poll after 100 new rows (incremental): {t_poll:.4f} s")
    print(f"read_log of the whole log (what a non-incremental poll would cost): {t_full:.3f} s; "
          f"poll / full read = {t_poll / t_full:.3f}")


if __name__ == "__main__":
    main()
