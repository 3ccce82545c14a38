"""Experiment trackers (``--report-to``): W&B, MLflow and Trackio as more sinks of the one metrics fan-out.

``MetricsLogger`` writes every ``training_log.csv`` row and hands the same row to ``Trackers``, which puts it
on a bounded queue; one daemon thread delivers it to each tracker through the tracker's own library
(``wandb``, ``mlflow``'s ``MlflowClient``, ``trackio``). The training step never waits for a tracker: a full
queue drops the row (one warning), and a tracker that fails (library missing, server unreachable, bad URI or
credentials) is reported once and left out for the rest of the run while the CSV and TensorBoard stay complete.

What a tracker receives: at the start the run's resolved configuration, step plan and hardware; each CSV row
as metrics at its step (a ``step`` row's columns under their own names, an ``eval`` or ``epoch`` row's value
columns as ``eval/NAME`` and ``epoch/NAME``); at the end where ``final/`` and ``best/`` are. A resumed run
continues the same tracker run when that run holds exactly the steps up to the checkpoint: its id and the last
step it received are kept in ``run.json`` (``trackers``), and rows up to that step are not sent again. When it
may hold more (the run was killed with ``kill -9`` after its last checkpoint, so run.json still says
``running``, or an older checkpoint is resumed), a tracker that cannot rewind a run (W&B's rewind is a server
preview, MLflow and Trackio have none) gets a new run linked to the first (``aura.parent_run``,
``aura.parent_step``; MLflow also ``mlflow.parentRunId``) that receives the steps after the checkpoint, and the
log says so: no run holds a step twice. TensorBoard rewinds itself (``aura.train.run.metrics``: the resumed
writer's ``purge_step``).
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import queue
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from aura.core import console
from aura.core.errors import AuraError
from aura.core.i18n import Messages

M = Messages(
    "trackers",
    {
        "bad_name": (
            "--report-to: '{name}' no es un destino conocido{close}. Valores válidos: {valid} (varios "
            "separados por comas) o none.",
            "--report-to: '{name}' is not a known destination{close}. Valid values: {valid} (several "
            "separated by commas) or none.",
        ),
        "close": (" (¿quisiste decir '{name}'?)", " (did you mean '{name}'?)"),
        "none_alone": (
            "--report-to: 'none' no se combina con otros destinos (recibido: {value}).",
            "--report-to: 'none' cannot be combined with other destinations (got: {value}).",
        ),
        "empty": (
            "--report-to está vacío: indica tensorboard, wandb, mlflow, trackio (separados por comas) o none.",
            "--report-to is empty: give tensorboard, wandb, mlflow, trackio (comma-separated) or none.",
        ),
        "failed": (
            "El seguimiento en {tracker} se desactiva para el resto de la ejecución: {error}. El "
            "entrenamiento sigue; training_log.csv (y TensorBoard) quedan completos.{hint}",
            "Tracking to {tracker} is disabled for the rest of the run: {error}. Training goes on; "
            "training_log.csv (and TensorBoard) stay complete.{hint}",
        ),
        "hint_missing": (
            ' Instálalo con: pip install -e ".[{extra}]".',
            ' Install it with: pip install -e ".[{extra}]".',
        ),
        "hint_mlflow": (
            " Comprueba MLFLOW_TRACKING_URI ({uri}) y que el servidor esté en marcha.",
            " Check MLFLOW_TRACKING_URI ({uri}) and that the server is running.",
        ),
        "unreachable": ("el servidor {uri} no responde ({error})", "the server {uri} does not answer ({error})"),
        "dropped": (
            "La cola de los trackers está llena (un tracker va más lento que el entrenamiento): se descartan "
            "filas para {trackers}; training_log.csv las tiene todas.",
            "The trackers' queue is full (a tracker is slower than training): rows are dropped for "
            "{trackers}; training_log.csv has them all.",
        ),
        "new_run": (
            "{tracker}: se reanuda en el paso {step}, pero la ejecución {old} puede tener pasos posteriores "
            "(se cortó sin guardar, o se reanuda un checkpoint anterior) y {tracker} no rebobina: lo reanudado "
            "va a una ejecución nueva, {new}, enlazada a la primera (aura.parent_run={old}).",
            "{tracker}: resuming at step {step}, but run {old} may hold later steps (it was cut off without "
            "saving, or an older checkpoint is resumed) and {tracker} cannot rewind: the resumed part goes to a "
            "new run, {new}, linked to the first (aura.parent_run={old}).",
        ),
        "late": (
            "{trackers} no terminó en {seconds:.0f} s; su registro puede quedar incompleto (training_log.csv "
            "está completo).",
            "{trackers} did not finish within {seconds:.0f} s; its record may be incomplete (training_log.csv is "
            "complete).",
        ),
    },
)

TRACKERS = ("tensorboard", "wandb", "mlflow", "trackio")
QUEUE_ROWS = 10_000  # rows waiting for the trackers' thread; beyond that a row is dropped, never waited for
CLOSE_TIMEOUT_S = 60.0  # at the end of a run: how long the last rows may take to be delivered
PROBE_TIMEOUT_S = 5.0  # an MLflow server's /health must answer within this (else: disabled, not retried for minutes)
BOOKKEEPING = ("time", "kind", "step")  # CSV columns that are not metrics
ROW_CONTEXT = ("epoch", "tokens", "seconds")  # a step row's own; an eval/epoch row reports its values only


def parse_report_to(value: str) -> tuple[str, ...]:
    """``--report-to`` -> the destinations in order (``()`` for ``none``); an unknown name is an AuraError."""
    names = [n.strip().lower() for n in str(value).split(",") if n.strip()]
    if not names:
        raise AuraError(M("empty"))
    if "none" in names:
        if len(names) > 1:
            raise AuraError(M("none_alone", value=value))
        return ()
    for name in names:
        if name not in TRACKERS:
            close = difflib.get_close_matches(name, TRACKERS, n=1, cutoff=0.6)
            raise AuraError(
                M("bad_name", name=name, close=M("close", name=close[0]) if close else "", valid=", ".join(TRACKERS))
            )
    return tuple(dict.fromkeys(names))


def row_metrics(row: dict[str, Any]) -> tuple[int, dict[str, float]]:
    """A ``training_log.csv`` row (as written) -> (step, the metrics a tracker receives)."""
    kind, step = str(row.get("kind") or "step"), int(row.get("step") or 0)
    out = {}
    for col, value in row.items():
        if col in BOOKKEEPING or value in (None, "") or (kind != "step" and col in ROW_CONTEXT):
            continue
        try:
            out[col if kind == "step" else f"{kind}/{col}"] = float(value)
        except (TypeError, ValueError):
            continue
    return step, out


def checked_record(value: Any) -> dict[str, dict] | None:
    """run.json's ``trackers`` read back: ``{name: {"run_id": str, "last_step": int}}`` or None when its
    shape is not the one Aura writes (a hand edit): the resumed run then starts new tracker runs."""
    if not isinstance(value, dict):
        return None
    for name, entry in value.items():
        if (
            name not in TRACKERS
            or not isinstance(entry, dict)
            or not isinstance(entry.get("run_id"), str)
            or not isinstance(entry.get("last_step"), int)
            or isinstance(entry.get("last_step"), bool)
        ):
            return None
    return value


@dataclass
class RunInfo:
    """What a tracker is told when the run starts."""

    name: str  # the run directory's name: W&B/Trackio run name, MLflow experiment and run name
    run_dir: Path
    kind: str  # pretrain | finetune
    config: dict  # the resolved flags (aura.core.config.to_dict)
    plan: dict  # StepPlan.to_dict()
    hardware: dict  # HardwareInfo.to_dict()
    world_size: int = 1
    previous: dict = field(default_factory=dict)  # run.json's trackers of the run being resumed
    previous_status: str | None = None  # run.json's status then: "running" after a kill -9 (not closed)
    parent: dict = field(default_factory=dict)  # a linked new run's parent: {"run": id, "step": step}

    def params(self) -> dict[str, Any]:
        out = {
            "kind": self.kind,
            "run_dir": str(self.run_dir),
            "world_size": self.world_size,
            "config": self.config,
            "plan": self.plan,
            "hardware": self.hardware,
        }
        if self.parent:
            out["aura"] = {"parent_run": self.parent["run"], "parent_step": self.parent["step"]}
        return out


class Sink(Protocol):
    """One tracker, driven from the trackers' thread only."""

    name: str
    run_id: str | None

    def start(self, info: RunInfo, resume_id: str | None) -> None: ...

    def log(self, metrics: dict[str, float], step: int) -> None: ...

    def finish(self, status: str, outputs: dict[str, str]) -> None: ...


