"""The run setup every training command shares: one skeleton around ``aura.train.loop.train``.

A training command (``aura pretrain``, ``aura finetune``; preference tuning and continued pretraining
plug in the same way) is a ``TrainingCommand``: its ``kind``, the ``inputs`` its ``--output-dir``
must stay clear of (checked before anything is written), and ``prepare(run)``, which builds the model
and the data and hands back a ``TrainingJob``. ``run_training`` does everything else, the same way for
every command:

1. distributed init, with every rank but 0 quiet (one voice; warnings, errors and ``Sync=`` still
   print everywhere); at the end the run dir's lock is released and the process group torn down;
2. ``--output-dir`` checked and locked, ``--resume-from`` resolved (``aura.train.run.guard``), and a
   resumed checkpoint's plan adopted (``aura.train.run.resume_plan``);
3. ``command.prepare(run)`` -> ``TrainingJob``: the only command-specific part;
4. a resumed checkpoint's identity compared with the job's; ``model_config.json`` written;
5. ``TrainHooks``, the step engine (``TorchEngine`` unless the job brings one), ``TrainMetrics``
   (run.json included) and the one call to the loop;
6. ``EXIT_INTERRUPTED`` (3) when a signal stopped the run after saving; otherwise the summary (rank 0)
   and, under torchrun, one last line on every rank.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Protocol

from aura.core import console
from aura.core.config import to_dict
from aura.core.errors import AuraError
from aura.core.i18n import Messages
from aura.core.rundir import BEST

M = Messages(
    "session",
    {
        "outputs": ("Resultados en {run}:", "Outputs in {run}:"),
        "out_best": (
            "  mejor validación (paso {step}, {val:.4f}): {path}",
            "  best validation (step {step}, {val:.4f}): {path}",
        ),
        "done_dist": (
            "Entrenamiento completado. Gradientes sincronizados.",
            "Training complete. Gradients synchronised.",
        ),
        "weights_differ": (
            "Los pesos de {path} no corresponden a este modelo:\n  {diffs}\nReanuda con la misma "
            "configuración de modelo que creó el checkpoint.",
            "The weights in {path} do not match this model:\n  {diffs}\nResume with the same "
            "model configuration that created the checkpoint.",
        ),
    },
)


@dataclass
class Run:
    """What the shared setup knows when a command's ``prepare`` starts."""

    cfg: Any  # the command's flags (a TrainArgs), a resumed checkpoint's plan already adopted
    dist: Any  # aura.distributed.DistInfo
    out: Path  # --output-dir, checked and locked
    explicit: list[str]  # the flags the user gave (model_config.json; resume checks)
    resume: Path | None  # the checkpoint to resume, or None
    adopted: Any  # aura.train.run.resume_plan.Adopted when resuming, else None
    info: Any  # aura.models.hardware.HardwareInfo every rank plans with (the smallest device: agree_hardware)
    precision: str  # fp32 | bf16 | fp16, resolved for dist.device

    @property
    def device_memory(self) -> int | None:
        """Memory per rank that every rank agreed on (for choose_strategy), when ``info`` is this device's."""
        return int(self.info.memory_bytes) if self.info.device_type == self.dist.device.type else None

    def plan(self, cfg, *, batches_per_epoch: int, tokens_per_micro_batch: int):
        """The step plan for ``cfg`` (the command's defaults applied); a resumed run keeps its own."""
        from aura.train.args import resolve_steps
        from aura.train.run.resume_plan import continue_plan

        plan = resolve_steps(
            cfg,
            batches_per_epoch=batches_per_epoch,
            tokens_per_micro_batch=tokens_per_micro_batch,
            world_size=self.dist.world_size,
        )
        return continue_plan(plan, self.adopted) if self.adopted is not None else plan


