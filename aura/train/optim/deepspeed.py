"""DeepSpeed ZeRO-2/3 behind the training loop's ``StepEngine`` seam (``aura finetune --deepspeed``).

The loop stays the one loop: it normalises the loss by the window's target tokens across ranks, asks
the step engine for the LR of every step (a pure function of the step) and checkpoints through
``TrainHooks.io``. What DeepSpeed changes is confined here:

* ``ds_config``: the user's ds_config.json with Aura's flags written in: micro-batch, gradient
  accumulation, train batch, gradient clipping and precision come from Aura ("auto" values filled,
  conflicting ones overridden with a warning), so the classic "Gradient accumulation steps mismatch"
  cannot happen. A "scheduler" section is dropped (Aura's schedule drives the LR).
* ``DeepSpeedStep``: ``engine.backward(loss, scale_wrt_gas=False)`` (the loop already divided by the
  window's tokens) and ``engine.step()`` on every micro-step, with the accumulation boundary set
  explicitly at the window's last micro-step (a short last window of an epoch stays exact); the LR is
  set on DeepSpeed's optimizer before the window; the grad norm is ``engine.get_global_grad_norm()``;
  DeepSpeed clips and keeps its own fp16 loss scale.
* ``DeepSpeedIO``: checkpoints with ``engine.save_checkpoint`` / ``load_checkpoint`` (frozen base
  weights excluded) into the loop's staged checkpoint dir, plus the adapter (or full model) files
  gathered on rank 0 (ZeRO-3: ``deepspeed.zero.GatheredParameters``), so every checkpoint and
  ``final/`` load in peft/transformers without DeepSpeed.

Aura's own AdamW (a torch optimizer) is handed to DeepSpeed unless the config has an "optimizer"
section: that avoids compiling DeepSpeed's CPU Adam on machines without a GPU.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from aura.core import console
from aura.core.errors import AuraError
from aura.core.files import loads_json
from aura.core.i18n import Messages

M = Messages(
    "deepspeed",
    {
        "main_failed": (
            "El proceso 0 no pudo escribir el modelo en {path} (su error se muestra en su salida).",
            "Rank 0 failed to write the model into {path} (its error is in its own output).",
        ),
        "missing": (
            "DeepSpeed no está instalado. Instálalo con: pip install 'aura-llm[deepspeed]' (o pip install "
            "deepspeed), o entrena sin --deepspeed.",
            "DeepSpeed is not installed. Install it with: pip install 'aura-llm[deepspeed]' (or pip install "
            "deepspeed), or train without --deepspeed.",
        ),
        "too_old": (
            "DeepSpeed {have} es demasiado antiguo para Aura (necesita {need} o posterior: las versiones "
            "anteriores no cargan sus propios checkpoints con el torch.load seguro de torch >= 2.6). "
            "Actualízalo con: pip install -U 'deepspeed>={need}'.",
            "DeepSpeed {have} is too old for Aura (it needs {need} or later: earlier versions cannot load "
            "their own checkpoints with the safe torch.load of torch >= 2.6). Upgrade it with: "
            "pip install -U 'deepspeed>={need}'.",
        ),
        "no_file": (
            "No existe el archivo de configuración de DeepSpeed {path}.",
            "The DeepSpeed config file {path} does not exist.",
        ),
        "bad_json": ("{path} no es un JSON válido ({err}).", "{path} is not valid JSON ({err})."),
        "override": (
            "ds_config: '{key}' = {theirs} se sustituye por {ours} (de {flag}); en Aura esos valores los "
            "fijan los flags, así nunca discrepan.",
            "ds_config: '{key}' = {theirs} is replaced by {ours} (from {flag}); in Aura those values come "
            "from the flags, so they never disagree.",
        ),
        "scheduler": (
            "ds_config: se ignora la sección 'scheduler'; la tasa de aprendizaje la fija Aura "
            "(--learning-rate, --warmup-steps, coseno).",
            "ds_config: the 'scheduler' section is ignored; Aura sets the learning rate "
            "(--learning-rate, --warmup-steps, cosine).",
        ),
        "stage": (
            "ds_config: zero_optimization.stage debe ser 0, 1, 2 o 3 (recibido: {stage}).",
            "ds_config: zero_optimization.stage must be 0, 1, 2 or 3 (got: {stage}).",
        ),
        "qlora": (
            "DeepSpeed ZeRO no admite un modelo base cuantizado en 4 bits (QLoRA); usa --method lora o "
            "torchrun sin --deepspeed (DDP).",
            "DeepSpeed ZeRO does not support a 4-bit quantized base (QLoRA); use --method lora or torchrun "
            "without --deepspeed (DDP).",
        ),
        "ready": (
            "DeepSpeed ZeRO-{stage}: micro-lote {micro}, acumulación {accum}, lote global {global_}, "
            "recorte {clip}, optimizador {opt}.",
            "DeepSpeed ZeRO-{stage}: micro-batch {micro}, accumulation {accum}, global batch {global_}, "
            "clipping {clip}, optimizer {opt}.",
        ),
        "non_finite": (
            "DeepSpeed ya aplicó la actualización de un paso con pérdida no finita.",
            "DeepSpeed already applied the update of a step with a non-finite loss.",
        ),
    },
)

if TYPE_CHECKING:
    import torch


def set_accelerator_env(device: str = "auto") -> None:
    """Tell DeepSpeed to use the CPU when there is no NVIDIA GPU to use (``DS_ACCELERATOR=cpu``).

    DeepSpeed, which transformers and peft import when it is installed, probes for an accelerator at
    import time and warns on every CPU-only command. The CLI calls this once per command, before the
    command imports anything, with its ``--device`` (``auto`` for commands without one); a value the
    user already exported is kept. torch-free: it only looks for NVIDIA device files.
    """
    if "DS_ACCELERATOR" in os.environ:
        return
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    hidden = visible is not None and visible.strip() in ("", "-1")  # GPUs present but hidden
    if device.split(":")[0] in ("cpu", "mps") or hidden or not glob.glob("/dev/nvidia[0-9]*"):
        os.environ["DS_ACCELERATOR"] = "cpu"


def read_config(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise AuraError(M("no_file", path=path))
    try:
        config = loads_json(path.read_bytes())
    except ValueError as e:  # not JSON, not UTF-8, nested too deep
        raise AuraError(M("bad_json", path=path, err=e)) from None
    if not isinstance(config, dict):
        raise AuraError(M("bad_json", path=path, err="not an object"))
    return config


def zero_stage(path: str | Path) -> int:
    """The ZeRO stage the DeepSpeed config at ``path`` asks for (0 where it names none)."""
    zero = read_config(path).get("zero_optimization")
    return zero.get("stage", 0) if isinstance(zero, dict) else 0


def ds_config(
    user: dict, *, batch_size: int, accumulation: int, world_size: int, max_grad_norm: float, precision: str
) -> dict:
    """The user's config with Aura's batch, accumulation, clipping and precision written in."""
    config = json.loads(json.dumps(user))  # a deep copy
    ours = {
        "train_micro_batch_size_per_gpu": (batch_size, "--batch-size"),
        "gradient_accumulation_steps": (accumulation, "--gradient-accumulation-steps"),
        "train_batch_size": (
            batch_size * accumulation * world_size,
            "--batch-size x --gradient-accumulation-steps x ranks",
        ),
        "gradient_clipping": (float(max_grad_norm), "--max-grad-norm"),
    }
    for key, (value, flag) in ours.items():
        theirs = config.get(key, "auto")
        if theirs != "auto" and theirs != value:
            console.warn(M("override", key=key, theirs=theirs, ours=value, flag=flag))
        config[key] = value
    for key in ("bf16", "fp16"):  # precision comes from --precision
        config[key] = {**{k: v for k, v in (config.get(key) or {}).items() if v != "auto"}, "enabled": precision == key}
    zero = config.setdefault("zero_optimization", {})
    stage = zero.get("stage", 0)
    if stage not in (0, 1, 2, 3):
        raise AuraError(M("stage", stage=stage))
    for key, value in list(zero.items()):
        if value == "auto":  # the HF-Trainer placeholders: DeepSpeed's defaults
            del zero[key]
    if config.pop("scheduler", None) is not None:
        console.warn(M("scheduler"))
    config["zero_allow_untested_optimizer"] = True  # Aura's torch AdamW
    config.setdefault("steps_per_print", 10**9)  # the loop logs
    config.setdefault("wall_clock_breakdown", False)
    return config


class DeepSpeedStep:
    """The loop's ``StepEngine`` (``aura.train.optim.step_engine``) over a DeepSpeed engine: DeepSpeed scales fp16
    losses, clips and steps; its loss scale lives in its own checkpoint files (``state_dict`` is empty)."""

    def __init__(self, engine, optimizer, *, precision: str, dist):
        from aura.train.optim.step_engine import allow_tf32

        self.engine, self.optimizer, self.precision, self.dist = engine, optimizer, precision, dist
        allow_tf32(dist.device)

    def describe(self) -> str:
        from aura.train.optim.step_engine import precision_line

        return precision_line(self.precision, scaler=False, autocast=False)

    def autocast(self):
        """No autocast: DeepSpeed owns the precision (its bf16/fp16 config casts the model and keeps fp32
        master weights); an outer torch.autocast makes newer DeepSpeed warn and disable it, older assert."""
        return contextlib.nullcontext()

    def set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:  # before backward: DeepSpeed steps at the boundary
            group["lr"] = lr

    def backward(self, loss: torch.Tensor, *, last: bool = True) -> None:
        self.engine.set_gradient_accumulation_boundary(last)
        self.engine.backward(loss, scale_wrt_gas=False)  # the loop already normalised the window
        self.engine.step()  # DeepSpeed updates (and clips) only at the boundary

    def finish(self, window_loss: torch.Tensor):
        import math

        from aura.train.optim.step_engine import StepOutcome

        norm = self.engine.get_global_grad_norm()
        grad_norm, loss = float("nan") if norm is None else float(norm), float(window_loss)
        applied = math.isfinite(loss) and math.isfinite(grad_norm)
        if not applied:  # the update happened in backward; only the loop's count of bad steps is left
            console.warn(M("non_finite"))
        return StepOutcome(applied, grad_norm, loss)

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


class DeepSpeedIO:
    """``CheckpointIO`` for DeepSpeed: engine checkpoints + the adapter/model files, atomically staged by
    the loop's checkpoint code (every rank writes into the same staged directory)."""

    def __init__(self, engine, *, method: str, check_base=None):
        self.engine, self.method, self.check_base = engine, method, check_base

    def _gathered(self):
        """Full parameters on every rank while the block runs (ZeRO-3 partitions them)."""
        if self.engine.zero_optimization_stage() < 3:
            return contextlib.nullcontext()
        import deepspeed

        module = self.engine.module
        params = [p for p in module.parameters() if p.requires_grad or self.method == "full"]
        return deepspeed.zero.GatheredParameters(params, modifier_rank=None)

    def save_model(self, model, directory, *, dist, write):
        """Rank 0 writes the full model or the adapter: its LoRA tensors and peft's ``modules_to_save`` copies
        (a reward model's score head); then every rank learns whether it worked (a failure on rank 0 is
        raised on every rank, where a barrier would leave the others waiting)."""
        import torch

        failed = None
        with self._gathered():
            if dist.is_main:
                module = self.engine.module
                state = {
                    k: v.detach().cpu().clone()
                    for k, v in module.state_dict().items()
                    if self.method == "full" or "lora_" in k or ".modules_to_save." in k
                }
                try:
                    write(module, Path(directory), state)
                except Exception as e:  # re-raised below, once every rank knows
                    failed = e
        ok = dist.all_reduce(torch.tensor([0 if failed else 1], dtype=torch.int32), "min")
        if failed is not None:
            raise failed
        if not int(ok.item()):
            raise AuraError(M("main_failed", path=directory))

    def save_state(self, model, optimizer, directory, *, dist, write):
        self.save_model(model, directory, dist=dist, write=write)
        self.engine.save_checkpoint(
            str(Path(directory) / "deepspeed"),
            tag="state",
            save_latest=False,
            exclude_frozen_parameters=self.method != "full",
        )

    def load_state(self, model, optimizer, directory, *, dist, read):
        if self.check_base is not None:
            self.check_base(self.engine.module, Path(directory))
        self.engine.load_checkpoint(
            str(Path(directory) / "deepspeed"),
            tag="state",
            load_optimizer_states=optimizer is not None,
            load_lr_scheduler_states=False,
            load_module_strict=self.method == "full",
        )