def _flat(d: dict, prefix: str = "") -> dict[str, str]:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flat(v, key + "."))
        else:
            out[key] = "" if v is None else str(v)
    return out


class WandbSink:
    """``wandb``: WANDB_MODE (``offline`` writes the run under WANDB_DIR, else the run dir), WANDB_PROJECT
    (default ``aura``); a resumed run continues the run id with ``resume="allow"``."""

    name = "wandb"

    def __init__(self):
        self.run_id, self.run = None, None

    def start(self, info: RunInfo, resume_id: str | None) -> None:
        import wandb

        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT") or "aura",
            name=info.name,
            dir=os.environ.get("WANDB_DIR") or str(info.run_dir),
            config=info.params(),
            id=resume_id,
            resume="allow" if resume_id else None,
            reinit="create_new",
            settings=wandb.Settings(console="off", silent=True),
        )
        self.run_id = self.run.id

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(metrics, step=step)

    def finish(self, status: str, outputs: dict[str, str]) -> None:
        self.run.summary.update({"status": status, **outputs})
        self.run.finish(exit_code=0 if status == "finished" else 1)


class MlflowSink:
    """``mlflow``'s client: MLFLOW_TRACKING_URI (a server is asked for /health first, so that one that is down
    disables the tracker in seconds, not after minutes of retries); the experiment is MLFLOW_EXPERIMENT_NAME or
    the run directory's name; the configuration, plan and hardware as params, the outputs as tags."""

    name = "mlflow"

    def __init__(self):
        self.run_id, self.client, self._pending = None, None, []

    def start(self, info: RunInfo, resume_id: str | None) -> None:
        import mlflow
        from mlflow.tracking import MlflowClient

        uri = mlflow.get_tracking_uri()
        if uri.startswith(("http://", "https://")):
            try:
                urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=PROBE_TIMEOUT_S).read()
            except Exception as e:  # noqa: BLE001 - any failure means: not usable now
                raise RuntimeError(M("unreachable", uri=uri, error=e)) from None
        self.client = MlflowClient(tracking_uri=uri)
        if resume_id:
            self.client.update_run(resume_id, status="RUNNING")
            self.run_id = resume_id
            return
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or info.name
        experiment = self.client.get_experiment_by_name(name)
        experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(name)
        tags = {"aura.kind": info.kind}
        if info.parent:  # a resumed part that cannot go into the first run (module docstring)
            tags.update(
                {
                    "aura.parent_run": info.parent["run"],
                    "aura.parent_step": str(info.parent["step"]),
                    "mlflow.parentRunId": info.parent["run"],
                }
            )
        run = self.client.create_run(experiment_id, run_name=info.name, tags=tags)
        self.run_id = run.info.run_id
        from mlflow.entities import Param

        params = [Param(k[:250], v[:6000]) for k, v in _flat(info.params()).items()]
        for i in range(0, len(params), 100):  # MLflow's limit per batch
            self.client.log_batch(self.run_id, params=params[i : i + 100])

    def log(self, metrics: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, v, now, step) for k, v in metrics.items()])

    def finish(self, status: str, outputs: dict[str, str]) -> None:
        for k, v in outputs.items():
            self.client.set_tag(self.run_id, f"aura.{k}", v)
        self.client.set_terminated(
            self.run_id,
            status="FINISHED" if status == "finished" else "KILLED" if status == "interrupted" else "FAILED",
        )