@dataclass
class TrainingJob:
    """What a command hands back once its model and data are ready; the setup runs the rest."""

    cfg: Any  # the flags with the command's defaults applied (model_config.json, every checkpoint)
    model: Any  # parallelised from outside (aura.distributed.parallelize), or a DeepSpeed engine
    data: Any  # the training BatchSource (aura.train.loop)
    val_data: Iterable | None
    plan: Any  # StepPlan, from Run.plan
    identity: dict  # a resumed checkpoint must carry the same values; stored in every checkpoint
    mismatch: Callable[[Path, str], str]  # (checkpoint, differences) -> the error for another identity
    save_model: Callable[[Any, Path, dict | None], None]  # TrainHooks.save_model
    load_model: Callable[[Any, Path], None]  # TrainHooks.load_model
    write_extras: Callable[[Path], None]  # tokenizer (and template) files beside the weights
    describe: dict  # this command's fields of model_config.json (hf_config included)
    summary: Callable[[Any], list[str | None]]  # TrainResult -> the lines under "Outputs in RUN:" (rank 0)
    flops_per_token: float | None = None  # for MFU
    stored: dict = field(default_factory=dict)  # kept in every checkpoint besides the identity, not compared
    engine: Any = None  # the StepEngine; None: TorchEngine (AdamW) over the model; DeepSpeedStep otherwise
    io: Any = None  # CheckpointIO; None: checkpoint.io_for(model)
    on_epoch_end: Callable | None = None  # TrainHooks.on_epoch_end
    epoch_checkpoint_name: Callable[[int, int], str] | None = None  # TrainHooks.epoch_checkpoint_name
    finish: Callable[[Any], None] | None = None  # rank 0, after a finished run, before the summary
    objective: Any = None  # aura.train.objectives.objective.Objective; None: next-token cross entropy
    evaluators: list = field(default_factory=list)  # aura.train.objectives.objective.Evaluator, run every N steps
    wrap_engine: Callable | None = None  # engine -> engine (e.g. aura.train.init_from.FreezeEngine)
    record: dict = field(default_factory=dict)  # extra run.json fields (a mixture's effective proportions)


class TrainingCommand(Protocol):
    """What a training command provides to ``run_training``."""

    kind: str  # "pretrain" | "finetune" | ...: model_config.json, run.json and `aura runs`

    def inputs(self, cfg) -> list:
        """Check the inputs before anything is written (every rank; user errors first); returns the
        paths ``--output-dir`` must not be, nor hold, nor sit in (None entries are ignored)."""
        ...

    def prepare(self, run: Run) -> TrainingJob:
        """Tokenizer, data, model (parallelised), step plan and hooks: everything that differs."""
        ...


def run_training(cfg, command: TrainingCommand) -> int:
    """Run one training command; 0 when finished, EXIT_INTERRUPTED (3) when a signal stopped it after
    saving a checkpoint."""
    from aura.distributed import init_distributed, teardown
    from aura.distributed.launcher import record_exit
    from aura.train.args import explicit_fields
    from aura.train.run.guard import discard_unstarted_run_dir, release_run_dir

    explicit = sorted(explicit_fields(cfg))
    dist = init_distributed(backend=cfg.backend, device=cfg.device)
    console.set_quiet(not dist.is_main)  # one voice; other ranks still print warnings, errors, Sync
    code = 1
    try:
        code = _run(cfg, command, dist, explicit)
        return code
    except BaseException as e:
        code = e.exit_code if isinstance(e, AuraError) else 130 if isinstance(e, KeyboardInterrupt) else 1
        discard_unstarted_run_dir(cfg.output_dir)  # a failure before training leaves no half-made run dir
        raise
    finally:
        record_exit(code)  # under `aura launch`: how this worker ended
        release_run_dir(cfg.output_dir)
        teardown(dist)
        console.set_quiet(False)


