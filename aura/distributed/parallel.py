"""Parallelism, applied from outside the model in torchtitan's order: checkpointing -> compile -> FSDP2/DDP.

``choose_strategy`` picks none/DDP/FSDP2 from the training state's size and the device memory;
``parallelize`` wraps the model; ``strategy_of``, ``unwrap`` and ``no_sync`` let the loop and the
checkpoints treat every wrapping alike.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Iterator

import torch

from aura.core import console
from aura.core.errors import AuraError
from aura.core.i18n import Messages
from aura.distributed.process import DistInfo

M = Messages(
    "dist_parallel",
    {
        "strategy": ("Estrategia de paralelismo: {strategy} ({reason})", "Parallelism strategy: {strategy} ({reason})"),
        "strategy_none": ("ninguna", "none"),
        "why_single": ("un solo proceso", "a single process"),
        "why_fits": (
            "el estado de entrenamiento, {need}, cabe en {have} por dispositivo",
            "the training state, {need}, fits in {have} per device",
        ),
        "why_too_big": (
            "el estado de entrenamiento, {need}, no cabe en {have} por dispositivo; repartido "
            "entre {world:proceso|procesos} son {shard}",
            "the training state, {need}, does not fit in {have} per device; sharded over "
            "{world:rank|ranks} it is {shard}",
        ),
        "why_quantized": (
            "modelo cuantizado en 4/8 bits: FSDP no reparte esos pesos",
            "4/8-bit quantised model: FSDP does not shard those weights",
        ),
        "why_forced": ("elegida con --strategy", "chosen with --strategy"),
        "still_too_big": (
            "Ni repartido entre {world:proceso|procesos} cabe el estado de entrenamiento ({shard} de "
            "{have}). Activa --gradient-checkpointing, usa QLoRA o añade GPUs.",
            "Even sharded over {world:rank|ranks} the training state does not fit ({shard} of "
            "{have}). Enable --gradient-checkpointing, use QLoRA or add GPUs.",
        ),
        "bad_strategy": (
            "Estrategia desconocida '{strategy}': usa auto, ddp, fsdp o none.",
            "Unknown strategy '{strategy}': use auto, ddp, fsdp or none.",
        ),
        "strategy_single": (
            "--strategy {strategy} necesita varios procesos (lanza con 'aura launch'); "
            "con uno solo se entrena sin envoltorio.",
            "--strategy {strategy} needs several ranks (start with 'aura launch'); with one "
            "process the model is trained unwrapped.",
        ),
        "fsdp_quantized": (
            "FSDP no puede repartir un modelo cuantizado en 4/8 bits: usa --strategy ddp.",
            "FSDP cannot shard a 4/8-bit quantised model: use --strategy ddp.",
        ),
        "bad_precision": (
            "Precisión mixta desconocida '{value}': usa bf16, fp16 o nada.",
            "Unknown mixed precision '{value}': use bf16, fp16 or nothing.",
        ),
        "why_local": (
            "--local-steps {h}: cada proceso entrena su réplica y se sincronizan cada {h:paso|pasos}",
            "--local-steps {h}: every rank trains its own replica, synchronised every {h:step|steps}",
        ),
        "local_needs_replicas": (
            "--local-steps necesita el modelo entero en cada proceso y FSDP lo reparte: quita "
            "--local-steps o usa --strategy ddp o auto.",
            "--local-steps needs the whole model on every rank and FSDP shards it: drop "
            "--local-steps or use --strategy ddp or auto.",
        ),
        "local_too_big": (
            "--local-steps necesita el modelo entero en cada proceso, pero el estado de entrenamiento "
            "({need}) no cabe en {have} por dispositivo: usa un preset más pequeño o quita --local-steps "
            "(FSDP).",
            "--local-steps needs the whole model on every rank, but the training state ({need}) does "
            "not fit in {have} per device: use a smaller preset or drop --local-steps (FSDP).",
        ),
        "hook_needs_ddp": (
            "Con --ddp-comm {mode} se comprime el all-reduce de DDP y esta ejecución usa {strategy}: "
            "quita --ddp-comm o usa --strategy ddp.",
            "With --ddp-comm {mode}, DDP's all-reduce is compressed, and this run uses {strategy}: drop "
            "--ddp-comm or use --strategy ddp.",
        ),
        "single_ignored": (
            "Un solo proceso: {flag} no se aplica (no hay comunicación entre procesos).",
            "A single process: {flag} does not apply (there is no communication between ranks).",
        ),
    },
)


STRATEGIES = ("auto", "ddp", "fsdp", "none")
# Bytes of training state per trainable parameter beyond the weight itself: its gradient (same dtype)
# and AdamW's two fp32 moments. Frozen parameters (LoRA bases) cost only their weight.
_ADAMW_BYTES = 8
# Share of device memory the model state may take; the rest is activations, workspace, fragmentation.
STATE_SHARE = 0.5


def fsdp_api():
    try:  # public since torch 2.6
        from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
    except ImportError:  # torch 2.4 / 2.5
        from torch.distributed._composable.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
    return FSDPModule, MixedPrecisionPolicy, fully_shard


def training_state_bytes(model: torch.nn.Module) -> int:
    """Weights + gradients + AdamW moments of ``model`` in bytes (no activations)."""
    total = 0
    for p in model.parameters():
        total += p.numel() * p.element_size()
        if p.requires_grad:
            total += p.numel() * (p.element_size() + _ADAMW_BYTES)
    return total


def device_memory_bytes(dist: DistInfo) -> int:
    """Memory one rank can use: the GPU's, or this node's RAM split between its local ranks."""
    if dist.device.type == "cuda":
        return torch.cuda.get_device_properties(dist.device).total_memory
    import psutil

    local = int(os.environ.get("LOCAL_WORLD_SIZE", dist.world_size))
    return psutil.virtual_memory().total // max(local, 1)


def is_quantized(model: torch.nn.Module) -> bool:
    if getattr(model, "is_loaded_in_4bit", False) or getattr(model, "is_loaded_in_8bit", False):
        return True
    return any(type(p).__name__ in ("Params4bit", "Int8Params") for p in model.parameters())


def choose_strategy(
    model: torch.nn.Module,
    *,
    dist: DistInfo,
    strategy: str = "auto",
    device_memory: int | None = None,
    quiet: bool = False,
) -> tuple[str, str]:
    """``(strategy, reason)``: none for one rank; DDP when the full training state fits a device, else FSDP."""
    from aura.core.atomic import human_bytes

    if strategy not in STRATEGIES:
        raise AuraError(M("bad_strategy", strategy=strategy))
    if dist.world_size == 1:
        return "none", M("why_single") if strategy in ("auto", "none") else M("strategy_single", strategy=strategy)
    if strategy == "fsdp" and is_quantized(model):
        raise AuraError(M("fsdp_quantized"))
    if strategy != "auto":
        return strategy, M("why_forced")
    if is_quantized(model):
        return "ddp", M("why_quantized")
    need = training_state_bytes(model)
    have = device_memory if device_memory is not None else device_memory_bytes(dist)
    budget = int(have * STATE_SHARE)
    if need <= budget:
        return "ddp", M("why_fits", need=human_bytes(need), have=human_bytes(have))
    shard = need // dist.world_size
    if shard > budget and not quiet:
        console.warn(M("still_too_big", world=dist.world_size, shard=human_bytes(shard), have=human_bytes(have)))
    return "fsdp", M(
        "why_too_big", need=human_bytes(need), have=human_bytes(have), world=dist.world_size, shard=human_bytes(shard)
    )


def find_blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The repeated transformer blocks of any HF model (plain or peft-wrapped), in order.

    Hugging Face names its block classes in ``_no_split_modules`` (LlamaDecoderLayer, GPT2Block, ...);
    without that, the largest ModuleList of identical modules is taken (model.layers, transformer.h).
    """
    names: set[str] = set()
    for m in model.modules():
        names.update(getattr(m, "_no_split_modules", None) or ())
    blocks = [m for m in model.modules() if type(m).__name__ in names]
    if blocks:
        return blocks
    best: list[torch.nn.Module] = []
    best_params = 0
    for m in model.modules():
        if isinstance(m, torch.nn.ModuleList) and len(m) > 0 and len({type(c) for c in m}) == 1:
            n = sum(p.numel() for p in m.parameters())
            if n > best_params:
                best, best_params = list(m), n
    return best


