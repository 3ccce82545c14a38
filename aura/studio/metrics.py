"""Curves of a run for the page: ``training_log.csv`` read incrementally and downsampled on the server.

Each run's log is followed from the byte where the last read stopped (``aura.watch.runs.read_log_since``),
so a poll every 2 s of a 100k-step log reads only the rows appended since. Downsampling keeps, per
bucket of consecutive steps, the lowest and the highest value of each column (so a loss spike stays
visible) and always the last point.
"""

from __future__ import annotations

import threading
from pathlib import Path

from aura.watch.runs import read_log_since

X_COLUMNS = ("step", "tokens", "epoch", "seconds", "time", "kind")


class LogCache:
    """Per run dir: the rows read so far and where the file's next unread byte is."""

    def __init__(self):
        self._lock = threading.Lock()
        self._state: dict[Path, dict] = {}

    def rows(self, run_dir: Path) -> list[dict]:
        with self._lock:
            st = self._state.get(run_dir)
            log = run_dir / "training_log.csv"
            if st is None or (log.is_file() and log.stat().st_size < st["offset"]):  # new, or started over
                st = self._state[run_dir] = {"offset": 0, "header": None, "lines": 0, "rows": []}
            new, offset, header, lines = read_log_since(run_dir, st["offset"], st["header"], st["lines"])
            st["rows"].extend(new)
            st.update(offset=offset, header=header or st["header"], lines=lines)
            return st["rows"]


def downsample(xs: list[float], ys: list[float], max_points: int) -> tuple[list[float], list[float]]:
    """At most ``max_points`` points: per bucket the min and max of y (in x order), plus the last point."""
    n = len(xs)
    if n <= max_points or max_points < 4:
        return xs, ys
    buckets = max_points // 2 - 1
    size = n / buckets
    ox, oy = [], []
    for b in range(buckets):
        lo, hi = int(b * size), min(n, int((b + 1) * size))
        if lo >= hi:
            continue
        i_min = min(range(lo, hi), key=ys.__getitem__)
        i_max = max(range(lo, hi), key=ys.__getitem__)
        for i in sorted({i_min, i_max}):
            ox.append(xs[i])
            oy.append(ys[i])
    if ox[-1] != xs[-1]:
        ox.append(xs[-1])
        oy.append(ys[-1])
    return ox, oy


def series(rows: list[dict], max_points: int) -> dict:
    """{"columns": [...], "series": {column: {"x": steps, "y": values}}, "rows": n} for the page's charts.

    Non-finite values (a diverged loss) are left out of a curve; rows without a step are not plotted."""
    columns: list[str] = []
    for r in rows[:1] + rows[-1:]:
        columns += [c for c in r if c not in X_COLUMNS and c not in columns]
    for r in rows:  # columns that appear later (validation, suite scores) count too
        for c, v in r.items():
            if v is not None and c not in columns and c not in X_COLUMNS:
                columns.append(c)
    out = {}
    for col in columns:
        xs, ys = [], []
        for r in rows:
            v, s = r.get(col), r.get("step")
            if v is not None and s is not None and v == v and abs(v) != float("inf"):
                xs.append(s)
                ys.append(v)
        if xs:
            out[col] = dict(zip(("x", "y"), downsample(xs, ys, max_points)))
    return {"columns": list(out), "series": out, "rows": len(rows)}
