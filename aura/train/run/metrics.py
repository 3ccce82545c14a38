"""One logger for training metrics, fanned out to console, ``training_log.csv`` and TensorBoard (rank 0).

Series names keep the original guides' spelling (``Loss/train_step``, ``Loss/train_epoch``,
``Loss/val_epoch``, ``System/CPU_percent``, ``System/RAM_percent``, ``System/GPU_VRAM_MB``,
``Time/epoch_seconds``) plus ``LR``, ``Throughput/tokens_per_s`` and ``Perf/MFU``. ``RunStatus`` keeps
``run.json`` (running / finished / interrupted / failed) up to date, written atomically.
``TrainMetrics`` bundles them for the training loop: the run setup builds it, the loop only reports.
"""

from __future__ import annotations

import csv
import io
import math
import os
import socket
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from aura import __version__
from aura.core import console
from aura.core.atomic import atomic_write_json, atomic_write_text, read_json
from aura.core.console import format_duration
from aura.core.i18n import Messages, count, num
from aura.distributed import DistInfo

M = Messages(
    "metrics",
    {
        "step": (
            "Época {epoch} | Paso {step}/{total} | Pérdida: {loss} | LR {lr:.2e} | Grad {grad} | "
            "{tps:,.0f} tok/s | MFU {mfu} | Mem {mem} | ETA {eta}{sync}",
            "Epoch {epoch} | Step {step}/{total} | Loss: {loss} | LR {lr:.2e} | Grad {grad} | "
            "{tps:,.0f} tok/s | MFU {mfu} | Mem {mem} | ETA {eta}{sync}",
        ),
        "epoch": (
            "Época {epoch}/{epochs} | Pérdida de entrenamiento: {train} | Pérdida de validación: {val} | "
            "Duración época: {seconds:.1f}s",
            "Epoch {epoch}/{epochs} | Train loss: {train} | Val loss: {val} | Epoch time: {seconds:.1f}s",
        ),
        "eval": (
            "Validación en el paso {step}: pérdida {val:.4f} (perplejidad {ppl:.1f})",
            "Validation at step {step}: Loss {val:.4f} (perplexity {ppl:.1f})",
        ),
        "eval_pref": (
            "Validación en el paso {step}: pérdida {val:.4f}, acierto de preferencias {acc:.1f} % (la "
            "respuesta elegida gana a la rechazada), margen de recompensa {margin:.3f}",
            "Validation at step {step}: Loss {val:.4f}, reward accuracy {acc:.1f}% (the chosen answer "
            "beats the rejected one), reward margin {margin:.3f}",
        ),
        "epoch_pref": (
            "Validación de la época {epoch}: acierto de preferencias {acc:.1f} %, margen de recompensa {margin:.3f}",
            "Epoch {epoch} validation: reward accuracy {acc:.1f}%, reward margin {margin:.3f}",
        ),
        "eval_distill": (
            "Validación en el paso {step}: divergencia del maestro {val:.4f} (JSD generalizada por token de respuesta)",
            "Validation at step {step}: divergence from the teacher {val:.4f} (generalised JSD per answer token)",
        ),
        "eval_kto": (
            "Validación en el paso {step}: pérdida {val:.4f}, recompensa de las respuestas buenas {chosen}, de "
            "las malas {rejected} (KL {kl})",
            "Validation at step {step}: Loss {val:.4f}, reward of the good answers {chosen}, of the bad ones "
            "{rejected} (KL {kl})",
        ),
        "reserved": (" (reservada {gb} GB)", " (reserved {gb} GB)"),
        "mfu_peak": ("MFU calculado frente al pico de {peak}.", "MFU computed against the peak of {peak}."),
        "mfu_unknown": (
            "MFU no disponible: no se conoce el pico de FLOP/s de {device}.",
            "MFU not available: the peak FLOP/s of {device} is not known.",
        ),
        "eta_budget": (
            "El tiempo estimado ({total}) supera el presupuesto de --time-budget {budget:g} h. Reduce "
            "épocas o pasos (--epochs, --max-steps) o usa un preset más pequeño.",
            "The estimated time ({total}) exceeds --time-budget {budget:g} h. Reduce epochs or steps "
            "(--epochs, --max-steps) or use a smaller preset.",
        ),
    },
)