def _apply_checkpointing(model: torch.nn.Module, blocks: list[torch.nn.Module]) -> None:
    if hasattr(model, "gradient_checkpointing_enable"):  # HF (and peft, which forwards to it)
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if hasattr(model, "config"):
            model.config.use_cache = False
        return
    from torch.utils.checkpoint import checkpoint

    for block in blocks:  # generic modules: recompute each block's activations in backward
        forward = block.forward
        block.forward = (lambda f: lambda *a, **k: checkpoint(f, *a, use_reentrant=False, **k))(forward)


def _precision_dtype(mixed_precision: str | None) -> torch.dtype | None:
    table = {None: None, "": None, "no": None, "fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
    if mixed_precision not in table:
        raise AuraError(M("bad_precision", value=mixed_precision))
    return table[mixed_precision]


def parallelize(
    model: torch.nn.Module,
    *,
    dist: DistInfo,
    strategy: str = "auto",
    gradient_checkpointing: bool = False,
    compile: bool = False,
    mixed_precision: str | None = None,
    reshard_after_forward: bool = True,
    find_unused_parameters: bool = False,
    device_memory: int | None = None,
    comm=None,
) -> torch.nn.Module:
    """Wrap ``model`` for training on ``dist``: activation checkpointing -> compile -> FSDP2 or DDP.

    Returns the module to train (DDP wrapper, the FSDP2-sharded model itself, or the plain model),
    moved to ``dist.device``. ``mixed_precision`` (bf16/fp16) sets FSDP2's parameter dtype with fp32
    gradient reduction; under DDP autocast in the loop does that job. Build the optimizer afterwards.
    ``comm`` (the training flags): ``ddp_comm`` picks DDP's communication hook (``aura.distributed.comm_hooks``;
    FSDP2 refuses one); ``local_steps`` leaves the model unwrapped for DiLoCo (``aura.distributed.local_sgd``).
    """
    chosen, hook = _choose(model, dist=dist, strategy=strategy, comm=comm, device_memory=device_memory)
    blocks = find_blocks(model)
    if gradient_checkpointing:
        _apply_checkpointing(model, blocks)
    if compile:
        for block in blocks or [model]:
            block.compile()  # in place: parameter names and state_dict keys do not change
    if chosen == "fsdp":
        return _shard(
            model,
            blocks,
            dist=dist,
            dtype=_precision_dtype(mixed_precision),
            reshard_after_forward=reshard_after_forward,
        )
    model.to(dist.device)
    if chosen == "ddp":
        return _replicate(model, dist=dist, hook=hook, comm=comm, find_unused_parameters=find_unused_parameters)
    return model


def _choose(model, *, dist: DistInfo, strategy: str, comm, device_memory: int | None) -> tuple[str, str]:
    """(strategy: fsdp/ddp/none, DDP communication hook) from the flags, printed with the reason; the
    combinations that cannot work (a hook without DDP, --local-steps with FSDP2) refused."""
    hook, local = getattr(comm, "ddp_comm", "none") or "none", getattr(comm, "local_steps", None)
    if hook == "powersgd":  # on one process too: the same flags then fail at once, not on the cluster
        from aura.distributed.comm_hooks import check_powersgd_rank

        check_powersgd_rank(model, comm.powersgd_rank)
    if dist.world_size == 1 and (hook != "none" or local):
        console.info(M("single_ignored", flag="--local-steps" if local else "--ddp-comm"))
        hook, local = "none", None
    if local and strategy == "fsdp":
        raise AuraError(M("local_needs_replicas"))
    chosen, reason = choose_strategy(model, dist=dist, strategy=strategy, device_memory=device_memory)
    if local:  # no DDP: the replicas meet every H steps (aura.distributed.local_sgd)
        if chosen == "fsdp":
            from aura.core.atomic import human_bytes

            have = device_memory if device_memory is not None else device_memory_bytes(dist)
            raise AuraError(M("local_too_big", need=human_bytes(training_state_bytes(model)), have=human_bytes(have)))
        chosen, reason = "none", M("why_local", h=local)
    elif hook != "none" and chosen != "ddp":
        raise AuraError(M("hook_needs_ddp", mode=hook, strategy=M("strategy_none") if chosen == "none" else chosen))
    console.info(M("strategy", strategy=M("strategy_none") if chosen == "none" else chosen, reason=reason))
    return chosen, hook


def _shard(model, blocks: list, *, dist: DistInfo, dtype, reshard_after_forward: bool):
    """FSDP2: each block sharded, then the root; ``dtype`` (bf16/fp16) the parameters' compute dtype with fp32
    gradient reduction."""
    from torch.distributed.device_mesh import init_device_mesh

    _, MixedPrecisionPolicy, fully_shard = fsdp_api()
    mesh = init_device_mesh(dist.device.type, (dist.world_size,))
    mp = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32) if dtype else MixedPrecisionPolicy()
    for i, block in enumerate(blocks):
        # the last block's parameters are needed again at once by backward: keep them gathered
        fully_shard(block, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard_after_forward and i < len(blocks) - 1)
    fully_shard(model, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard_after_forward)
    return model