class TrackioSink:
    """``trackio``'s local store (TRACKIO_DIR, else HF_HOME/trackio), project TRACKIO_PROJECT (default
    ``aura``), the run named after the run directory and its start time; a resumed run continues it
    (``resume="must"``)."""

    name = "trackio"

    def __init__(self):
        self.run_id, self.run = None, None

    def start(self, info: RunInfo, resume_id: str | None) -> None:
        import trackio

        # a run is found by its name in a project: a new one gets the start time too, never another run's name
        name = resume_id or f"{info.name}-{time.strftime('%Y%m%d-%H%M%S')}"
        self.run = trackio.init(
            project=os.environ.get("TRACKIO_PROJECT") or "aura",
            name=name,
            config=_flat(info.params()),
            resume="must" if resume_id else "never",
            embed=False,
            auto_log_gpu=False,
            auto_log_cpu=False,
        )
        self.run_id = self.run.name

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(metrics, step=step)

    def finish(self, status: str, outputs: dict[str, str]) -> None:
        import trackio

        trackio.finish()


SINKS = {"wandb": (WandbSink, "wandb"), "mlflow": (MlflowSink, "mlflow"), "trackio": (TrackioSink, "trackio")}


class Trackers:
    """The trackers of one run (rank 0) behind one bounded queue and one daemon thread: ``row`` never waits."""

    def __init__(self, names: tuple[str, ...], info: RunInfo, *, resumed: bool, resume_step: int | None = None):
        """``resume_step``: the checkpoint's step when ``resumed`` (rows after it are sent again)."""
        self.sinks = [SINKS[n][0]() for n in names if n in SINKS]
        self.failed: set[str] = set()
        previous = dict(info.previous) if resumed else {}
        step = int(resume_step or 0)
        # the first run holds exactly the steps up to the checkpoint only when the run was closed (its thread
        # drained, run.json written) at or before the checkpoint; else a new run, linked (module docstring)
        closed = info.previous_status is not None and info.previous_status != "running"
        self._forks = {n: e for n, e in previous.items() if not (closed and e["last_step"] <= step)}
        self._skip = {n: (step if n in self._forks else e["last_step"]) for n, e in previous.items()}
        self._ids = {n: e["run_id"] for n, e in previous.items() if n not in self._forks}
        self._previous = previous
        self.last_step: dict[str, int] = dict(self._skip)
        self._warned_full = False
        self.started = threading.Event()  # every tracker started (or failed): their run ids are known
        self._q: queue.Queue = queue.Queue(maxsize=QUEUE_ROWS)
        self._thread = None
        if self.sinks:
            self._thread = threading.Thread(target=self._work, args=(info,), daemon=True, name="aura-trackers")
            self._thread.start()

    def row(self, row: dict[str, Any]) -> None:
        """A training_log.csv row just written (main thread; returns at once)."""
        if self._thread is None:
            return
        try:
            self._q.put_nowait(("log", row_metrics(row)))
        except queue.Full:
            if not self._warned_full:
                self._warned_full = True
                console.warn(M("dropped", trackers=", ".join(s.name for s in self.sinks)))

    def record(self) -> dict[str, dict]:
        """run.json's ``trackers``: each started tracker's run id and the last step it received."""
        return {
            **self._previous,
            **{
                s.name: {"run_id": s.run_id, "last_step": int(self.last_step.get(s.name, 0))}
                for s in self.sinks
                if s.run_id is not None
            },
        }

    def close(self, *, status: str, outputs: dict[str, str], timeout: float = CLOSE_TIMEOUT_S) -> None:
        """Deliver what is queued, then the outputs and the end (waits at most ``timeout`` seconds)."""
        if self._thread is None:
            return
        deadline = time.monotonic() + timeout
        try:
            self._q.put(("finish", (status, outputs)), timeout=timeout)
        except queue.Full:
            pass
        self._thread.join(max(0.0, deadline - time.monotonic()))
        if self._thread.is_alive():
            late = [s.name for s in self.sinks if s.name not in self.failed]
            console.warn(M("late", trackers=", ".join(late), seconds=timeout))
        self._thread = None

    def _work(self, info: RunInfo) -> None:
        live = []
        for sink in self.sinks:
            try:
                parent = self._forks.get(sink.name)
                sink.start(
                    dataclasses.replace(info, parent={"run": parent["run_id"], "step": self._skip[sink.name]})
                    if parent
                    else info,
                    self._ids.get(sink.name),
                )
                if parent:
                    console.warn(
                        M(
                            "new_run",
                            tracker=sink.name,
                            step=self._skip[sink.name],
                            old=parent["run_id"],
                            new=sink.run_id,
                        )
                    )
                live.append(sink)
            except BaseException as e:  # noqa: BLE001 - a tracker never stops training
                self._fail(sink, e)
        self.started.set()
        while True:
            op, payload = self._q.get()
            if op == "finish":
                for sink in live:
                    try:
                        sink.finish(*payload)
                    except BaseException as e:  # noqa: BLE001
                        self._fail(sink, e)
                return
            step, metrics = payload
            for sink in list(live):
                if step <= self._skip.get(sink.name, -1) or not metrics:
                    continue  # the tracker already holds it (before the resume)
                try:
                    sink.log(metrics, step)
                    self.last_step[sink.name] = step
                except BaseException as e:  # noqa: BLE001
                    self._fail(sink, e)
                    live.remove(sink)

    def _fail(self, sink, error: BaseException) -> None:
        self.failed.add(sink.name)
        hint = ""
        if isinstance(error, ImportError):
            hint = M("hint_missing", extra=SINKS[sink.name][1])
        elif sink.name == "mlflow":
            hint = M("hint_mlflow", uri=os.environ.get("MLFLOW_TRACKING_URI", "-"))
        text = str(error).strip().splitlines()[0][:300] if str(error).strip() else type(error).__name__
        console.warn(M("failed", tracker=sink.name, error=text, hint=hint))
