"""THE training loop: the only one in Aura. Pretraining and fine-tuning are thin setups around ``train``.

What a setup hands in
---------------------
* ``model``: a HF causal LM, possibly already wrapped from outside (DDP, FSDP2 via
  ``aura.distributed.parallelize``, torch.compile) or a peft ``PeftModel`` (only parameters with
  ``requires_grad`` are optimised). The loop never wraps it; DDP's gradient all-reduce is skipped on
  non-final micro-steps (``aura.distributed.no_sync``).
* ``data``: a resumable batch source (``BatchSource`` below; ``aura.data.pretrain_data.PretrainBatches``
  for pretraining, the SFT source for fine-tuning). A batch is a dict of CPU tensors: ``input_ids`` (B, T),
  and either ``labels`` (B, T) aligned with the inputs as in Hugging Face (-100 = ignored; the loop shifts
  them) or ``shift_labels`` (B, T) already shifted (target of position t), plus optional
  ``attention_mask`` / ``position_ids``.
* ``val_data``: an iterable of such batches (or None).
* ``hooks``: ``TrainHooks``, the small explicit interface by which the setup decides what a checkpoint and
  the final directory contain (full HF model or adapter), extra state, and what happens at epoch ends.
* ``dist``: ``aura.distributed.DistInfo`` (single process: rank 0 of 1, collectives are no-ops).
* ``engine``: how a window's gradients become an update (``StepEngine``). Default ``TorchEngine``:
  backward (through the fp16 GradScaler), unscale + clip, ``optimizer.step()``, ``zero_grad``.
  ``aura.train.deepspeed_engine`` implements it over a DeepSpeed engine (ZeRO-2/3), which the setup
  passes as ``model`` (with its optimizer and a matching ``hooks.io``).

What the loop guarantees
------------------------
* The loss is normalised by the number of target tokens of the whole accumulation window across all
  ranks (sum-reduced cross entropy / global count), so 2 ranks x batch b == 1 process x batch 2b and
  padded SFT batches weigh every token equally; the logged loss is that true token mean.
* LR is ``plan.schedule.lr(step)``, a pure function of the step (the plan is stored in every checkpoint,
  ``aura.train.plan``); AdamW skips decay on norms, biases, embeddings.
* Host syncs: one per optimizer step (grad norm + loss finiteness, to skip NaN/inf steps) and the log line.
* Under torchrun every log line carries ``Sync=`` (``aura.distributed.sync_status``): DDP replicas are
  compared bit for bit there, and a divergence stops every rank with an AuraError naming the ranks.
* Every validation that improves on the best so far rewrites ``best/`` (``aura.train.best``), which
  ``--keep-last`` never prunes; validation rising several evaluations in a row is said.
* Stopped by SIGINT/SIGTERM after saving, a setup returns ``EXIT_INTERRUPTED`` (3); a second Ctrl+C
  aborts at once (KeyboardInterrupt, exit 130) naming the last good checkpoint.
* Resumable state (``TrainState``, data position, RNG, optimizer, scaler) is checkpointed every
  ``--save-steps``, at epoch ends and on SIGINT/SIGTERM; a resumed run reproduces the per-step losses of
  an uninterrupted one exactly (CPU, fp32, same seed).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import shlex
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Protocol

import torch
import torch.nn.functional as F

from aura import console
from aura.distributed import DistInfo, no_sync, sync_status
from aura.errors import AuraError
from aura.i18n import Messages
from aura.train import checkpoint as ckpt
from aura.train import best as best_model
from aura.train.args import StepPlan, TrainArgs, schedule_for
from aura.train.metrics import MetricsLogger, RunStatus, Throughput
from aura.train.plan import limits_notice, plan_state
from aura.utils.fsutil import atomic_write_json

M = Messages("loop", {
    "precision": ("Precisión activa: {precision} | Autocast={autocast} | GradScaler={scaler}",
                  "Active precision: {precision} | Autocast={autocast} | GradScaler={scaler}"),
    "plan": ("Plan: {steps:paso|pasos} de optimización ({epochs:época|épocas}, {per_epoch} pasos/época), "
             "{tokens:token|tokens} por paso, calentamiento {warmup:paso|pasos}.",
             "Plan: {steps:optimizer step|optimizer steps} ({epochs:epoch|epochs}, {per_epoch} steps/epoch), "
             "{tokens:token|tokens} per step, warm-up {warmup:step|steps}."),
    "resumed": ("Reanudado desde {path}: paso {step}, época {epoch}, {tokens:token visto|tokens vistos}.",
                "Resumed from {path}: step {step}, epoch {epoch}, {tokens:token|tokens} seen."),
    "bad_step": ("Paso {step}: pérdida o gradiente no finito ({loss}); se omite la actualización "
                 "({n}/{max} seguidos).",
                 "Step {step}: non-finite loss or gradient ({loss}); the update is skipped ({n}/{max} in a row)."),
    "too_many_bad": ("La pérdida fue NaN/inf en {n:paso seguido|pasos seguidos} (hasta el paso {step}). Se conserva el "
                     "último checkpoint bueno{last}. Baja --learning-rate, usa --precision bf16 o fp32, o "
                     "revisa los datos; súbelo con --max-bad-steps si es transitorio.",
                     "The loss was NaN/inf for {n:step|steps} in a row (up to step {step}). The last good checkpoint "
                     "is kept{last}. Lower --learning-rate, use --precision bf16 or fp32, or check the data; "
                     "raise --max-bad-steps if it is transient."),
    "oom": ("Memoria agotada en {device} (lote {batch}, acumulación {accum}, gradient checkpointing {ckpt}). "
            "Reduce --batch-size (y sube --gradient-accumulation-steps para mantener los tokens por paso), "
            "activa --gradient-checkpointing o usa un preset más pequeño (--model-preset).",
            "Out of memory on {device} (batch {batch}, accumulation {accum}, gradient checkpointing {ckpt}). "
            "Lower --batch-size (and raise --gradient-accumulation-steps to keep tokens per step), enable "
            "--gradient-checkpointing or use a smaller preset (--model-preset)."),
    "signal": ("Señal {name} recibida: se termina el paso actual y se guarda un checkpoint (pulsa Ctrl+C otra "
               "vez para abortar sin guardar).",
               "Signal {name} received: finishing the current step and saving a checkpoint (press Ctrl+C "
               "again to abort without saving)."),
    "interrupted": ("Entrenamiento interrumpido en el paso {step}. Checkpoint: {path}\nPara reanudar:\n  {cmd}",
                    "Training interrupted at step {step}. Checkpoint: {path}\nTo resume:\n  {cmd}"),
    "aborted": ("Abortado sin guardar en el paso {step}. Último checkpoint bueno: {path}\nPara reanudar:\n  {cmd}",
                "Aborted without saving at step {step}. Last good checkpoint: {path}\nTo resume:\n  {cmd}"),
    "aborted_none": ("Abortado sin guardar en el paso {step}; aún no había ningún checkpoint.",
                     "Aborted without saving at step {step}; there was no checkpoint yet."),
    "final_saved": ("Modelo final guardado en {path}", "Final model saved to {path}"),
    "no_trainable": ("El modelo no tiene parámetros entrenables.", "The model has no trainable parameters."),
    "fp16_cpu": ("fp16 con GradScaler no está disponible en este dispositivo/compilación de PyTorch ({err}); "
                 "usa --precision bf16 o fp32.",
                 "fp16 with GradScaler is not available on this device/PyTorch build ({err}); use "
                 "--precision bf16 or fp32."),
})


# Exit status of a run stopped by SIGINT/SIGTERM after saving its checkpoint (0 = finished, 2 = a user
# mistake, 1 = a bug, 130 = aborted by a second Ctrl+C without saving). Documented in the READMEs.
EXIT_INTERRUPTED = 3


class BatchSource(Protocol):
    """A resumable stream of micro-batches for this rank (see module docstring for the batch format)."""

    batches_per_epoch: int  # micro-batches per epoch on this rank (equal on every rank)
    epoch: int
    position: int  # micro-batches of the current epoch already handed out

    def next_batch(self) -> dict[str, torch.Tensor] | None: ...  # None once the epoch is exhausted
    def start_epoch(self, epoch: int) -> None: ...
    def state_dict(self) -> dict: ...
    def load_state_dict(self, state: dict) -> None: ...


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


class StepEngine(Protocol):
    """The optimizer-step seam: backward per micro-step, then clip and step (or skip) once per window."""

    def backward(self, loss: torch.Tensor, *, last: bool) -> None: ...  # normalised by the window's tokens
    def clip(self, max_norm: float) -> torch.Tensor: ...  # grad norm of the window (before clipping)
    def step(self) -> None: ...  # apply the update and clear the gradients
    def skip(self) -> None: ...  # a non-finite window: drop its gradients


class TorchEngine:
    """The plain PyTorch path (single process, DDP, FSDP2): GradScaler for fp16, clip, AdamW step."""

    def __init__(self, optimizer, scaler=None):
        self.optimizer, self.scaler = optimizer, scaler
        self.params = [p for g in optimizer.param_groups for p in g["params"]]

    def backward(self, loss: torch.Tensor, *, last: bool = True) -> None:
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def clip(self, max_norm: float) -> torch.Tensor:
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        norm = torch.nn.utils.clip_grad_norm_(self.params, max_norm or float("inf"), foreach=True)
        return norm.full_tensor() if hasattr(norm, "full_tensor") else norm  # FSDP2: a DTensor

    def step(self) -> None:
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def skip(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        if self.scaler is not None:
            self.scaler.update()


@dataclass
class TrainState:
    """Counters that resume exactly (the data position lives in the batch source)."""

    step: int = 0
    epoch: int = 0
    tokens_seen: int = 0
    bad_steps_in_row: int = 0
    best_val_loss: float | None = None
    best_step: int | None = None
    last_val_loss: float | None = None
    val_rises_in_row: int = 0
    epoch_loss_sum: float = 0.0  # summed over ranks: a resumed epoch's mean covers its steps before the resume
    epoch_targets: int = 0
    last_checkpoint: str | None = None

    def state_dict(self) -> dict:
        return dict(self.__dict__)

    def load_state_dict(self, state: dict) -> None:
        for k in self.__dict__:
            if k in state:
                setattr(self, k, state[k])


@dataclass
class TrainResult:
    status: str  # finished | interrupted
    state: TrainState
    history: list[tuple[int, float]]  # (step, train loss) for every logged step
    final_dir: Path | None
    checkpoint: Path | None
    val_loss: float | None


def build_optimizer(model, args: TrainArgs, device: torch.device) -> torch.optim.AdamW:
    """AdamW over trainable params; no decay on norms, biases, embeddings; fused where supported."""
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    decay, no_decay, seen = [], [], set()
    for p in model.parameters():
        if not p.requires_grad or id(p) in seen:
            continue
        seen.add(id(p))
        (no_decay if p.ndim < 2 or id(p) in embeddings else decay).append(p)
    if not decay and not no_decay:
        raise AuraError(M("no_trainable"))
    groups = [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    kwargs = dict(lr=args.learning_rate or 1e-3, betas=(args.adam_beta1, args.adam_beta2), eps=args.adam_eps)
    params_dtype_ok = all(p.dtype in (torch.float32, torch.float16, torch.bfloat16) for p in seen_params(groups))
    if device.type in ("cuda", "cpu") and params_dtype_ok:
        try:
            return torch.optim.AdamW(groups, fused=True, **kwargs)
        except (RuntimeError, TypeError):
            pass
    return torch.optim.AdamW(groups, foreach=True, **kwargs)


def seen_params(groups):
    return [p for g in groups for p in g["params"]]


def resolve_precision(precision: str, device: torch.device) -> str:
    if precision != "auto":
        return precision
    from aura.hardware import default_precision, detect

    if device.type == "cpu":
        from aura.hardware import cpu_fast_bf16

        return "bf16" if cpu_fast_bf16() else "fp32"
    return default_precision(detect())


def autocast_context(precision: str, device: torch.device):
    if precision in ("bf16", "fp16"):
        dtype = torch.bfloat16 if precision == "bf16" else torch.float16
        return torch.autocast(device_type=device.type, dtype=dtype)
    return contextlib.nullcontext()


def make_scaler(precision: str, device: torch.device):
    if precision != "fp16":
        return None
    try:
        return torch.amp.GradScaler(device.type)
    except (RuntimeError, AssertionError) as e:
        raise AuraError(M("fp16_cpu", err=e)) from None


def count_targets(batch: dict[str, torch.Tensor]) -> int:
    """Target tokens of a CPU batch (no device sync)."""
    if "shift_labels" in batch:
        return int((batch["shift_labels"] != -100).sum())
    return int((batch["labels"][:, 1:] != -100).sum())


def loss_sum(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Sum of token cross-entropies of one micro-batch (fp32), ignoring -100 targets."""
    kwargs = {k: batch[k] for k in ("attention_mask", "position_ids") if k in batch}
    logits = model(input_ids=batch["input_ids"], use_cache=False, **kwargs).logits  # (B, T, V)
    if "shift_labels" in batch:
        targets = batch["shift_labels"]  # (B, T)
    else:
        logits, targets = logits[:, :-1], batch["labels"][:, 1:]  # (B, T-1, V), (B, T-1)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1),
                           ignore_index=-100, reduction="sum")