def _replicate(model, *, dist: DistInfo, hook: str, comm, find_unused_parameters: bool):
    """DDP around ``model`` (already on its device), with the communication hook of ``--ddp-comm``."""
    from torch.nn.parallel import DistributedDataParallel

    from aura.distributed.comm_hooks import register_comm_hook

    ids = [dist.device.index] if dist.device.type == "cuda" else None
    # gradients live in the buckets: no copy. No static_graph: measured on torch 2.13 (gloo, 2 ranks), it
    # fails with no_sync accumulation ("expect_autograd_hooks_ INTERNAL ASSERT", pytorch/pytorch#187732) and
    # desynchronises the replicas under the chunked loss (the head runs outside DDP's forward); with
    # find_unused_parameters off it would save no work either.
    ddp = DistributedDataParallel(
        model, device_ids=ids, find_unused_parameters=find_unused_parameters, gradient_as_bucket_view=True
    )
    # gloo: always through a timed hook (the communication share in the log); NCCL completes the hooks'
    # futures before the GPU has finished, so there only --ddp-comm bf16/powersgd install one, untimed
    timed = dist.backend == "gloo"
    if hook != "none" or timed:
        register_comm_hook(
            ddp,
            mode=hook,
            rank=getattr(comm, "powersgd_rank", 1),
            warmup=getattr(comm, "powersgd_warmup", 2),
            timed=timed,
        )
    return ddp


