"""THE training loop: the only one in Aura. Pretraining and fine-tuning are thin setups around ``train``.

What a setup hands in (``aura.train.run.session`` builds all of it)
--------------------------------------------------------------
* ``model``: a HF causal LM, possibly already wrapped from outside (DDP, FSDP2 via
  ``aura.distributed.parallelize``, torch.compile) or a peft ``PeftModel`` (only parameters with
  ``requires_grad`` are optimised), or a DeepSpeed engine. The loop never wraps it; DDP's gradient
  all-reduce is skipped on non-final micro-steps (``aura.distributed.no_sync``).
* ``engine``: the ``StepEngine`` (``aura.train.optim.step_engine``) that turns a window's gradients into one update:
  precision (autocast, fp16 GradScaler), LR on the param groups, clipping, the finiteness check, its own
  checkpointed state. ``TorchEngine`` (AdamW) or ``aura.train.optim.deepspeed.DeepSpeedStep``.
* ``data``: a resumable batch source (``BatchSource`` below; ``aura.data.pretrain_data.PretrainBatches``
  for pretraining, the SFT source for fine-tuning). A batch is a dict of CPU tensors: ``input_ids`` (B, T),
  and either ``labels`` (B, T) aligned with the inputs as in Hugging Face (-100 = ignored; the loop shifts
  them) or ``shift_labels`` (B, T) already shifted (target of position t), plus optional
  ``attention_mask`` / ``position_ids``.
* ``val_data``: an iterable of such batches (or None).
* ``objective``: what is minimised (``aura.train.objectives.objective``): next-token cross entropy by default; a
  preference objective plugs in here. It says how many units (target tokens, pairs) a batch holds and
  returns the summed loss plus summed statistics that are logged beside it.
* ``evaluators``: periodic evaluations (``aura.train.objectives.objective.Evaluator``) run every N steps.
* ``hooks``: ``TrainHooks`` (``aura.train.run.policy``), how the setup decides what a checkpoint and the final
  directory contain (full HF model or adapter), extra state, and what happens at epoch ends.
* ``metrics``: ``TrainMetrics`` (``aura.train.run.metrics``): console/CSV/TensorBoard, MFU, run.json.
* ``dist``: ``aura.distributed.DistInfo`` (single process: rank 0 of 1, collectives are no-ops).

What the loop guarantees
------------------------
* The loss is normalised by the number of units (target tokens for language modelling) of the whole
  accumulation window across all ranks (sum-reduced loss / global count), so 2 ranks x batch b == 1 process x batch 2b
  and
  padded SFT batches weigh every token equally; the logged loss is that true token mean.
* LR is ``plan.lr(step)``, a pure function of the step (``aura.train.optim.schedule``; a WSD run's
  ``--time-budget`` fixes the cooldown's start, at a log step, into the plan; the plan is stored in every checkpoint,
  ``aura.train.run.resume_plan``); AdamW skips decay on norms, biases, embeddings.
* Host syncs: one per optimizer step, in ``engine.finish`` (grad norm + loss finiteness, to skip NaN/inf
  steps; more than ``--max-bad-steps`` in a row stop the run), plus the log line every ``--log-interval`` steps.
  Under torchrun the loop adds one small collective per step and no sync of its own: at the step's start,
  the window's units and input tokens and this rank's stop flag, all known on the host, are summed over
  ranks together (``aura.distributed.totals.StepTotals``): on gloo a CPU all-reduce that leaves the device
  alone; on NCCL queued on the device, the loss scale kept there and the totals read after finish's sync.
  A signal thus stops every rank at the same step: the end of the first step that starts after it arrived
  (one process: the end of the current step). Inside finish, before its sync, fp16 adds one all-reduce (the
  loss and the GradScaler's found-inf, agreed over ranks) and FSDP2 the norm's reduction over the shards
  (with fp16 also torch's found-inf reduction in ``unscale_``); DDP's gradient all-reduce runs in backward.
* Under torchrun every log line carries ``Sync=`` (``aura.distributed.sync_status``): DDP replicas are
  compared bit for bit there, and a divergence stops every rank with an AuraError naming the ranks.
* What is written and when is ``CheckpointPolicy``'s (``aura.train.run.policy``): checkpoints every
  ``--save-steps``, at epoch ends and on SIGINT/SIGTERM, pruned to ``--keep-last``; ``best/`` on every
  validation that improves (``aura.train.run.best``); ``final/``.
* Stopped by SIGINT/SIGTERM after saving, a setup returns ``EXIT_INTERRUPTED`` (3); a second Ctrl+C
  aborts at once (KeyboardInterrupt, exit 130) naming the last good checkpoint.
* A resumed run (``TrainState``, data position, RNG, optimizer, engine state, the epoch's running loss
  sum) reproduces the per-step losses and epoch means of an uninterrupted one exactly (CPU, fp32, same seed).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import torch

from aura.core import console
from aura.core.errors import AbortReported, AuraError
from aura.core.heap import frozen_heap
from aura.core.i18n import Messages
from aura.distributed import DistInfo, no_sync, sync_status
from aura.distributed.totals import StepTotals
from aura.train.args import StepPlan, TrainArgs
from aura.train.objectives.objective import COUNT, CausalLM, Evaluator, Objective, count_inputs, unit_means
from aura.train.optim.schedule import CooldownClock, schedule_for
from aura.train.optim.step_engine import StepEngine, StepOutcome, autocast_context
from aura.train.run.metrics import TrainMetrics
from aura.train.run.policy import CheckpointPolicy, EpochEnd, TrainHooks, start_state
from aura.train.run.resume_plan import limits_notice
from aura.train.train_state import BatchSource, TrainState

M = Messages(
    "loop",
    {
        "budget": (
            "--lr-schedule wsd con --time-budget {budget:g} h: el enfriamiento empezará, como tarde, cuando quede "
            "el {pct} % del presupuesto, y la ejecución terminará enfriada y guardada al agotarlo.",
            "--lr-schedule wsd with --time-budget {budget:g} h: the cooldown starts at the latest when {pct} % of "
            "the budget is left, and the run ends cooled down and saved when it runs out.",
        ),
        "cooldown": (
            "Presupuesto de tiempo: quedan {left:.1f} min; el enfriamiento WSD empieza en el paso {step} y la "
            "ejecución terminará en el paso {total} ({steps:paso|pasos} más).",
            "Time budget: {left:.1f} min left; the WSD cooldown starts at step {step} and the run will end at "
            "step {total} ({steps:step|steps} more).",
        ),
        "plan": (
            "Plan: {steps:paso|pasos} de optimización ({epochs:época|épocas}, {per_epoch} pasos/época), "
            "{tokens:token|tokens} por paso, calentamiento {warmup:paso|pasos}.",
            "Plan: {steps:optimizer step|optimizer steps} ({epochs:epoch|epochs}, {per_epoch} steps/epoch), "
            "{tokens:token|tokens} per step, warm-up {warmup:step|steps}.",
        ),
        "oom": (
            "Memoria agotada en {device} (lote {batch}, acumulación {accum}, gradient checkpointing {ckpt}). "
            "Reduce --batch-size (y sube --gradient-accumulation-steps para mantener los tokens por paso), "
            "activa --gradient-checkpointing o usa un preset más pequeño (--model-preset).",
            "Out of memory on {device} (batch {batch}, accumulation {accum}, gradient checkpointing {ckpt}). "
            "Lower --batch-size (and raise --gradient-accumulation-steps to keep tokens per step), enable "
            "--gradient-checkpointing or use a smaller preset (--model-preset).",
        ),
        "signal": (
            "Señal {name} recibida: se termina el paso actual y se guarda un checkpoint (pulsa Ctrl+C otra "
            "vez para abortar sin guardar).",
            "Signal {name} received: finishing the current step and saving a checkpoint (press Ctrl+C "
            "again to abort without saving).",
        ),
    },
)


# Exit status of a run stopped by SIGINT/SIGTERM after saving its checkpoint (0 = finished, 2 = a user
# mistake, 1 = a bug, 130 = aborted by a second Ctrl+C without saving). Documented in the READMEs.
EXIT_INTERRUPTED = 3


@dataclass
class TrainResult:
    status: str  # finished | interrupted
    state: TrainState
    history: list[tuple[int, float]]  # (step, train loss) for every logged step
    final_dir: Path | None
    checkpoint: Path | None
    val_loss: float | None


def train(
    *,
    model,
    engine: StepEngine,
    data: BatchSource,
    val_data: Iterable[dict] | None,
    args: TrainArgs,
    plan: StepPlan,
    dist: DistInfo,
    hooks: TrainHooks,
    metrics: TrainMetrics,
    resume_from: Path | None = None,
    objective: Objective | None = None,
    evaluators: Iterable[Evaluator] = (),
) -> TrainResult:
    """Train ``model`` for ``plan.total_steps`` optimizer steps (the contract: the module docstring); ``args``
    resolved (learning rate, batch, accumulation). Returns when finished or after an interrupt checkpoint;
    raises AuraError on OOM, too many NaN steps or a failed save."""
    plan, state, policy, clock = _start(model, engine, data, args, plan, dist, hooks, metrics, resume_from)
    accum, objective = args.gradient_accumulation_steps or 1, objective or CausalLM()
    last_val, status = None, "failed"
    model.train()
    try:
        with _Signals() as signals, frozen_heap():
            while state.step < plan.total_steps:
                window = _next_window(data, accum)
                if not window:  # the epoch ended on a window boundary (resumed exactly there)
                    data.start_epoch(state.epoch)
                    continue
                lr = plan.lr(state.step)
                outcome, window_loss, n_targets, n_inputs, stats = optimizer_step(
                    model, engine, window, lr=lr, dist=dist, objective=objective, signals=signals
                )
                state.count_step(outcome, tokens=n_inputs, max_bad_steps=args.max_bad_steps)
                state.train_seconds = clock.elapsed()
                if outcome.applied:
                    metrics.add(window_loss, n_targets, stats)
                if state.step % args.log_interval == 0 or state.step == plan.total_steps:
                    metrics.log_step(state, lr=lr, grad_norm=outcome.grad_norm, sync=lambda: sync_status(model, dist))
                    if clock.budget > 0:  # --time-budget: start the WSD cooldown in time (every rank agrees)
                        plan = _cooldown_in_time(
                            clock, plan, state, dist, engine=engine, policy=policy, metrics=metrics
                        )

                last_val = _evaluate(
                    model,
                    val_data,
                    evaluators,
                    data=data,
                    state=state,
                    plan=plan,
                    args=args,
                    dist=dist,
                    engine=engine,
                    objective=objective,
                    metrics=metrics,
                    policy=policy,
                    lr=lr,
                    last_val=last_val,
                )
                policy.after_step()

                if _stop_requested(signals, dist) and state.step < plan.total_steps:
                    path, status = policy.interrupt(), "interrupted"
                    return TrainResult(status, state, metrics.history, None, path, last_val)

            final_dir = policy.finish()
            status = "finished"
            return TrainResult(status, state, metrics.history, final_dir, Path(state.last_checkpoint or ""), last_val)
    except torch.OutOfMemoryError:
        ckpt = "ON" if args.gradient_checkpointing else "OFF"
        raise AuraError(M("oom", device=dist.device, batch=args.batch_size, accum=accum, ckpt=ckpt)) from None
    except KeyboardInterrupt:  # a second Ctrl+C: no save
        status = "interrupted"
        policy.aborted()
        raise AbortReported from None
    finally:
        metrics.close(status=status, step=state.step)


def _start(
    model,
    engine: StepEngine,
    data: BatchSource,
    args: TrainArgs,
    plan: StepPlan,
    dist: DistInfo,
    hooks: TrainHooks,
    metrics: TrainMetrics,
    resume_from: Path | None,
):
    """(the plan with its schedule, the state (resumed when asked), the checkpoint policy, the time budget's
    clock), with the engine, the plan and the budget said."""
    if plan.schedule is None:
        plan = dataclasses.replace(plan, schedule=schedule_for(args, plan.total_steps))
    state = TrainState()
    start_state(state, resume_from, model=model, engine=engine, data=data, args=args, dist=dist, hooks=hooks)
    console.info(engine.describe())
    console.info(
        M(
            "plan",
            steps=plan.total_steps,
            epochs=plan.epochs,
            per_epoch=plan.steps_per_epoch,
            tokens=plan.tokens_per_step,
            warmup=plan.schedule.warmup,
        )
    )
    limits_notice(args, plan)
    metrics.open(total_steps=plan.total_steps, state=state, resumed=resume_from is not None)
    policy = CheckpointPolicy(
        model=model,
        engine=engine,
        data=data,
        state=state,
        args=args,
        plan=plan,
        dist=dist,
        hooks=hooks,
        metrics=metrics,
    )
    clock = CooldownClock(
        budget_s=3600 * args.time_budget if plan.schedule.kind == "wsd" else 0.0,
        fraction=plan.schedule.cooldown_fraction,
        elapsed_s=state.train_seconds,
        step=state.step,
    )
    if clock.budget > 0 and not plan.schedule.cooling(state.step):
        console.info(M("budget", budget=args.time_budget, pct=round(100 * clock.fraction)))
    return plan, state, policy, clock


def _evaluate(
    model,
    val_data,
    evaluators,
    *,
    data: BatchSource,
    state: TrainState,
    plan: StepPlan,
    args: TrainArgs,
    dist: DistInfo,
    engine: StepEngine,
    objective: Objective,
    metrics: TrainMetrics,
    policy: CheckpointPolicy,
    lr: float,
    last_val,
):
    """After a step: at an epoch's end validate, log and save; else validate when due (keeping the best); then
    the periodic evaluators. Returns the last validation loss."""
    if data.position >= data.batches_per_epoch:  # epoch end: validate, log, save
        last_val, val_stats = validate(model, val_data, dist=dist, precision=engine.precision, objective=objective)
        train_loss, seconds = metrics.epoch(state, epochs=plan.epochs, val_loss=last_val, val_stats=val_stats)
        state.epoch += 1
        data.start_epoch(state.epoch)
        policy.epoch_end(EpochEnd(state.epoch, state.step, train_loss, last_val, lr, None, seconds))
        metrics.new_epoch(state)
    elif val_data is not None and _validate_now(args, state, plan):
        last_val, val_stats = validate(model, val_data, dist=dist, precision=engine.precision, objective=objective)
        metrics.eval(state, last_val, val_stats)
        policy.keep_best(last_val)
    run_evaluators(
        model,
        evaluators,
        state=state,
        dist=dist,
        precision=engine.precision,
        metrics=metrics,
        final=state.step == plan.total_steps,
    )
    return last_val


def _cooldown_in_time(
    clock: CooldownClock,
    plan: StepPlan,
    state: TrainState,
    dist: DistInfo,
    *,
    engine,
    policy: CheckpointPolicy,
    metrics: TrainMetrics,
) -> StepPlan:
    """The plan with the WSD cooldown started now when rank 0's clock says the budget left is its share
    (``CooldownClock``); the new schedule and last step go into every later checkpoint."""
    new = clock.due(plan.schedule, state.step) if dist.is_main else None
    if dist.is_distributed:  # rank 0 decides, every rank follows
        t = torch.tensor([new.cooldown_start, new.total] if new is not None else [-1.0, -1.0], dtype=torch.float64)
        t = dist.all_reduce((t if dist.is_main else torch.zeros_like(t)).to(dist.comm_device), "sum").tolist()
        new = dataclasses.replace(plan.schedule, cooldown_start=int(t[0]), total=int(t[1])) if t[0] >= 0 else None
    if new is None:
        return plan
    plan = dataclasses.replace(plan, total_steps=new.total, schedule=new, epochs=-(-new.total // plan.steps_per_epoch))
    console.info(
        M(
            "cooldown",
            step=state.step,
            total=new.total,
            steps=new.total - state.step,
            left=max(0.0, clock.budget - clock.elapsed()) / 60,
        )
    )
    policy.plan = plan
    metrics.replan(total_steps=new.total)
    if hasattr(engine, "replan"):  # a DiLoCo engine ends on an outer step
        engine.replan(total_steps=new.total)
    return plan


def optimizer_step(
    model,
    engine: StepEngine,
    window: list[dict[str, torch.Tensor]],
    *,
    lr: float,
    dist: DistInfo,
    objective: Objective | None = None,
    signals: _Signals | None = None,
) -> tuple[StepOutcome, torch.Tensor, int, int, dict[str, torch.Tensor]]:
    """One optimizer step over a window of micro-batches (gradient accumulation): returns (what the engine did,
    the window's summed loss on this rank (a device scalar), the objective's units and the input tokens of the
    window on all ranks, the objective's summed statistics on this rank). With ``signals``, whether any rank had
    been asked to stop when the step began lands in ``signals.agreed``."""
    objective = objective or CausalLM()
    stop = signals is not None and signals.requested is not None
    # the step's one small collective: counts and stop flag together, known on the host before the step
    totals = StepTotals(
        [sum(objective.count(b) for b in window), sum(count_inputs(b) for b in window), float(stop)], dist=dist
    )
    scale = totals.scale(dist.world_size)  # DDP/FSDP average gradients over ranks: undo it
    engine.set_lr(lr)
    window_loss = torch.zeros((), dtype=torch.float64, device=dist.device)
    stats: dict[str, torch.Tensor] = {}
    for i, batch in enumerate(window):
        last = i == len(window) - 1
        with no_sync(model, enabled=not last):  # DDP: all-reduce the gradients once, at the window's end
            with engine.autocast():
                loss, batch_stats = objective.loss(model, _to_device(batch, dist.device))  # summed over units
            engine.backward(loss * scale, last=last)
        window_loss += loss.detach()
        for k, v in batch_stats.items():
            stats[k] = stats.get(k, 0.0) + v.detach().double()
    outcome = engine.finish(window_loss)  # the step's one host sync: the totals are on the host by then
    n_targets, n_inputs, stops = (int(x) for x in totals.values())
    if signals is not None:
        signals.agreed = stops > 0
    return outcome, window_loss, n_targets, n_inputs, stats


def _validate_now(args: TrainArgs, state: TrainState, plan: StepPlan) -> bool:
    """Every --eval-interval steps, and always at the last step (best/ is chosen among every validation,
    the last one too; a run shorter than the interval is still validated)."""
    return state.step == plan.total_steps or bool(args.eval_interval and state.step % args.eval_interval == 0)


def _next_window(data: BatchSource, accum: int) -> list[dict[str, torch.Tensor]]:
    """Up to ``accum`` micro-batches: fewer at the end of an epoch, none once it is exhausted."""
    window: list[dict[str, torch.Tensor]] = []
    while len(window) < accum and (batch := data.next_batch()) is not None:
        window.append(batch)
    return window


def _stop_requested(signals: _Signals, dist: DistInfo) -> bool:
    """A signal arrived on any rank. Under torchrun every rank stops at the same step without a collective
    of its own: the flags travelled in the step's one collective (``optimizer_step``, at the step's start),
    so a signal that arrives during a step stops the run after the next one."""
    return signals.agreed if dist.is_distributed else signals.requested is not None


class _Signals:
    """First SIGINT/SIGTERM/SIGHUP: stop after this step and save; a second Ctrl+C (SIGINT): abort at once
    (KeyboardInterrupt). A later SIGTERM/SIGHUP changes nothing (the run is already stopping: a launcher
    passing the stop on, or a closed terminal). Under torchrun, a worker whose launcher dies without
    passing anything on (kill -9, ``aura.distributed.launcher.ParentWatch``) stops the same way. SIGHUP is
    left alone when it is ignored (``nohup``)."""

    def __init__(self):
        self.requested: str | None = None
        self.agreed = False  # under torchrun: some rank had a signal when the last step began (optimizer_step)
        self._old: dict[int, Any] = {}
        self._watch = None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)):
                if sig is not None and not (sig != signal.SIGINT and signal.getsignal(sig) is signal.SIG_IGN):
                    self._old[sig] = signal.signal(sig, self._handle)
        if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # a launcher's worker
            from aura.distributed.launcher import ParentWatch

            self._watch = ParentWatch(self._orphaned).start()
        return self

    def _handle(self, signum, _frame):
        if self.requested is not None:
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            return
        self.requested = signal.Signals(signum).name
        try:
            console.warn(M("signal", name=self.requested))
        except OSError:  # the terminal is gone (SIGHUP): the checkpoint matters, not the line
            from aura.distributed.launcher import silence_output

            silence_output()

    def _orphaned(self) -> None:
        if self.requested is None:
            self.requested = "parent-exit"

    def __exit__(self, *exc):
        if self._watch is not None:
            self._watch.stop()
        for sig, old in self._old.items():
            signal.signal(sig, old)


def _to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    if device.type == "cpu":
        return batch
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


@torch.no_grad()
def evaluate(
    model,
    batches: Iterable[dict[str, torch.Tensor]] | None,
    *,
    dist: DistInfo,
    precision: str,
    objective: Objective | None = None,
) -> float | None:
    """Unit-mean (token-mean for language modelling) validation loss over all ranks (None without data)."""
    return validate(model, batches, dist=dist, precision=precision, objective=objective)[0]


@torch.no_grad()
def validate(
    model,
    batches: Iterable[dict[str, torch.Tensor]] | None,
    *,
    dist: DistInfo,
    precision: str,
    objective: Objective | None = None,
) -> tuple[float | None, dict[str, float]]:
    """(unit-mean validation loss, the objective's statistics averaged per unit: e.g. DPO's reward accuracy
    and margin on the validation pairs), over all ranks; (None, {}) without data."""
    if batches is None:
        return None, {}
    objective = objective or CausalLM()
    names = tuple(objective.metric_names)
    names += tuple(n + COUNT for n in getattr(objective, "counted_metrics", ()))  # their own denominators
    was_training = model.training
    model.eval()
    total = torch.zeros(2 + len(names), dtype=torch.float64, device=dist.device)  # (loss sum, units, stats...)
    with autocast_context(precision, dist.device):
        for batch in batches:
            n = objective.count(batch)
            loss, stats = objective.loss(model, _to_device(batch, dist.device))
            total[0] += loss.double()
            total[1] += n
            for i, name in enumerate(names):
                if name in stats:
                    total[2 + i] += stats[name].double()
    if was_training:
        model.train()
    total = total.to(dist.comm_device)
    dist.all_reduce(total, "sum")
    if total[1] <= 0:
        return None, {}
    units = float(total[1])
    return float(total[0]) / units, unit_means({name: float(total[2 + i]) for i, name in enumerate(names)}, units)


@torch.no_grad()
def run_evaluators(
    model,
    evaluators: Iterable[Evaluator],
    *,
    state: TrainState,
    dist: DistInfo,
    precision: str,
    metrics: TrainMetrics,
    final: bool = False,
) -> None:
    """The periodic evaluators due at this step (all of them at the run's last step, whatever their
    interval), in eval mode; their values are logged (not training time)."""
    due = [e for e in evaluators if e.interval > 0 and (final or state.step % e.interval == 0)]
    if not due:
        return
    was_training = model.training
    model.eval()
    values: dict[str, float] = {}
    with autocast_context(precision, dist.device):
        for evaluator in due:
            values.update(evaluator(model, dist=dist))
    if was_training:
        model.train()
    metrics.values(state, values)
