"""What the training loop writes, and when: the checkpoint policy.

``CheckpointPolicy`` decides by itself whether a step writes something; the loop only tells it what
happened (a step, an epoch end, a validation, a signal, the end):

* every ``--save-steps`` steps: ``checkpoint-step-N/``; at every epoch end: ``hooks.epoch_checkpoint_name``
  (pretraining: ``checkpoint-step-N/``, fine-tuning: ``checkpoint-epoch-E/``); on SIGINT/SIGTERM:
  ``interrupt-step-N/``; at the end: ``checkpoint-step-N/`` and ``final/``. A step is saved at most once.
* after each save only the ``--keep-last`` most recently saved step/interrupt checkpoints stay (epoch
  checkpoints are kept); ``run.json`` names the new one.
* a validation that improves on the best so far rewrites ``best/`` (``aura.train.run.best``), which is never
  pruned.

``start_state`` is the other end: a run starts at step 0 or where a checkpoint left it (weights,
optimizer, the step engine's state, data position, RNG, the loop's counters). ``TrainHooks`` is how the
setup (``aura.train.run.session``) shapes what is written.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from aura.core import console
from aura.core.atomic import atomic_write_json
from aura.core.i18n import Messages
from aura.train.run import best as best_model, checkpoint as ckpt
from aura.train.run.resume_plan import plan_state

if TYPE_CHECKING:
    from aura.distributed import DistInfo
    from aura.train.args import StepPlan, TrainArgs
    from aura.train.optim.step_engine import StepEngine
    from aura.train.run.metrics import TrainMetrics
    from aura.train.train_state import BatchSource, TrainState

M = Messages(
    "policy",
    {
        "resumed": (
            "Reanudado desde {path}: paso {step}, época {epoch}, {tokens:token visto|tokens vistos}.",
            "Resumed from {path}: step {step}, epoch {epoch}, {tokens:token|tokens} seen.",
        ),
        "interrupted": (
            "Entrenamiento interrumpido en el paso {step}. Checkpoint: {path}\nPara reanudar:\n  {cmd}",
            "Training interrupted at step {step}. Checkpoint: {path}\nTo resume:\n  {cmd}",
        ),
        "aborted": (
            "Abortado sin guardar en el paso {step}. Último checkpoint bueno: {path}\nPara reanudar:\n  {cmd}",
            "Aborted without saving at step {step}. Last good checkpoint: {path}\nTo resume:\n  {cmd}",
        ),
        "aborted_none": (
            "Abortado sin guardar en el paso {step}; aún no había ningún checkpoint, así que no hay "
            "nada que reanudar: la misma orden empieza de cero.",
            "Aborted without saving at step {step}; there was no checkpoint yet, so there is nothing "
            "to resume: the same command starts over.",
        ),
        "final_saved": ("Modelo final guardado en {path}", "Final model saved to {path}"),
    },
)


@dataclass
class EpochEnd:
    """What the epoch-end callback learns (finetune writes checkpoint-epoch-N/ and epoch_info.json)."""

    epoch: int  # 1-based, the epoch just finished
    step: int
    train_loss: float | None
    val_loss: float | None
    lr: float
    checkpoint: Path | None
    seconds: float


@dataclass
class TrainHooks:
    """How the setup shapes what the loop writes. Every callable runs on rank 0 only unless noted.

    * ``save_model(model, dir, state_dict)``: write the weights (+ config) of the unwrapped model into
      ``dir`` (pretrain: ``save_pretrained`` safetensors; LoRA: the peft adapter); ``state_dict`` is the
      full state gathered from FSDP2 shards, or None to use ``model.state_dict()``.
    * ``load_model(model, dir)``: the inverse, on every rank, into the unwrapped model.
    * ``write_extras(dir)``: files every checkpoint and ``final/`` carry besides weights (tokenizer,
      generation_config.json, ...).
    * ``checkpoint_meta()``: JSON-able dict stored in trainer_state.json (config, preset, tokenizer hash).
    * ``extra_state()`` / ``load_extra_state(state)``: tensors/plain containers saved in extra_state.pt
      (every rank loads it).
    * ``on_epoch_end(EpochEnd)``: after the epoch's eval and checkpoint (rank 0).
    * ``epoch_checkpoint_name(epoch, step)``: name of the epoch-end checkpoint dir.
    * ``resume_command(checkpoint)``: the exact command that resumes (printed on interrupt).
    * ``io``: the CheckpointIO strategy: ``checkpoint.io_for(model)`` picks FullStateIO (single process,
      DDP) or ShardedStateIO (FSDP2, torch.distributed.checkpoint).
    """

    save_model: Callable[[Any, Path, dict | None], None]
    load_model: Callable[[Any, Path], None]
    write_extras: Callable[[Path], None] | None = None
    checkpoint_meta: Callable[[], dict] | None = None
    extra_state: Callable[[], dict] | None = None
    load_extra_state: Callable[[dict], None] | None = None
    on_epoch_end: Callable[[EpochEnd], None] | None = None
    epoch_checkpoint_name: Callable[[int, int], str] = lambda epoch, step: f"checkpoint-step-{step}"
    resume_command: Callable[[Path], str] | None = None
    io: ckpt.CheckpointIO = field(default_factory=ckpt.FullStateIO)


def start_state(
    state: TrainState,
    resume_from: Path | None,
    *,
    model,
    engine: StepEngine,
    data: BatchSource,
    args: TrainArgs,
    dist: DistInfo,
    hooks: TrainHooks,
) -> None:
    """Step 0 (data at epoch 0), or everything ``resume_from`` restores into ``state`` and the rest."""
    if dist.is_main:
        ckpt.clean_staging(args.output_dir)  # only this run's staging entries, of a writer that is gone
    if resume_from is None:
        data.start_epoch(0)
        return
    saved, extra = ckpt.load_checkpoint(
        resume_from,
        model=model,
        optimizer=engine.optimizer,
        engine=engine,
        dist=dist,
        io=hooks.io,
        read_model=hooks.load_model,
        allow_sharded=bool(getattr(args, "load_sharded", False)),
    )
    state.load_state_dict(saved["loop"])
    state.last_checkpoint = str(resume_from)  # the last good checkpoint is the one resumed
    data.load_state_dict(saved["data"])
    if extra is not None and hooks.load_extra_state is not None:
        hooks.load_extra_state(extra)
    console.info(M("resumed", path=resume_from, step=state.step, epoch=state.epoch + 1, tokens=state.tokens_seen))


class CheckpointPolicy:
    """Decides whether a step writes a checkpoint, ``best/`` or ``final/``, and writes it (see the module
    docstring). Every method is called on every rank (saves are collectives)."""

    def __init__(
        self,
        *,
        model,
        engine: StepEngine,
        data: BatchSource,
        state: TrainState,
        args: TrainArgs,
        plan: StepPlan,
        dist: DistInfo,
        hooks: TrainHooks,
        metrics: TrainMetrics,
    ):
        self.model, self.engine, self.data, self.state = model, engine, data, state
        self.args, self.plan, self.dist, self.hooks, self.metrics = args, plan, dist, hooks, metrics
        self.out = Path(args.output_dir)
        self.saved_at: int | None = None  # the step of the last checkpoint this run wrote

    def after_step(self) -> None:
        """Every ``--save-steps`` steps (unless the epoch end just saved this step)."""
        step, every = self.state.step, self.args.save_steps
        if every and step % every == 0 and self.saved_at != step:
            self.save(f"checkpoint-step-{step}")

    def epoch_end(self, end: EpochEnd) -> None:
        """``best/`` if the epoch's validation improved, the epoch checkpoint, then the setup's hook."""
        self.keep_best(end.val_loss)
        path = self.save(self.hooks.epoch_checkpoint_name(end.epoch, end.step))
        if self.hooks.on_epoch_end is not None and self.dist.is_main:
            self.hooks.on_epoch_end(dataclasses.replace(end, checkpoint=path))

    def keep_best(self, val: float | None) -> None:
        """Rewrite ``best/`` when ``val`` is the lowest validation loss so far."""
        state = self.state
        if not best_model.track(state, val):
            return
        extras, info = self.hooks.write_extras, best_model.best_json(state)

        def write_extras(d: Path) -> None:
            if extras is not None:
                extras(d)
            atomic_write_json(d / best_model.BEST_JSON, info)

        path = ckpt.save_model_dir(
            best_model.best_dir(self.out),
            model=self.model,
            dist=self.dist,
            io=self.hooks.io,
            write_model=self.hooks.save_model,
            write_extras=write_extras,
        )
        console.info(best_model.M("saved", val=val, step=state.step, path=path))
        self.metrics.restart_clock(state)

    def interrupt(self) -> Path:
        """A signal stopped the run: save this step (unless just saved) and say how to resume."""
        state = self.state
        path = (
            self.save(f"interrupt-step-{state.step}")
            if self.saved_at != state.step
            else Path(state.last_checkpoint or "")
        )
        console.info(M("interrupted", step=state.step, path=path, cmd=self.resume_command(path)))
        return path

    def aborted(self) -> None:
        """A second Ctrl+C: nothing is saved; name the last good checkpoint (rank 0)."""
        if not self.dist.is_main:
            return
        if self.state.last_checkpoint:
            path = Path(self.state.last_checkpoint)
            console.error(M("aborted", step=self.state.step, path=path, cmd=self.resume_command(path)))
        else:
            console.error(M("aborted_none", step=self.state.step))

    def finish(self) -> Path:
        """The last step's checkpoint (unless just saved) and ``final/``; returns ``final/``."""
        if self.saved_at != self.state.step:
            self.save(f"checkpoint-step-{self.state.step}")
        final_dir = self.out / "final"
        ckpt.save_model_dir(
            final_dir,
            model=self.model,
            dist=self.dist,
            io=self.hooks.io,
            write_model=self.hooks.save_model,
            write_extras=self.hooks.write_extras,
        )
        console.info(M("final_saved", path=final_dir))
        return final_dir

    def resume_command(self, checkpoint: Path) -> str:
        return (self.hooks.resume_command or default_resume_command)(checkpoint)

    def save(self, name: str) -> Path:
        """Write ``RUN_DIR/name`` (every rank), prune to ``--keep-last``, record it in run.json."""
        state, hooks, path = self.state, self.hooks, self.out / name
        for key, value in self.metrics.running_sums().items():
            setattr(state, key, value)
        trainer_state = {
            "step": state.step,
            "epoch": state.epoch,
            "tokens_seen": state.tokens_seen,
            "loop": state.state_dict(),
            "data": self.data.state_dict(),
            "plan": plan_state(self.args, self.plan),
            **(hooks.checkpoint_meta() if hooks.checkpoint_meta else {}),
        }
        ckpt.save_checkpoint(
            path,
            model=self.model,
            optimizer=self.engine.optimizer,
            engine_state=self.engine.state_dict(),
            trainer_state=trainer_state,
            dist=self.dist,
            io=hooks.io,
            write_model=hooks.save_model,
            write_extras=hooks.write_extras,
            extra_state=hooks.extra_state() if hooks.extra_state else None,
        )
        state.last_checkpoint, self.saved_at = str(path), state.step
        if self.dist.is_main:
            ckpt.prune(self.out, self.args.keep_last)
            console.info(ckpt.M("saved", path=path, size=ckpt.checkpoint_size(path)))
        self.metrics.saved(state, path)
        return path


def default_resume_command(checkpoint: Path) -> str:
    """The command that launched this process (its launcher too: torchrun, aura launch) with
    ``--resume-from CHECKPOINT`` and without ``--overwrite`` (``aura.distributed.launcher``)."""
    from aura.distributed.launcher import describe_launch, resume_command

    return resume_command(describe_launch(), checkpoint)