def _run(cfg, command: TrainingCommand, dist, explicit: list[str]) -> int:
    from aura.core.atomic import check_writable
    from aura.distributed import agree_hardware
    from aura.models.hardware import detect
    from aura.train.loop import EXIT_INTERRUPTED
    from aura.train.optim.step_engine import resolve_precision
    from aura.train.run import checkpoint as ckpt
    from aura.train.run.guard import prepare_run_dir
    from aura.train.run.resume_plan import adopt_flags

    _quiet_progress_bars()
    out = Path(cfg.output_dir)
    check_writable(out, flag="--output-dir")
    inputs = command.inputs(cfg)
    resume = prepare_run_dir(
        out, dist=dist, resume_from=cfg.resume_from, overwrite=cfg.overwrite, fork=cfg.fork, inputs=inputs
    )
    adopted = None
    if resume is not None:  # the run's plan comes from the checkpoint (aura.train.run.resume_plan)
        adopted = adopt_flags(cfg, ckpt.read_state(resume), explicit=explicit, path=resume, world_size=dist.world_size)
        cfg = adopted.cfg
    info = agree_hardware(detect(), dist)  # every `auto` decision below is the same on every rank
    run = Run(
        cfg=cfg,
        dist=dist,
        out=out,
        explicit=explicit,
        resume=resume,
        adopted=adopted,
        info=info,
        precision=resolve_precision(cfg.precision, dist.device, info=info),
    )
    job = command.prepare(run)
    if resume is not None:
        saved = ckpt.read_state(resume)
        diffs = ckpt.describe_differences({k: saved.get(k) for k in job.identity}, job.identity)
        if diffs:
            raise AuraError(job.mismatch(resume, "\n  ".join(diffs)))
    if dist.is_main:
        _write_model_config(run, job, command.kind)
    result = _train(run, job, command.kind)
    if result.status != "finished":
        return EXIT_INTERRUPTED
    if dist.is_main:
        if job.finish is not None:
            job.finish(result)
        console.success(M("outputs", run=out))
        for line in job.summary(result):
            if line is not None:
                console.info(line)
    if dist.is_distributed:
        dist.barrier()  # rank 0's summary first, so the line below is the last one of every rank
        console.always(M("done_dist"))
    return 0


def _train(run: Run, job: TrainingJob, kind: str):
    """The one call to the training loop."""
    from aura.train.loop import train
    from aura.train.optim.step_engine import TorchEngine
    from aura.train.run import checkpoint as ckpt
    from aura.train.run.metrics import TrainMetrics
    from aura.train.run.policy import TrainHooks

    hooks = TrainHooks(
        save_model=job.save_model,
        load_model=job.load_model,
        write_extras=job.write_extras,
        checkpoint_meta=lambda: {**job.identity, **job.stored, "config": to_dict(job.cfg)},
        on_epoch_end=job.on_epoch_end,
        io=job.io if job.io is not None else ckpt.io_for(job.model),
    )
    if job.epoch_checkpoint_name is not None:
        hooks.epoch_checkpoint_name = job.epoch_checkpoint_name
    engine = job.engine or TorchEngine.build(
        job.model, args=job.cfg, dist=run.dist, precision=run.precision, info=run.info
    )
    if job.wrap_engine is not None:
        engine = job.wrap_engine(engine)
    from aura.distributed.slow_link import wrap_engine  # --ddp-comm timing/state, --local-steps (DiLoCo)

    engine = wrap_engine(engine, model=job.model, args=job.cfg, dist=run.dist, total_steps=job.plan.total_steps)
    from aura.evaluation.during_training import build_suite_evaluator  # --eval-suite

    suite = build_suite_evaluator(job.cfg, job)
    if suite is not None:
        job.evaluators = [*job.evaluators, suite]
    from aura.train.run.trackers import RunInfo

    tracker_info = RunInfo(
        name=run.out.resolve().name,
        run_dir=run.out.resolve(),
        kind=kind,
        config=to_dict(job.cfg),
        plan=job.plan.to_dict(),
        hardware=run.info.to_dict(),
        world_size=run.dist.world_size,
    )
    metrics = TrainMetrics.for_run(
        run.out,
        kind=kind,
        dist=run.dist,
        hardware=run.info,
        precision=run.precision,
        flops_per_token=job.flops_per_token,
        time_budget_h=0.0 if getattr(job.plan.schedule, "kind", "") == "wsd" else job.cfg.time_budget,
        extra_columns=metric_columns(job),
        report_to=job.cfg.report_destinations,
        tracker_info=tracker_info,
    )
    hooks.resume_command = _record_launch(run, job, metrics)
    from aura.train.run.resume_plan import interval_notices

    interval_notices(job.cfg, job.plan, explicit=run.explicit)
    return train(
        model=job.model,
        engine=engine,
        data=job.data,
        val_data=job.val_data,
        args=job.cfg,
        plan=job.plan,
        dist=run.dist,
        hooks=hooks,
        metrics=metrics,
        resume_from=run.resume,
        objective=job.objective,
        evaluators=job.evaluators,
    )