CSV_COLUMNS = [
    "time",
    "kind",
    "epoch",
    "step",
    "tokens",
    "train_loss",
    "val_loss",
    "lr",
    "grad_norm",
    "tokens_per_s",
    "mfu",
    "seconds",
    "mem_peak_gb",
    "mem_reserved_gb",
]


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _fmt(x: float | None, spec: str = ".4f") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def _preference(stats: dict[str, float] | None) -> dict[str, float] | None:
    """A preference objective's validation figures to say (accuracy in %, margin), or None for a token loss."""
    if not stats or "rewards/accuracy" not in stats or "rewards/margin" not in stats:
        return None
    return {"acc": 100.0 * stats["rewards/accuracy"], "margin": stats["rewards/margin"]}


def _shown(x: float | None, spec: str = ".4f") -> str:
    """A console value in the language's number format (the CSV keeps ``_fmt``'s)."""
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else num(x, spec)


def memory_in_use(device) -> float:
    """Bytes of peak accelerator memory (CUDA) or resident memory of this process (CPU)."""
    return memory_peaks(device, reset=False)[0]


def memory_peaks(device, *, reset: bool = True) -> tuple[float, float | None]:
    """(peak allocated, peak reserved) bytes on CUDA since the last reset, then reset, so that each logging
    interval reports its own peaks: the caching allocator's reserved memory is what an out-of-memory error
    is about, allocated alone can say a run fits when it does not. On the CPU: (resident memory, None)."""
    import torch

    if getattr(device, "type", "cpu") == "cuda":
        peaks = float(torch.cuda.max_memory_allocated(device)), float(torch.cuda.max_memory_reserved(device))
        if reset:
            torch.cuda.reset_peak_memory_stats(device)
        return peaks
    import psutil

    return float(psutil.Process().memory_info().rss), None