def _to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    if device.type == "cpu":
        return batch
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


@torch.no_grad()
def evaluate(model, batches: Iterable[dict[str, torch.Tensor]] | None, *, dist: DistInfo,
             precision: str) -> float | None:
    """Token-mean validation loss over all ranks (None without validation data)."""
    if batches is None:
        return None
    was_training = model.training
    model.eval()
    total = torch.zeros(2, dtype=torch.float64, device=dist.device)  # (loss sum, tokens)
    with autocast_context(precision, dist.device):
        for batch in batches:
            n = count_targets(batch)
            total[0] += loss_sum(model, _to_device(batch, dist.device)).double()
            total[1] += n
    if was_training:
        model.train()
    total = total.to(dist.comm_device)
    dist.all_reduce(total, "sum")
    return float(total[0] / total[1]) if total[1] > 0 else None


class _Signals:
    """First SIGINT/SIGTERM: stop after this step and save; second: abort at once (KeyboardInterrupt)."""

    def __init__(self):
        self.requested: str | None = None
        self._old: dict[int, Any] = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, _frame):
        if self.requested is not None:
            raise KeyboardInterrupt
        self.requested = signal.Signals(signum).name
        console.warn(M("signal", name=self.requested))

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old)


def default_resume_command(checkpoint: Path) -> str:
    argv = list(sys.argv[1:])
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in ("--resume-from", "--overwrite"):
            skip = a == "--resume-from"
            continue
        if a.startswith("--resume-from="):
            continue
        out.append(a)
    return " ".join(shlex.quote(x) for x in ["aura", *out, "--resume-from", str(checkpoint)])