def _record_launch(run: Run, job: TrainingJob, metrics) -> Callable[[Path], str]:
    """run.json: how the run was launched (``launch``), one ``history`` entry per start or resume (with the
    plan changes a resume forced), the job's own record (a mixture's proportions); returns the resume
    command the loop prints, which launches the run the same way."""
    from datetime import datetime, timezone

    from aura.distributed.launcher import describe_launch, resume_command

    record = describe_launch()
    record.update(ddp_comm=getattr(job.cfg, "ddp_comm", None), local_steps=getattr(job.cfg, "local_steps", None))
    status = metrics.status
    if status is not None and status.enabled:
        entry = {
            "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "argv": record["argv"],
            "launcher": record["launcher"],
            "world_size": run.dist.world_size,
            "step": run.adopted.step if run.adopted is not None else 0,
            "resumed_from": str(run.resume) if run.resume is not None else None,
        }
        if run.adopted is not None and run.adopted.forced:
            entry["plan_changes"] = run.adopted.forced
        # the objective's headline (aura.train.objectives.objective.Headline): what a report shows, not the loss
        headline = [h.to_dict() for h in getattr(job.objective, "headline", ())]
        status.update(
            launch=record,
            history=[*status.data.get("history", []), entry],
            **job.record,
            **({"headline": headline} if headline else {}),
        )
    return lambda checkpoint: resume_command(record, checkpoint)


def metric_columns(job: TrainingJob) -> tuple[str, ...]:
    """The objective's statistics and the evaluators' values: extra columns of training_log.csv."""
    names = list(getattr(job.objective, "metric_names", ()))
    for evaluator in job.evaluators:
        names += [n for n in evaluator.names if n not in names]
    return tuple(names)


def _write_model_config(run: Run, job: TrainingJob, kind: str) -> None:
    """``model_config.json``: what was trained, how, and on what (rank 0)."""
    from aura.core.atomic import atomic_write_json
    from aura.distributed import strategy_of

    atomic_write_json(
        run.out / "model_config.json",
        {
            "kind": kind,
            "config": to_dict(job.cfg),
            "explicit_flags": run.explicit,
            **job.describe,
            "precision": run.precision,
            "plan": job.plan.to_dict(),
            "hardware": run.info.to_dict(),
            "world_size": run.dist.world_size,
            "strategy": "deepspeed" if job.engine is not None else strategy_of(job.model),
        },
    )


def _quiet_progress_bars() -> None:
    """No "Writing model shards" / download bars at every checkpoint (transformers, peft, hub)."""
    from huggingface_hub.utils import disable_progress_bars
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    disable_progress_bars()


def best_line(out: Path) -> str | None:
    """The summary line naming ``best/`` (None when no validation ran)."""
    from aura.train.run.best import read_best

    best = read_best(out)
    return None if best is None else M("out_best", step=best["step"], val=best["val_loss"], path=out / BEST)


# ---- the hooks of a full Hugging Face model (pretraining; full fine-tuning) ---------------------


def save_hf(model, directory: Path, state_dict: dict | None) -> None:
    """config.json + model.safetensors + generation_config.json (loadable by from_pretrained)."""
    from aura.models.deepspeed_import import save_pretrained

    save_pretrained(model, directory, state_dict=state_dict, safe_serialization=True)


def load_hf_weights(model, directory: Path) -> None:
    """Load model.safetensors (or its shards) into ``model``; tied weights may be absent from the file."""
    import json

    from safetensors.torch import load_file

    from aura.core.paths import contained

    directory = Path(directory)
    index = directory / "model.safetensors.index.json"
    files = (
        sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.is_file() else ["model.safetensors"]
    )
    state: dict = {}
    for name in files:  # a name in the index never leaves the checkpoint
        state.update(load_file(str(contained(directory, name, source=index if index.is_file() else directory))))
    result = model.load_state_dict(state, strict=False)
    groups: dict[int, set[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(p), set()).add(name)
    missing = [k for k in result.missing_keys if not any(k in g and g & state.keys() for g in groups.values())]
    if missing or result.unexpected_keys:
        raise AuraError(
            M(
                "weights_differ",
                path=directory,
                diffs="\n  ".join(
                    [f"missing: {k}" for k in missing] + [f"unexpected: {k}" for k in result.unexpected_keys]
                ),
            )
        )