class MetricsLogger:
    """Console + CSV + TensorBoard on rank 0; other ranks only count (nothing is written)."""

    def __init__(
        self,
        run_dir: Path,
        *,
        dist: DistInfo,
        total_steps: int,
        resume_step: int | None = None,
        time_budget_h: float = 0.0,
        peak_name: str | None = None,
        device_name: str = "",
        tensorboard: bool = True,
        extra_columns: tuple[str, ...] = (),
        trackers=None,
    ):
        """``extra_columns``: the objective's statistics and the evaluators' values (CSV columns after the
        standard ones; TensorBoard tags as named, e.g. ``rewards/accuracy``); ``trackers``
        (``aura.train.run.trackers.Trackers``) receives every CSV row as it is written."""
        self.run_dir, self.dist, self.total_steps = Path(run_dir), dist, total_steps
        self.columns = CSV_COLUMNS + [c for c in extra_columns if c not in CSV_COLUMNS]
        self.time_budget_h = time_budget_h
        self.csv_path = self.run_dir / "training_log.csv"
        self.writer = None
        self.trackers = trackers
        self._warned_budget = False
        if not dist.is_main:
            return
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._prepare_csv(resume_step)
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            # a resumed writer makes TensorBoard's readers drop what an earlier writer logged after the
            # checkpoint (steps >= purge_step; the checkpoint's own step stays): no step shows twice
            self.writer = SummaryWriter(
                str(self.run_dir / "tb"), purge_step=None if resume_step is None else resume_step + 1
            )
        if peak_name:
            console.info(M("mfu_peak", peak=peak_name))
        else:
            console.info(M("mfu_unknown", device=device_name or str(dist.device)))
        import psutil

        psutil.cpu_percent(None)  # prime: later calls measure since the previous one

    def _prepare_csv(self, resume_step: int | None) -> None:
        """New header, or on resume drop rows logged after the checkpoint (they will be redone)."""
        if resume_step is None or not self.csv_path.is_file():
            atomic_write_text(self.csv_path, ",".join(self.columns) + "\n")
            return
        with open(self.csv_path, newline="", encoding="utf-8") as f:
            rows = [r for r in csv.DictReader(f) if int(r.get("step") or 0) <= resume_step]
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=self.columns, lineterminator="\n")
        w.writeheader()
        w.writerows({k: r.get(k, "") for k in self.columns} for r in rows)
        atomic_write_text(self.csv_path, buf.getvalue())

    def _csv(self, **row) -> None:
        row = {k: ("" if row.get(k) is None else row.get(k)) for k in self.columns}
        row["time"] = _now()
        with open(self.csv_path, "a", newline="", encoding="utf-8") as f:
            csv.DictWriter(f, fieldnames=self.columns, lineterminator="\n").writerow(row)
            f.flush()
        if self.trackers is not None:
            self.trackers.row(row)

    def _scalar(self, tag: str, value: float | None, step: int) -> None:
        if self.writer is not None and value is not None and math.isfinite(value):
            self.writer.add_scalar(tag, value, step)

    def step(
        self,
        *,
        step: int,
        epoch: int,
        tokens: int,
        loss: float | None,
        lr: float,
        grad_norm: float | None,
        tokens_per_s: float,
        mfu: float | None,
        seconds: float,
        eta_s: float | None,
        elapsed_s: float,
        sync: str | None = None,
        extras: dict[str, float] | None = None,
    ) -> None:
        """``sync``: the cross-rank check's verdict (``aura.distributed.sync_status``), None alone;
        ``extras``: the objective's statistics for the interval (one more console line, CSV, TensorBoard)."""
        if not self.dist.is_main:
            return
        mem, reserved = memory_peaks(self.dist.device)
        console.info(
            M(
                "step",
                epoch=epoch + 1,
                step=step,
                total=self.total_steps,
                loss=_shown(loss),
                lr=lr,
                grad=_shown(grad_norm, ".3f"),
                tps=tokens_per_s,
                mfu="-" if mfu is None else f"{num(100 * mfu, '.1f')}%",
                mem=f"{num(mem / 1e9, '.2f')} GB"
                + ("" if reserved is None else M("reserved", gb=num(reserved / 1e9, ".2f"))),
                eta="-" if eta_s is None else format_duration(eta_s),
                sync="" if sync is None else f" | Sync={sync}",
            )
        )
        self._csv(
            kind="step",
            epoch=epoch + 1,
            step=step,
            tokens=tokens,
            train_loss=None if loss is None else f"{loss:.6f}",
            lr=f"{lr:.6e}",
            grad_norm=_fmt(grad_norm, ".6f") if grad_norm is not None else None,
            tokens_per_s=f"{tokens_per_s:.1f}",
            mfu=None if mfu is None else f"{mfu:.4f}",
            seconds=f"{elapsed_s:.2f}",
            mem_peak_gb=f"{mem / 1e9:.3f}",
            mem_reserved_gb=None if reserved is None else f"{reserved / 1e9:.3f}",
            **self._extras(extras, step),
        )
        self._scalar("Loss/train_step", loss, step)
        self._scalar("LR", lr, step)
        self._scalar("Train/grad_norm", grad_norm, step)
        self._scalar("Throughput/tokens_per_s", tokens_per_s, step)
        self._scalar("Perf/MFU", mfu, step)
        self._system(step)
        if eta_s is not None and self.time_budget_h > 0 and not self._warned_budget:
            total = elapsed_s + eta_s
            if total > self.time_budget_h * 3600:
                self._warned_budget = True
                console.warn(M("eta_budget", total=format_duration(total), budget=self.time_budget_h))

    def _extras(self, values: dict[str, float] | None, step: int) -> dict[str, str]:
        """Console line + TensorBoard scalars for extra values; returns their CSV cells."""
        if not values:
            return {}
        # counts summed over units (tokens_es) as integers; every value in the language's number format
        console.info("  " + " | ".join(f"{k}={'-' if v is None else count(v)}" for k, v in values.items()))
        for k, v in values.items():
            self._scalar(k, v, step)
        return {k: f"{v:.6f}" for k, v in values.items() if v is not None and math.isfinite(v)}

    def values(self, *, step: int, epoch: int, tokens: int, values: dict[str, float], elapsed_s: float) -> None:
        """An evaluator's results at ``step`` (a CSV row of kind ``eval``)."""
        if not self.dist.is_main or not values:
            return
        self._csv(
            kind="eval",
            epoch=epoch + 1,
            step=step,
            tokens=tokens,
            seconds=f"{elapsed_s:.2f}",
            **self._extras(values, step),
        )
        if self.writer is not None:
            self.writer.flush()

    def _system(self, step: int) -> None:
        if self.writer is None:
            return
        import psutil

        self._scalar("System/CPU_percent", psutil.cpu_percent(None), step)
        self._scalar("System/RAM_percent", psutil.virtual_memory().percent, step)
        if self.dist.device.type == "cuda":
            import torch

            self._scalar("System/GPU_VRAM_MB", torch.cuda.memory_allocated(self.dist.device) / 2**20, step)
            self._scalar("System/GPU_reserved_MB", torch.cuda.memory_reserved(self.dist.device) / 2**20, step)
        else:
            self._scalar("System/GPU_VRAM_MB", 0.0, step)

    def eval(
        self,
        *,
        step: int,
        epoch: int,
        tokens: int,
        val_loss: float,
        elapsed_s: float,
        stats: dict[str, float] | None = None,
    ) -> None:
        """A validation at ``step``. A token loss is also said as a perplexity; a preference loss (DPO, ORPO:
        ``stats`` has the rewards) has none worth saying: its reward accuracy and margin instead."""
        if not self.dist.is_main:
            return
        pref = _preference(stats)
        if pref is not None:
            console.info(M("eval_pref", step=step, val=val_loss, **pref))
        elif stats and "kl" in stats:  # KTO: no pairs to rank, the rewards of each kind and the reference point
            console.info(
                M(
                    "eval_kto",
                    step=step,
                    val=val_loss,
                    chosen=_shown(stats.get("rewards/chosen"), ".3f"),
                    rejected=_shown(stats.get("rewards/rejected"), ".3f"),
                    kl=_shown(stats["kl"], ".3f"),
                )
            )
        elif stats and "on_policy" in stats:  # distillation: a divergence, not a token loss: no perplexity
            console.info(M("eval_distill", step=step, val=val_loss))
        else:
            console.info(M("eval", step=step, val=val_loss, ppl=math.exp(min(val_loss, 50.0))))
        # the validation's statistics in the objective's own columns of this eval row (the report's headline)
        own = self._own_columns(stats)
        self._csv(
            kind="eval",
            epoch=epoch + 1,
            step=step,
            tokens=tokens,
            val_loss=f"{val_loss:.6f}",
            seconds=f"{elapsed_s:.2f}",
            **own,
        )
        self._scalar("Loss/val_step", val_loss, step)
        self._val_stats(stats, step)

    def _own_columns(self, stats: dict[str, float] | None) -> dict[str, str]:
        """A validation's statistics as the CSV cells of the objective's own columns (DPO's rewards/accuracy)."""
        return {
            k: f"{v:.6f}"
            for k, v in (stats or {}).items()
            if k in self.columns and k not in CSV_COLUMNS and v is not None and math.isfinite(v)
        }

    def _val_stats(self, stats: dict[str, float] | None, step: int) -> None:
        for name, value in (stats or {}).items():
            self._scalar(f"Val/{name}", value, step)

    def epoch(
        self,
        *,
        step: int,
        epoch: int,
        epochs: int,
        tokens: int,
        train_loss: float | None,
        val_loss: float | None,
        epoch_seconds: float,
        elapsed_s: float,
        val_stats: dict[str, float] | None = None,
    ) -> None:
        if not self.dist.is_main:
            return
        console.info(
            M(
                "epoch",
                epoch=epoch + 1,
                epochs=epochs,
                train=_shown(train_loss),
                val=_shown(val_loss),
                seconds=epoch_seconds,
            )
        )
        pref = _preference(val_stats) if val_loss is not None else None
        if pref is not None:
            console.info(M("epoch_pref", epoch=epoch + 1, **pref))
        self._val_stats(val_stats, step)
        self._csv(
            kind="epoch",
            epoch=epoch + 1,
            step=step,
            tokens=tokens,
            train_loss=None if train_loss is None else f"{train_loss:.6f}",
            val_loss=None if val_loss is None else f"{val_loss:.6f}",
            seconds=f"{elapsed_s:.2f}",
            **(self._own_columns(val_stats) if val_loss is not None else {}),
        )
        self._scalar("Loss/train_epoch", train_loss, epoch + 1)
        self._scalar("Loss/val_epoch", val_loss, epoch + 1)
        self._scalar("Time/epoch_seconds", epoch_seconds, epoch + 1)
        if self.writer is not None:
            self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.flush()
            self.writer.close()
            self.writer = None