OLDEST = "0.16"  # the oldest release the tests pass with (0.16.0; 0.15.x fails resuming: see check_version)


def check_version(have: str) -> None:
    """Refuse DeepSpeed releases older than ``OLDEST``, the extra's pin: 0.15.4 and earlier fail at the
    first resume with torch >= 2.6 (their checkpoints need the unsafe ``torch.load``); 0.14 does not import."""
    from packaging.version import Version

    if Version(have).release < Version(OLDEST).release:
        raise AuraError(M("too_old", have=have, need=OLDEST))


def setup_deepspeed(model, *, args, dist, config_path: str, precision: str):
    """(the DeepSpeed engine, which the loop trains as the model; its ``StepEngine``; its ``CheckpointIO``)."""
    from aura.models.deepspeed_import import import_deepspeed

    try:
        deepspeed = import_deepspeed()
    except ImportError:
        raise AuraError(M("missing")) from None
    check_version(deepspeed.__version__)
    from aura.distributed.parallel import is_quantized
    from aura.train.adapters import check_adapter_base
    from aura.train.optim.step_engine import build_optimizer

    if is_quantized(model):
        raise AuraError(M("qlora"))
    user = read_config(config_path)
    config = ds_config(
        user,
        batch_size=args.batch_size,
        accumulation=args.gradient_accumulation_steps or 1,
        world_size=dist.world_size,
        max_grad_norm=args.max_grad_norm,
        precision=precision,
    )
    optimizer = None if "optimizer" in config else build_optimizer(model, args, dist.device)
    model.to(dist.device)
    engine, ds_optimizer, _, _ = deepspeed.initialize(
        model=model,
        optimizer=optimizer,
        config=config,
        model_parameters=[p for p in model.parameters() if p.requires_grad] if optimizer is None else None,
    )
    console.info(
        M(
            "ready",
            stage=engine.zero_optimization_stage(),
            micro=config["train_micro_batch_size_per_gpu"],
            accum=config["gradient_accumulation_steps"],
            global_=config["train_batch_size"],
            clip=config["gradient_clipping"],
            opt=type(optimizer or ds_optimizer).__name__,
        )
    )
    check = None if args.method == "full" else (lambda m, d: check_adapter_base(d, m, flag=None))
    io = DeepSpeedIO(engine, method=args.method, check_base=check)
    return engine, DeepSpeedStep(engine, ds_optimizer, precision=precision, dist=dist), io
