"""The step engine: how one window of micro-batches becomes one optimizer update (``StepEngine``).

The loop (``aura.train.loop.optimizer_step``) drives every engine the same way, once per optimizer step::

    engine.set_lr(lr)                         # the LR is a pure function of the step (optim.schedule)
    for each micro-batch of the window:
        with engine.autocast(): loss = ...    # summed token losses / the window's target tokens
        engine.backward(loss, last=...)
    outcome = engine.finish(window_loss)      # clip, one host sync, then the update or a skip

What an engine owns: its precision (autocast, the fp16 GradScaler), the LR on its optimizer's param
groups, clipping, the finiteness check (a window whose loss, or without a GradScaler whose grad norm, is
NaN/inf is skipped: its gradients are dropped and nothing is applied; under torchrun every rank reaches the
same decision, fp16's GradScaler found-inf included, which FSDP2 ranks compute on their own shards) and its
own resumable state
(``state_dict`` / ``load_state_dict``, stored as ``scaler.pt``: the GradScaler's state, the format of every
earlier Aura checkpoint). The optimizer's state is written by the run's ``CheckpointIO``
(``optimizer.pt``, FSDP2's ``dcp/``, DeepSpeed's own files), which receives ``engine.optimizer``.

* ``TorchEngine``: single process, DDP and FSDP2; AdamW (or Muon + AdamW) from ``build_optimizer``.
* ``aura.train.optim.deepspeed.DeepSpeedStep``: the same protocol over a DeepSpeed engine.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ContextManager, Protocol

import torch

from aura.core.errors import AuraError
from aura.core.i18n import Messages

if TYPE_CHECKING:
    from aura.distributed import DistInfo
    from aura.train.args import TrainArgs

M = Messages(
    "engine",
    {
        "precision": (
            "Precisión activa: {precision} | autocast {autocast} | GradScaler {scaler}",
            "Active precision: {precision} | Autocast={autocast} | GradScaler={scaler}",
        ),
        "on": ("activado", "ON"),
        "off": ("desactivado", "OFF"),
        "no_trainable": ("El modelo no tiene parámetros entrenables.", "The model has no trainable parameters."),
        "fp16_cpu": (
            "fp16 con GradScaler no está disponible en este dispositivo/compilación de PyTorch ({err}); "
            "usa --precision bf16 o fp32.",
            "fp16 with GradScaler is not available on this device/PyTorch build ({err}); use --precision bf16 or fp32.",
        ),
    },
)


@dataclass
class StepOutcome:
    """What one optimizer step did (read on the host: the step's one sync)."""

    applied: bool  # False: a non-finite window, skipped
    grad_norm: float  # of the window, before clipping (nan/inf when non-finite)
    loss: float  # the window's summed loss as checked (summed over ranks under fp16 + torchrun)


class StepEngine(Protocol):
    """The optimizer-step seam (see the module docstring for the order of calls)."""

    precision: str  # fp32 | bf16 | fp16, resolved
    optimizer: Any  # what the CheckpointIO saves and restores

    def describe(self) -> str: ...  # the "Active precision" line
    def autocast(self) -> ContextManager: ...
    def set_lr(self, lr: float) -> None: ...
    def backward(self, loss: torch.Tensor, *, last: bool) -> None: ...  # loss already normalised
    def finish(self, window_loss: torch.Tensor) -> StepOutcome: ...  # clip, check, step or skip
    def state_dict(self) -> dict: ...
    def load_state_dict(self, state: dict) -> None: ...


class TorchEngine:
    """The plain PyTorch path (single process, DDP, FSDP2): GradScaler for fp16, clip, AdamW step."""

    def __init__(self, optimizer, *, precision: str, dist: DistInfo, max_grad_norm: float):
        self.optimizer, self.precision, self.dist = optimizer, precision, dist
        self.scaler = make_scaler(precision, dist.device)
        self.max_norm = max_grad_norm or float("inf")  # 0 = no clipping
        self.params = [p for g in optimizer.param_groups for p in g["params"]]
        allow_tf32(dist.device)

    @classmethod
    def build(cls, model, *, args: TrainArgs, dist: DistInfo, precision: str, info=None) -> "TorchEngine":
        """AdamW over ``model``'s trainable parameters; build it after parallelising (FSDP2 shards them).
        ``info``: the hardware every rank agreed on (Muon's Newton-Schulz dtype)."""
        return cls(
            build_optimizer(model, args, dist.device, info=info),
            precision=precision,
            dist=dist,
            max_grad_norm=args.max_grad_norm,
        )

    def describe(self) -> str:
        return precision_line(self.precision, scaler=self.scaler is not None)

    def autocast(self) -> ContextManager:
        return autocast_context(self.precision, self.dist.device)

    def set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def backward(self, loss: torch.Tensor, *, last: bool = True) -> None:
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def finish(self, window_loss: torch.Tensor) -> StepOutcome:
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        norm = torch.nn.utils.clip_grad_norm_(self.params, self.max_norm, foreach=True)
        # FSDP2: a DTensor that clip_grad_norm_ already reduced over the shards (Replicate): the global norm
        norm = (norm.full_tensor() if hasattr(norm, "full_tensor") else norm).double().to(self.dist.device)
        if self.scaler is None:
            grad_norm, loss_value = torch.stack([norm, window_loss.to(norm)]).tolist()  # the step's one host sync
            found_inf = 0.0
        else:
            grad_norm, loss_value, found_inf = torch.cat([norm.view(1), self._agree(window_loss)]).tolist()  # idem
        # fp16: the GradScaler's found-inf skips an overflowing update (the scale backs off; not a bad step),
        # so only the loss makes a window bad; both were agreed over ranks
        applied = math.isfinite(loss_value) and (self.scaler is not None or math.isfinite(grad_norm))
        if applied and not found_inf:
            # after an explicit unscale_, GradScaler.step would do just this, plus a host read of found-inf
            self.optimizer.step()
        if self.scaler is not None:
            self.scaler.update()  # the same found-inf on every rank: the same scale
        self.optimizer.zero_grad(set_to_none=True)
        return StepOutcome(applied, grad_norm, loss_value)

    def _agree(self, window_loss: torch.Tensor) -> torch.Tensor:
        """fp16: (the window's loss, the GradScaler's found-inf) summed over ranks in one collective, and the
        agreed found-inf written back into the scaler. Each rank's GradScaler checks only the gradients it
        holds: the same on every DDP rank, but a shard under FSDP2, where one rank could step while another
        skips and the scales drift apart. torch reduces found-inf for DTensor gradients inside DTensor's
        dispatch (2.13: ``found_inf_reduce_handler``, a collective per dtype); here agreement does not rest
        on that, and costs nothing: it rides the loss's all-reduce that fp16 needs anyway."""
        found = self.scaler._found_inf_per_device(self.optimizer)  # filled by unscale_
        device = self.dist.device
        local = torch.zeros((), dtype=torch.float64, device=device)
        for f in found.values():
            local += f.to(local)
        both = global_sum(torch.stack([window_loss.to(local), local]), self.dist).to(device)
        for f in found.values():
            f.copy_((both[1] > 0).to(f))  # queued on the device: no host sync
        return both

    def state_dict(self) -> dict:
        return self.scaler.state_dict() if self.scaler is not None and self.scaler.is_enabled() else {}

    def load_state_dict(self, state: dict) -> None:
        if state and self.scaler is not None and self.scaler.is_enabled():
            self.scaler.load_state_dict(state)


def global_sum(t: torch.Tensor, dist: DistInfo) -> torch.Tensor:
    """``t`` summed over ranks, in place (a collective under torchrun; ``t`` itself otherwise)."""
    return dist.all_reduce(t.to(dist.comm_device), "sum") if dist.is_distributed else t


def build_optimizer(model, args: TrainArgs, device: torch.device, *, info=None) -> torch.optim.Optimizer:
    """AdamW over trainable params (fused where supported), or with ``--optimizer muon`` Muon for the hidden
    matrices and AdamW for the rest (``aura.train.optim.muon``); decay only on matrices, never on norms,
    biases or embeddings. Under DDP Muon's ranks share the Newton-Schulz work over the wrapper's group; FSDP2's
    sharded matrices share it over their mesh; an unwrapped model (DiLoCo's replicas) keeps its own. Muon's
    Newton-Schulz runs in bf16 where it is fast, else fp32 (``muon.ns_dtype``; ``info``: the hardware every
    rank agreed on, so that every rank decides alike)."""
    from aura.distributed import strategy_of
    from aura.train.optim import muon
    from aura.train.optim.muon import MuonAdamW, split_params

    hidden, decay, no_decay = split_params(model)
    if not hidden and not decay and not no_decay:
        raise AuraError(M("no_trainable"))
    kwargs = dict(lr=args.learning_rate or 1e-3, betas=(args.adam_beta1, args.adam_beta2), eps=args.adam_eps)
    params = hidden + decay + no_decay
    fused = device.type in ("cuda", "cpu") and all(
        p.dtype in (torch.float32, torch.float16, torch.bfloat16) for p in params
    )
    if getattr(args, "optimizer", None) == "muon":
        group = model.process_group if strategy_of(model) == "ddp" else None
        return MuonAdamW(
            hidden,
            decay,
            no_decay,
            weight_decay=args.weight_decay,
            fused=fused,
            process_group=group,
            dtype=muon.ns_dtype(device, info),
            **kwargs,
        )
    index = {id(p): i for i, p in enumerate(model.parameters())}  # the model's order, as optimizer.pt has it
    decayed = sorted(hidden + decay, key=lambda p: index[id(p)])
    groups = [{"params": decayed, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if fused:
        try:
            return torch.optim.AdamW(groups, fused=True, **kwargs)
        except (RuntimeError, TypeError):
            pass
    return torch.optim.AdamW(groups, foreach=True, **kwargs)


def resolve_precision(precision: str, device: torch.device, *, info=None) -> str:
    """``auto`` -> bf16 where the device accelerates it, else fp32 (CPU) or the device's default; from
    ``info`` (the hardware all ranks agreed on) when it describes ``device``'s type."""
    if precision != "auto":
        return precision
    from aura.models.hardware import default_precision, detect

    if info is not None and info.device_type == device.type:
        return default_precision(info)
    if device.type == "cpu":
        from aura.models.hardware import cpu_fast_bf16

        return "bf16" if cpu_fast_bf16() else "fp32"
    return default_precision(detect())


def precision_line(precision: str, *, scaler: bool, autocast: bool | None = None) -> str:
    autocast = precision != "fp32" if autocast is None else autocast
    return M(
        "precision", precision=precision, autocast=M("on" if autocast else "off"), scaler=M("on" if scaler else "off")
    )


def autocast_context(precision: str, device: torch.device) -> ContextManager:
    if precision in ("bf16", "fp16"):
        dtype = torch.bfloat16 if precision == "bf16" else torch.float16
        return torch.autocast(device_type=device.type, dtype=dtype)
    return contextlib.nullcontext()


def allow_tf32(device: torch.device) -> None:
    """TF32 for fp32 matmuls and convolutions on CUDA (MFU counts fp32 runs against the TF32 peak).

    Through the legacy flags on purpose: torch 2.9 added ``fp32_precision`` and deprecated them, but
    inductor in torch 2.9-2.11 still reads ``torch.backends.cuda.matmul.allow_tf32``, and that getter raises
    ("mix of legacy and new APIs") once the new setter was used, at the first compiled forward. The legacy
    setters work and keep both views consistent on every torch from 2.6 to 2.13
    (tests/test_gpu_readiness_compile.py reads both back)."""
    if device.type != "cuda":
        return
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True


def make_scaler(precision: str, device: torch.device):
    if precision != "fp16":
        return None
    try:
        return torch.amp.GradScaler(device.type)
    except (RuntimeError, AssertionError) as e:
        raise AuraError(M("fp16_cpu", err=e)) from None
