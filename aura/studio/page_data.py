"""What the page polls, kept cheap: run records and curves read incrementally, downsampled on the server.

Each run's ``training_log.csv`` is followed from the byte where the last read stopped
(``aura.watch.runlog.read_log_since``): the new rows go into per-column float arrays (the curves) and into
the run's ``LogSummary`` (what ``aura runs`` shows). ``/api/runs`` re-describes a run only when one of
its files changed (run.json, the log, the run folder's entries, best/, final/) or its live status did
(a process that died leaves the files as they were): an unchanged run costs a few ``stat`` calls.
Downsampling keeps, per bucket of consecutive steps, the lowest and the highest value of each column
(so a loss spike stays visible) and always the last point; it runs in numpy.
"""

from __future__ import annotations

import threading
from array import array
from pathlib import Path

import numpy as np

from aura.core.errors import AuraError
from aura.watch.runlog import LogSummary, read_log_since
from aura.watch.runs import describe_run, live_status

X_COLUMNS = ("step", "tokens", "epoch", "seconds", "time", "kind")
# Columns that an "epoch" row holds as the epoch's average: drawn as their own series, not joined to the
# per-interval values (the curve would jump at every epoch's end).
EPOCH_AVERAGED = ("train_loss",)
NAN = float("nan")


class _Log:
    """One run's log as read so far: columns of floats (NaN: empty), the summary, where to read next."""

    def __init__(self):
        self.offset, self.header, self.lines, self.n = 0, None, 0, 0
        self.columns: dict[str, array] = {}
        self.epoch_rows = array("b")  # 1 for a row of kind "epoch"
        self.summary = LogSummary()
        self.signature: tuple | None = None
        self.error: str | None = None

    def add(self, rows: list[dict]) -> None:
        if not rows:
            return
        names = [c for c in dict.fromkeys(c for r in (rows[0], rows[-1]) for c in r) if c not in ("kind", "time")]
        for c in names:  # the rows of one read share their header: the same columns
            col = self.columns.get(c)
            if col is None:
                col = self.columns[c] = array("d", [NAN]) * self.n
            col.extend([NAN if v is None else v for v in [r.get(c) for r in rows]])
        self.n += len(rows)
        self.epoch_rows.extend(1 if r.get("kind") == "epoch" else 0 for r in rows)
        for col in self.columns.values():  # a column these rows lack
            if len(col) < self.n:
                col.extend([NAN] * (self.n - len(col)))
        self.summary.add(rows)


def _stat(path: Path) -> tuple | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns, st.st_ino


class LogCache:
    """Per run dir: the log followed incrementally (``log``) and the run's record (``describe``)."""

    def __init__(self):
        self._lock = threading.RLock()  # the arrays are not resized while numpy reads them
        self._logs: dict[Path, _Log] = {}
        self._records: dict[Path, tuple] = {}  # run dir -> (signature, run.json info, record)

    def log(self, run_dir: Path) -> _Log:
        """The run's log brought up to date (a log that shrank, a run started over, is read again)."""
        with self._lock:
            st = self._logs.get(run_dir)
            path = run_dir / "training_log.csv"
            sig = _stat(path)
            if st is not None and st.signature == sig and sig is not None:
                return st
            if st is None or sig is None or sig[0] < st.offset or (st.signature and sig[2] != st.signature[2]):
                st = self._logs[run_dir] = _Log()
            if sig is not None:
                try:
                    new, st.offset, header, st.lines = read_log_since(run_dir, st.offset, st.header, st.lines)
                    st.header = header or st.header
                    st.add(new)
                    st.error = None
                except AuraError as e:
                    st.error = str(e)
                st.signature = sig
            return st

    def series(self, run_dir: Path, max_points: int) -> dict:
        with self._lock:
            log = self.log(run_dir)
            if log.error and not log.n:
                raise AuraError(log.error)
            return series(log, max_points)

    def describe(self, run_dir: Path) -> dict:
        """``aura.watch.runs.describe_run`` of the run, with its log followed here; cached while nothing
        about the run changed."""
        log = self.log(run_dir)
        sig = tuple(
            _stat(p)
            for p in (
                run_dir / "run.json",
                run_dir / "training_log.csv",
                run_dir,
                run_dir / "best",
                run_dir / "best" / "best.json",
                run_dir / "final",
            )
        )
        cached = self._records.get(run_dir)
        if cached is not None and cached[0] == sig:
            status, local = live_status(cached[1], run_dir) if cached[1] else ("unknown", True)
            if (status, local) == (cached[2]["status"], cached[2]["local"]):
                return cached[2]
        with self._lock:
            rec = describe_run(run_dir, log.summary)
        if log.error and not rec["warning"]:
            rec["warning"] = log.error
        from aura.core.files import loads_json

        try:
            info = loads_json((run_dir / "run.json").read_bytes())
        except (OSError, ValueError):
            info = {}
        self._records[run_dir] = (sig, info if isinstance(info, dict) else {}, rec)
        return rec


def downsample(xs: np.ndarray, ys: np.ndarray, max_points: int) -> tuple[np.ndarray, np.ndarray]:
    """At most ``max_points`` points: per bucket the min and max of y (in x order), plus the last point."""
    n = len(xs)
    if n <= max_points or max_points < 4:
        return xs, ys
    buckets = max_points // 2 - 1
    bucket = (np.arange(n) * buckets) // n  # bucket b holds the indices [b*n/buckets, (b+1)*n/buckets)
    order = np.lexsort((ys, bucket))  # by bucket, then by y (stable: ties keep x order)
    starts = np.searchsorted(bucket[order], np.arange(buckets))
    ends = np.append(starts[1:], n) - 1
    keep = np.unique(np.concatenate([order[starts], order[ends], [n - 1]]))
    return xs[keep], ys[keep]


def series(log: _Log, max_points: int) -> dict:
    """{"columns": [...], "series": {column: {"x": steps, "y": values}}, "epoch_series": {column: {"x", "y"}},
    "rows": n} for the page's charts; ``epoch_series``: the per-epoch averages (``EPOCH_AVERAGED``) of the
    rows of kind "epoch", apart from the per-interval values.

    Non-finite values (a diverged loss) are left out of a curve; rows without a step are not plotted."""
    out, per_epoch = {}, {}
    if log.n and "step" in log.columns:
        steps = np.frombuffer(log.columns["step"], dtype=np.float64, count=log.n)
        has_step = np.isfinite(steps)
        epoch = np.frombuffer(log.epoch_rows, dtype=np.int8, count=log.n).astype(bool)
        for col, values in log.columns.items():
            if col in X_COLUMNS:
                continue
            ys = np.frombuffer(values, dtype=np.float64, count=log.n)
            mask = has_step & np.isfinite(ys)
            if col in EPOCH_AVERAGED:
                if (mask & epoch).any():
                    x, y = downsample(steps[mask & epoch], ys[mask & epoch], max_points)
                    per_epoch[col] = {"x": x.tolist(), "y": y.tolist()}
                mask &= ~epoch
            if mask.any():
                x, y = downsample(steps[mask], ys[mask], max_points)
                out[col] = {"x": x.tolist(), "y": y.tolist()}
    columns = list(out) + [c for c in per_epoch if c not in out]
    return {"columns": columns, "series": out, "epoch_series": per_epoch, "rows": log.n}