class RunStatus:
    """``run.json``: what a run is doing now, for ``aura runs`` and for humans (rank 0 writes)."""

    def __init__(self, run_dir: Path, *, kind: str, dist: DistInfo, argv: list[str] | None = None):
        self.path = Path(run_dir) / "run.json"
        self.enabled = dist.is_main
        self.data: dict = {}
        self.previous_status: str | None = None  # the status run.json had: "running" after a kill -9
        if not self.enabled:
            return
        previous = read_json(self.path) if self.path.is_file() else {}
        if previous.get("kind") == kind and isinstance(previous.get("status"), str):
            self.previous_status = previous["status"]
        self.data = {
            "kind": kind,
            "status": "running",
            "argv": list(sys.argv if argv is None else argv),
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": previous.get("started", _now()) if previous.get("kind") == kind else _now(),
            "updated": _now(),
            "last_step": previous.get("last_step", 0),
            "latest_checkpoint": previous.get("latest_checkpoint"),
            "aura_version": __version__,
        }
        if previous.get("kind") == kind and isinstance(previous.get("history"), list):
            self.data["history"] = previous["history"]  # every start and resume of the run (session)
        if previous.get("kind") == kind and previous.get("trackers") is not None:
            from aura.train.run.trackers import checked_record

            trackers = checked_record(previous["trackers"])  # a resumed run continues these tracker runs
            if trackers is not None:
                self.data["trackers"] = trackers
        self._write()

    def _write(self) -> None:
        if self.enabled:
            self.data["updated"] = _now()
            atomic_write_json(self.path, self.data)

    def update(self, **fields) -> None:
        if self.enabled:
            self.data.update({k: (str(v) if isinstance(v, Path) else v) for k, v in fields.items()})
            self._write()