def train(*, model, data: BatchSource, val_data: Iterable[dict] | None, args: TrainArgs, plan: StepPlan,
          dist: DistInfo, hooks: TrainHooks, run_status: RunStatus | None = None, optimizer=None,
          flops_per_token: float | None = None, peak_flops: float | None = None,
          peak_name: str | None = None, device_name: str = "", resume_from: Path | None = None,
          engine: StepEngine | None = None) -> TrainResult:
    """Train ``model`` for ``plan.total_steps`` optimizer steps; see the module docstring for the contract.

    ``args`` must be resolved (learning_rate, batch and accumulation set). Returns when finished or after
    an interrupt checkpoint; raises AuraError on OOM, too many NaN steps or a failed save.
    """
    device, out = dist.device, Path(args.output_dir)
    precision = resolve_precision(args.precision, device)
    scaler = make_scaler(precision, device) if engine is None else None  # an engine brings its own
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    optimizer = optimizer or build_optimizer(model, args, device)
    engine = engine or TorchEngine(optimizer, scaler)
    schedule = plan.schedule or schedule_for(args, plan.total_steps)
    accum = args.gradient_accumulation_steps or 1
    state = TrainState()
    if dist.is_main:
        ckpt.clean_staging(out)  # only this run's staging entries, and only those of a writer that is gone
    if resume_from is not None:
        saved, extra = ckpt.load_checkpoint(resume_from, model=model, optimizer=optimizer, scaler=scaler,
                                            dist=dist, io=hooks.io, read_model=hooks.load_model,
                                            allow_sharded=bool(getattr(args, "load_sharded", False)))
        state.load_state_dict(saved["loop"])
        state.last_checkpoint = str(resume_from)  # the last good checkpoint is the one resumed
        data.load_state_dict(saved["data"])
        if extra is not None and hooks.load_extra_state is not None:
            hooks.load_extra_state(extra)
        console.info(M("resumed", path=resume_from, step=state.step, epoch=state.epoch + 1,
                       tokens=state.tokens_seen))
    else:
        data.start_epoch(0)
    console.info(M("precision", precision=precision, autocast="ON" if precision != "fp32" else "OFF",
                   scaler="ON" if scaler is not None else "OFF"))
    console.info(M("plan", steps=plan.total_steps, epochs=plan.epochs, per_epoch=plan.steps_per_epoch,
                   tokens=plan.tokens_per_step, warmup=schedule.warmup))
    limits_notice(args, plan)
    logger = MetricsLogger(out, dist=dist, total_steps=plan.total_steps,
                           resume_step=state.step if resume_from is not None else None,
                           time_budget_h=args.time_budget, peak_name=peak_name, device_name=device_name)
    meter = Throughput(flops_per_token=flops_per_token, peak_flops=peak_flops, world_size=dist.world_size)
    meter.reset(tokens=state.tokens_seen, step=state.step)
    history: list[tuple[int, float]] = []
    zero = lambda: torch.zeros((), dtype=torch.float64, device=device)  # noqa: E731
    interval_loss, interval_n = zero(), 0
    # the epoch's running sum continues a resumed epoch (rank 0 holds the all-rank sum, the others 0)
    epoch_loss = zero() + (state.epoch_loss_sum if dist.is_main else 0.0)
    epoch_n, epoch_start = state.epoch_targets, time.perf_counter()
    last_val: float | None = None
    saved_at: int | None = None

    def save(name: str) -> Path:
        nonlocal saved_at
        path = out / name
        state.epoch_loss_sum, state.epoch_targets = float(global_sum(epoch_loss.clone())), epoch_n
        trainer_state = {"step": state.step, "epoch": state.epoch, "tokens_seen": state.tokens_seen,
                         "loop": state.state_dict(), "data": data.state_dict(),
                         "plan": plan_state(args, dataclasses.replace(plan, schedule=schedule)),
                         **(hooks.checkpoint_meta() if hooks.checkpoint_meta else {})}
        ckpt.save_checkpoint(path, model=model, optimizer=optimizer, scaler=scaler, trainer_state=trainer_state,
                             dist=dist, io=hooks.io, write_model=hooks.save_model, write_extras=hooks.write_extras,
                             extra_state=hooks.extra_state() if hooks.extra_state else None)
        state.last_checkpoint, saved_at = str(path), state.step
        if dist.is_main:
            ckpt.prune(out, args.keep_last)
            console.info(ckpt.M("saved", path=path, size=ckpt.checkpoint_size(path)))
        if run_status is not None:
            run_status.update(last_step=state.step, latest_checkpoint=path)
        return path

    def keep_best(val: float | None) -> None:
        if not best_model.track(state, val):
            return
        extras, info = hooks.write_extras, best_model.best_json(state)

        def write_extras(d: Path) -> None:
            if extras is not None:
                extras(d)
            atomic_write_json(d / best_model.BEST_JSON, info)

        path = ckpt.save_model_dir(best_model.best_dir(out), model=model, dist=dist, io=hooks.io,
                                   write_model=hooks.save_model, write_extras=write_extras)
        console.info(best_model.M("saved", val=val, step=state.step, path=path))

    def global_sum(t: torch.Tensor) -> torch.Tensor:
        return dist.all_reduce(t.to(dist.comm_device), "sum") if dist.is_distributed else t

    model.train()
    status = "failed"
    try:
        with _Signals() as signals:
            while state.step < plan.total_steps:
                window = []
                while len(window) < accum:
                    batch = data.next_batch()
                    if batch is None:
                        break
                    window.append(batch)
                if not window:  # the epoch ended on a window boundary (resumed exactly there)
                    data.start_epoch(state.epoch)
                    continue
                lr = schedule.lr(state.step)
                for group in optimizer.param_groups:
                    group["lr"] = lr
                counts = torch.tensor([sum(count_targets(b) for b in window),
                                       sum(b["input_ids"].numel() for b in window)], dtype=torch.float64)
                n_targets, n_inputs = (int(x) for x in global_sum(counts).tolist())
                scale = dist.world_size / max(n_targets, 1)  # DDP/FSDP average grads over ranks
                window_loss = zero()
                for i, batch in enumerate(window):
                    batch = _to_device(batch, device)
                    with no_sync(model, enabled=i < len(window) - 1):
                        with autocast_context(precision, device):
                            ls = loss_sum(model, batch)
                        engine.backward(ls * scale, last=i == len(window) - 1)
                    window_loss += ls.detach()
                norm = engine.clip(args.max_grad_norm)
                loss_check = global_sum(window_loss.clone()) if (scaler is not None and dist.is_distributed) \
                    else window_loss
                grad_norm, loss_value = torch.stack([norm.double().to(device), loss_check.to(device)]).tolist()
                bad = not math.isfinite(loss_value) or (scaler is None and not math.isfinite(grad_norm))
                if bad:
                    engine.skip()
                    state.bad_steps_in_row += 1
                    console.warn(M("bad_step", step=state.step + 1, loss=loss_value, n=state.bad_steps_in_row,
                                   max=args.max_bad_steps))
                    if state.bad_steps_in_row >= max(args.max_bad_steps, 1):
                        last = f": {state.last_checkpoint}" if state.last_checkpoint else ""
                        raise AuraError(M("too_many_bad", n=state.bad_steps_in_row, step=state.step + 1,
                                          last=last))
                else:
                    engine.step()
                    state.bad_steps_in_row = 0
                    interval_loss += window_loss
                    epoch_loss += window_loss
                    interval_n += n_targets
                    epoch_n += n_targets
                state.step += 1
                state.tokens_seen += n_inputs

                if state.step % args.log_interval == 0 or state.step == plan.total_steps:
                    if interval_n:
                        loss_mean = float(global_sum(interval_loss.clone())) / interval_n
                        tps, mfu, eta = meter.measure(tokens=state.tokens_seen, step=state.step,
                                                      total_steps=plan.total_steps)
                        sync = sync_status(model, dist)  # replicas compared at every log line; raises on drift
                        history.append((state.step, loss_mean))
                        logger.step(step=state.step, epoch=state.epoch, tokens=state.tokens_seen, loss=loss_mean,
                                    lr=lr, grad_norm=grad_norm if math.isfinite(grad_norm) else None,
                                    tokens_per_s=tps, mfu=mfu, seconds=meter.step_seconds or 0.0, eta_s=eta,
                                    elapsed_s=meter.elapsed, sync=sync)
                    interval_loss, interval_n = zero(), 0

                epoch_done = data.position >= data.batches_per_epoch
                if epoch_done:
                    last_val = evaluate(model, val_data, dist=dist, precision=precision)
                    train_epoch = float(global_sum(epoch_loss.clone())) / epoch_n if epoch_n else None
                    seconds = time.perf_counter() - epoch_start
                    logger.epoch(step=state.step, epoch=state.epoch, epochs=plan.epochs, tokens=state.tokens_seen,
                                 train_loss=train_epoch, val_loss=last_val, epoch_seconds=seconds,
                                 elapsed_s=meter.elapsed)
                    finished_epoch = state.epoch + 1
                    state.epoch += 1
                    data.start_epoch(state.epoch)
                    keep_best(last_val)
                    epoch_loss, epoch_n = zero(), 0
                    path = save(hooks.epoch_checkpoint_name(finished_epoch, state.step))
                    if hooks.on_epoch_end is not None and dist.is_main:
                        hooks.on_epoch_end(EpochEnd(finished_epoch, state.step, train_epoch, last_val, lr, path,
                                                    seconds))
                    epoch_start = time.perf_counter()
                    meter.reset(tokens=state.tokens_seen, step=state.step)  # eval/save time is not training
                elif args.eval_interval and state.step % args.eval_interval == 0 and val_data is not None:
                    last_val = evaluate(model, val_data, dist=dist, precision=precision)
                    if last_val is not None:
                        logger.eval(step=state.step, epoch=state.epoch, tokens=state.tokens_seen, val_loss=last_val,
                                    elapsed_s=meter.elapsed)
                    keep_best(last_val)
                    meter.reset(tokens=state.tokens_seen, step=state.step)
                if args.save_steps and state.step % args.save_steps == 0 and saved_at != state.step:
                    save(f"checkpoint-step-{state.step}")
                    meter.reset(tokens=state.tokens_seen, step=state.step)

                stop = signals.requested is not None
                if dist.is_distributed:  # every rank stops at the same step
                    flag = torch.tensor([1.0 if stop else 0.0], device=dist.comm_device)
                    stop = bool(dist.all_reduce(flag, "max").item())
                if stop and state.step < plan.total_steps:
                    path = save(f"interrupt-step-{state.step}") if saved_at != state.step else \
                        Path(state.last_checkpoint or "")
                    resume = (hooks.resume_command or default_resume_command)(path)
                    console.info(M("interrupted", step=state.step, path=path, cmd=resume))
                    status = "interrupted"
                    return TrainResult("interrupted", state, history, None, path, last_val)

            if saved_at != state.step:
                save(f"checkpoint-step-{state.step}")
            final_dir = out / "final"
            ckpt.save_model_dir(final_dir, model=model, dist=dist, io=hooks.io, write_model=hooks.save_model,
                                write_extras=hooks.write_extras)
            console.info(M("final_saved", path=final_dir))
            status = "finished"
            return TrainResult("finished", state, history, final_dir, Path(state.last_checkpoint or ""), last_val)
    except torch.OutOfMemoryError:
        raise AuraError(M("oom", device=device, batch=args.batch_size, accum=accum,
                          ckpt="ON" if args.gradient_checkpointing else "OFF")) from None
    except KeyboardInterrupt:
        status = "interrupted"
        if dist.is_main and state.last_checkpoint:
            path = Path(state.last_checkpoint)
            console.error(M("aborted", step=state.step, path=path,
                            cmd=(hooks.resume_command or default_resume_command)(path)))
        elif dist.is_main:
            console.error(M("aborted_none", step=state.step))
        raise
    finally:
        logger.close()
        if run_status is not None:
            run_status.update(status=status, last_step=state.step)