def is_deepspeed_engine(model) -> bool:
    """True for the engine ``deepspeed.initialize`` returned (``aura.train.optim.deepspeed``).

    DeepSpeed is never imported here: an engine exists only if the setup already imported it.
    """
    if "deepspeed" not in sys.modules:
        return False
    from deepspeed import DeepSpeedEngine

    return isinstance(model, DeepSpeedEngine)


def strategy_of(model: torch.nn.Module) -> str:
    """ "ddp", "fsdp", "deepspeed" or "none": how ``parallelize`` (or the DeepSpeed setup) wrapped this model."""
    from torch.nn.parallel import DistributedDataParallel

    if isinstance(model, DistributedDataParallel):
        return "ddp"
    if isinstance(model, fsdp_api()[0]):
        return "fsdp"
    return "deepspeed" if is_deepspeed_engine(model) else "none"


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The user's model inside a DDP wrapper, a DeepSpeed engine or ``torch.compile`` (FSDP2 shards in place)."""
    inner = getattr(model, "module", model) if strategy_of(model) in ("ddp", "deepspeed") else model
    return getattr(inner, "_orig_mod", inner)


@contextlib.contextmanager
def no_sync(model: torch.nn.Module, enabled: bool = True) -> Iterator[None]:
    """Skip the gradient all-reduce on accumulation micro-steps (DDP); a no-op otherwise.

    Under FSDP2 gradients stay reduce-scattered every micro-step: skipping that would keep full
    unsharded gradients on every rank, which is the memory FSDP exists to save.
    """
    if enabled and strategy_of(model) == "ddp":
        with model.no_sync():
            yield
    else:
        yield