class Throughput:
    """Tokens/s, MFU and ETA between log lines (wall-clock; the log line's sync makes it honest)."""

    def __init__(self, *, flops_per_token: float | None, peak_flops: float | None, world_size: int = 1):
        self.flops_per_token, self.peak, self.world = flops_per_token, peak_flops, world_size
        self.start = self._mark = time.perf_counter()
        self._tokens_at_mark = 0
        self._step_at_mark = 0
        self.step_seconds: float | None = None

    def reset(self, *, tokens: int, step: int) -> None:
        self._mark = time.perf_counter()
        self._tokens_at_mark, self._step_at_mark = tokens, step

    def measure(self, *, tokens: int, step: int, total_steps: int) -> tuple[float, float | None, float | None]:
        """(tokens/s over all ranks, MFU or None, ETA seconds or None) since the last call."""
        now = time.perf_counter()
        dt = max(now - self._mark, 1e-9)
        tps = (tokens - self._tokens_at_mark) / dt
        if step > self._step_at_mark:
            self.step_seconds = dt / (step - self._step_at_mark)
        mfu = None
        if self.flops_per_token and self.peak:
            mfu = tps * self.flops_per_token / (self.peak * self.world)
        eta = None if self.step_seconds is None else self.step_seconds * max(total_steps - step, 0)
        self._mark, self._tokens_at_mark, self._step_at_mark = now, tokens, step
        return tps, mfu, eta

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.start


class TrainMetrics:
    """Everything the loop reports to, as one object the run setup builds (``for_run``): MFU inputs (FLOPs per
    token, the device's peak and where that figure comes from), the ``--time-budget`` the ETA is checked
    against, and ``run.json`` (``RunStatus``).

    The loop ``open``s it once it knows the plan and the step it starts from. It then keeps the running
    token-loss sums on the device (no host sync): since the last log line, and since the epoch began (a
    checkpoint stores both, ``running_sums``, so a resumed run logs what an uninterrupted one would). Time spent
    evaluating or writing is not training time: ``restart_clock`` after each.
    """

    def __init__(
        self,
        run_dir: Path,
        *,
        dist: DistInfo,
        flops_per_token: float | None = None,
        peak_flops: float | None = None,
        peak_name: str | None = None,
        device_name: str = "",
        time_budget_h: float = 0.0,
        status: RunStatus | None = None,
        extra_columns: tuple[str, ...] = (),
        report_to: tuple[str, ...] = ("tensorboard",),
        tracker_info=None,
    ):
        self.run_dir, self.dist, self.status = Path(run_dir), dist, status
        self.report_to, self.tracker_info = tuple(report_to), tracker_info  # --report-to; trackers.RunInfo
        self.trackers = None  # from open(), rank 0
        self._ids_recorded = False  # run.json names the trackers' runs (once started: a kill -9 keeps them)
        self.extra_columns = tuple(extra_columns)
        self.flops_per_token, self.peak_flops, self.peak_name = flops_per_token, peak_flops, peak_name
        self.device_name, self.time_budget_h = device_name, time_budget_h
        self.history: list[tuple[int, float]] = []  # (step, train loss) of every logged step
        self.logger: MetricsLogger | None = None  # from open()

    @classmethod
    def for_run(
        cls,
        run_dir: Path,
        *,
        kind: str,
        dist: DistInfo,
        hardware,
        precision: str,
        flops_per_token: float | None,
        time_budget_h: float,
        extra_columns: tuple[str, ...] = (),
        report_to: tuple[str, ...] = ("tensorboard",),
        tracker_info=None,
    ) -> "TrainMetrics":
        """A training run's metrics: ``hardware`` is ``aura.models.hardware.HardwareInfo``; writes run.json (running).
        ``extra_columns``: the objective's statistics and the evaluators' values (``aura.train.objectives.objective``);
        ``report_to``: the --report-to destinations; ``tracker_info``: what the trackers are told at the start
        (``aura.train.run.trackers.RunInfo``, its ``previous`` filled here from run.json)."""
        status = RunStatus(run_dir, kind=kind, dist=dist)
        if tracker_info is not None:
            tracker_info.previous = dict(status.data.get("trackers") or {})
            tracker_info.previous_status = status.previous_status
        return cls(
            run_dir,
            dist=dist,
            flops_per_token=flops_per_token,
            peak_flops=hardware.peak_flops(precision),
            peak_name=hardware.peak_source,
            device_name=hardware.name,
            time_budget_h=time_budget_h,
            status=status,
            extra_columns=extra_columns,
            report_to=report_to,
            tracker_info=tracker_info,
        )

    def open(self, *, total_steps: int, state, resumed: bool) -> None:
        """Start logging at ``state`` (``aura.train.loop.TrainState``), continuing a resumed run's logs."""
        self.total_steps = total_steps
        if self.status is not None:  # the plan's length: aura runs / aura studio show step of plan and ETA
            self.status.update(total_steps=total_steps)
        if self.dist.is_main and self.tracker_info is not None and set(self.report_to) - {"tensorboard"}:
            from aura.train.run.trackers import Trackers

            self.trackers = Trackers(
                self.report_to, self.tracker_info, resumed=resumed, resume_step=state.step if resumed else None
            )
        self.logger = MetricsLogger(
            self.run_dir,
            dist=self.dist,
            total_steps=total_steps,
            resume_step=state.step if resumed else None,
            time_budget_h=self.time_budget_h,
            peak_name=self.peak_name,
            device_name=self.device_name,
            extra_columns=self.extra_columns,
            tensorboard="tensorboard" in self.report_to,
            trackers=self.trackers,
        )
        self.meter = Throughput(
            flops_per_token=self.flops_per_token, peak_flops=self.peak_flops, world_size=self.dist.world_size
        )
        self.meter.reset(tokens=state.tokens_seen, step=state.step)
        # a resumed run's sums continue (rank 0 holds the all-rank sums, the others 0)
        main = self.dist.is_main
        self._interval = self._zero() + (state.interval_loss_sum if main else 0.0)
        self._interval_n = state.interval_targets
        self._stats = {k: self._zero() + (v if main else 0.0) for k, v in state.interval_stats.items()}
        self._epoch = self._zero() + (state.epoch_loss_sum if main else 0.0)
        self._epoch_n, self._epoch_start = state.epoch_targets, time.perf_counter() - state.epoch_seconds

    def replan(self, *, total_steps: int) -> None:
        """The run's last step moved (a WSD cooldown started by --time-budget): step lines and ETA follow."""
        self.total_steps = total_steps
        if self.status is not None:
            self.status.update(total_steps=total_steps)
        if self.logger is not None:
            self.logger.total_steps = total_steps

    def _zero(self):
        import torch

        return torch.zeros((), dtype=torch.float64, device=self.dist.device)

    def _global(self, t) -> float:
        """Sum over ranks of a device scalar (a collective under torchrun)."""
        return float(self.dist.all_reduce(t.clone().to(self.dist.comm_device), "sum"))

    def add(self, window_loss, n_targets: int, stats: dict | None = None) -> None:
        """An applied step: its summed loss (a device tensor), its units (target tokens) on all ranks and the
        objective's summed statistics on this rank (device tensors)."""
        for k, v in (stats or {}).items():
            self._stats[k] = self._stats.get(k, 0.0) + v
        self._interval += window_loss
        self._epoch += window_loss
        self._interval_n += n_targets
        self._epoch_n += n_targets

    def log_step(self, state, *, lr: float, grad_norm: float, sync: Callable[[], str | None]) -> None:
        """The step line (console, CSV, TensorBoard) with the token-mean loss since the last one; ``sync``
        runs the cross-rank check (a collective, on every rank, only when there is a line to log)."""
        if self._interval_n or self._stats:  # a GRPO window can train nothing (all masked) and still say why
            loss = self._global(self._interval) / self._interval_n if self._interval_n else None
            tps, mfu, eta = self.meter.measure(tokens=state.tokens_seen, step=state.step, total_steps=self.total_steps)
            verdict = sync()
            extras = {}
            if self._stats:  # one collective for all of them
                import torch

                from aura.train.objectives.objective import unit_means

                names = sorted(self._stats)
                sums = self.dist.all_reduce(
                    torch.stack(
                        [torch.as_tensor(self._stats[k], dtype=torch.float64, device=self.dist.device) for k in names]
                    ).to(self.dist.comm_device),
                    "sum",
                )
                extras = unit_means(dict(zip(names, sums.tolist())), self._interval_n)
            if loss is not None:
                self.history.append((state.step, loss))
            if self.trackers is not None and not self._ids_recorded and self.trackers.started.is_set():
                self._ids_recorded = True  # before any checkpoint: a run killed then still links its tracker runs
                if self.status is not None:
                    self.status.update(**self._tracker_record())
            self.logger.step(
                step=state.step,
                epoch=state.epoch,
                tokens=state.tokens_seen,
                loss=loss,
                lr=lr,
                grad_norm=grad_norm if math.isfinite(grad_norm) else None,
                tokens_per_s=tps,
                mfu=mfu,
                seconds=self.meter.step_seconds or 0.0,
                eta_s=eta,
                elapsed_s=self.meter.elapsed,
                sync=verdict,
                extras=extras,
            )
        self._interval, self._interval_n, self._stats = self._zero(), 0, {}

    def eval(self, state, val_loss: float | None, stats: dict[str, float] | None = None) -> None:
        if val_loss is not None:
            self.logger.eval(
                step=state.step,
                epoch=state.epoch,
                tokens=state.tokens_seen,
                val_loss=val_loss,
                elapsed_s=self.meter.elapsed,
                stats=stats,
            )
        self.restart_clock(state)

    def values(self, state, values: dict[str, float]) -> None:
        """An evaluator's values at this step (console, CSV ``eval`` row, TensorBoard); not training time."""
        self.logger.values(
            step=state.step, epoch=state.epoch, tokens=state.tokens_seen, values=values, elapsed_s=self.meter.elapsed
        )
        self.restart_clock(state)

    def epoch(
        self, state, *, epochs: int, val_loss: float | None, val_stats: dict[str, float] | None = None
    ) -> tuple[float | None, float]:
        """The epoch line for ``state.epoch``, just finished; (its token-mean train loss, its seconds)."""
        train = self._global(self._epoch) / self._epoch_n if self._epoch_n else None
        seconds = time.perf_counter() - self._epoch_start
        self.logger.epoch(
            step=state.step,
            epoch=state.epoch,
            epochs=epochs,
            tokens=state.tokens_seen,
            train_loss=train,
            val_loss=val_loss,
            epoch_seconds=seconds,
            elapsed_s=self.meter.elapsed,
            val_stats=val_stats,
        )
        self._epoch, self._epoch_n = self._zero(), 0
        return train, seconds

    def new_epoch(self, state) -> None:
        self._epoch_start = time.perf_counter()
        self.restart_clock(state)

    def running_sums(self) -> dict:
        """The running sums over all ranks, for a checkpoint (``TrainState`` fields; a collective): the
        epoch's and the log interval's summed loss and units, the interval's statistics, the epoch's seconds."""
        return {
            "epoch_loss_sum": self._global(self._epoch),
            "epoch_targets": self._epoch_n,
            "epoch_seconds": time.perf_counter() - self._epoch_start,
            "interval_loss_sum": self._global(self._interval),
            "interval_targets": self._interval_n,
            "interval_stats": {k: self._global(self._zero() + v) for k, v in sorted(self._stats.items())},
        }

    def saved(self, state, path: Path) -> None:
        if self.status is not None:
            self.status.update(last_step=state.step, latest_checkpoint=path, **self._tracker_record())
        self.restart_clock(state)

    def restart_clock(self, state) -> None:
        self.meter.reset(tokens=state.tokens_seen, step=state.step)

    def close(self, *, status: str, step: int) -> None:
        """The run ended (finished | interrupted | failed): flush the logs, say so in run.json."""
        if self.logger is not None:
            self.logger.close()
        if self.trackers is not None:  # the last rows, then where the model is
            from aura.core.rundir import BEST, FINAL

            outputs = {
                name: str(self.run_dir / d)
                for name, d in (("final", FINAL), ("best", BEST))
                if (self.run_dir / d).is_dir()
            }
            self.trackers.close(status=status, outputs=outputs)
        if self.status is not None:
            self.status.update(status=status, last_step=step, **self._tracker_record())

    def _tracker_record(self) -> dict:
        """run.json's ``trackers`` (run ids, last step received), once a tracker has started."""
        record = self.trackers.record() if self.trackers is not None else {}
        return {"trackers": record} if record else {}
