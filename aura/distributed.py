"""torchrun environment -> ``DistInfo``; process-group set-up and tear-down.

Under torchrun (RANK, WORLD_SIZE, LOCAL_RANK in the environment) ``init_distributed`` joins the
process group with NCCL when CUDA is there, gloo otherwise, and falls back from NCCL to gloo with a
warning if NCCL fails to initialise (WSL2 without NCCL, a driver too old). Without torchrun it
returns a single-process ``DistInfo`` and every collective is a no-op, so the training loop has one
code path. Model code knows nothing of this; parallelism is applied from outside (``parallelize``).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import socket
from dataclasses import dataclass
from typing import Iterator

import torch

from aura import console
from aura.errors import AuraError
from aura.i18n import Messages

M = Messages("distributed", {
    "nccl_fallback": ("NCCL no pudo inicializarse ({err}); se usa gloo en su lugar.",
                      "NCCL failed to initialise ({err}); falling back to gloo."),
    "nccl_unavailable": ("Se pidió --backend nccl pero esta instalación de PyTorch no tiene NCCL o no hay "
                         "GPU CUDA. Usa --backend gloo o auto.",
                         "--backend nccl was requested but this PyTorch has no NCCL or there is no CUDA "
                         "GPU. Use --backend gloo or auto."),
    "mode": ("Modo distribuido. Backend={backend}. Procesos={world}. Sincronizando...",
             "Distributed mode. Backend={backend}. World size={world}. Synchronising..."),
    "peer_failed": ("falló en otro proceso", "it failed on another rank"),
    "strategy": ("Estrategia de paralelismo: {strategy} ({reason})",
                 "Parallelism strategy: {strategy} ({reason})"),
    "strategy_none": ("ninguna", "none"),
    "why_single": ("un solo proceso", "a single process"),
    "why_fits": ("el estado de entrenamiento, {need}, cabe en {have} por dispositivo",
                 "the training state, {need}, fits in {have} per device"),
    "why_too_big": ("el estado de entrenamiento, {need}, no cabe en {have} por dispositivo; repartido "
                    "entre {world:proceso|procesos} son {shard}",
                    "the training state, {need}, does not fit in {have} per device; sharded over "
                    "{world:rank|ranks} it is {shard}"),
    "why_quantized": ("modelo cuantizado en 4/8 bits: FSDP no reparte esos pesos",
                      "4/8-bit quantised model: FSDP does not shard those weights"),
    "why_forced": ("elegida con --strategy", "chosen with --strategy"),
    "still_too_big": ("Ni repartido entre {world:proceso|procesos} cabe el estado de entrenamiento ({shard} de "
                      "{have}). Activa --gradient-checkpointing, usa QLoRA o añade GPUs.",
                      "Even sharded over {world:rank|ranks} the training state does not fit ({shard} of "
                      "{have}). Enable --gradient-checkpointing, use QLoRA or add GPUs."),
    "bad_strategy": ("Estrategia desconocida '{strategy}': usa auto, ddp, fsdp o none.",
                     "Unknown strategy '{strategy}': use auto, ddp, fsdp or none."),
    "strategy_single": ("--strategy {strategy} necesita varios procesos (lanza con 'aura launch'); "
                        "con uno solo se entrena sin envoltorio.",
                        "--strategy {strategy} needs several ranks (start with 'aura launch'); with one "
                        "process the model is trained unwrapped."),
    "fsdp_quantized": ("FSDP no puede repartir un modelo cuantizado en 4/8 bits: usa --strategy ddp.",
                       "FSDP cannot shard a 4/8-bit quantised model: use --strategy ddp."),
    "bad_precision": ("Precisión mixta desconocida '{value}': usa bf16, fp16 o nada.",
                      "Unknown mixed precision '{value}': use bf16, fp16 or nothing."),
    "desync": ("Los pesos del modelo difieren entre procesos (Sync=FAIL): los rangos {ranks} no coinciden "
               "con el rango 0 (primer parámetro distinto: {param}). Revisa que todos los nodos usen el "
               "mismo código, datos, semilla y checkpoint, y que NODE_RANK no esté repetido.",
               "Model weights differ between ranks (Sync=FAIL): ranks {ranks} do not match rank 0 "
               "(first differing parameter: {param}). Check that every node runs the same code, data, "
               "seed and checkpoint, and that no NODE_RANK is repeated."),
    "bad_backend": ("Backend desconocido '{backend}': usa auto, nccl o gloo.",
                    "Unknown backend '{backend}': use auto, nccl or gloo."),
})


@dataclass
class DistInfo:
    """Where this process stands in the job. Single-process runs have rank 0 of world size 1."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    node: str = socket.gethostname()
    device: torch.device = torch.device("cpu")
    backend: str | None = None

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1 or self.backend is not None

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def prefix(self) -> str:
        return f"[Rank {self.rank}/{self.world_size} | Node {self.node} | Device {self.device}]"

    def barrier(self) -> None:
        if self.is_distributed:
            torch.distributed.barrier()

    def all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """In-place all_reduce (sum, max, min or avg) that is a no-op outside torchrun."""
        if self.is_distributed:
            ops = {"sum": torch.distributed.ReduceOp.SUM, "max": torch.distributed.ReduceOp.MAX,
                   "min": torch.distributed.ReduceOp.MIN}
            if op == "avg":
                torch.distributed.all_reduce(tensor, op=ops["sum"])
                tensor /= self.world_size
            else:
                torch.distributed.all_reduce(tensor, op=ops[op])
        return tensor

    def sum_float(self, value: float) -> float:
        t = torch.tensor([value], dtype=torch.float64, device=self.comm_device)
        return float(self.all_reduce(t, "sum").item())

    def mean_float(self, value: float) -> float:
        return self.sum_float(value) / self.world_size

    def broadcast_object(self, obj):
        if not self.is_distributed:
            return obj
        box = [obj]
        torch.distributed.broadcast_object_list(box, src=0)
        return box[0]

    @property
    def comm_device(self) -> torch.device:
        return self.device if self.backend == "nccl" else torch.device("cpu")


def under_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def pick_device(local_rank: int = 0, requested: str = "auto") -> torch.device:
    """``auto`` -> cuda:LOCAL_RANK when CUDA is there, then Apple mps, else cpu."""
    if requested != "auto":
        dev = torch.device(requested)
        if dev.type == "cuda" and dev.index is None:
            dev = torch.device("cuda", local_rank)
        return dev
    if torch.cuda.is_available():
        return torch.device("cuda", local_rank % max(torch.cuda.device_count(), 1))
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def _local_nccl_ok(dev: torch.device) -> bool:
    return dev.type == "cuda" and torch.distributed.is_nccl_available()


def _all_ranks_agree(store, key: str, ok: bool, *, rank: int, world: int) -> bool:
    """True when every rank reports ``ok``; uses the rendezvous store, so no process group is needed.

    Backend choice and NCCL fallback must be collective: a cluster where one node lacks NCCL (WSL2
    without it, a CPU-only node) would otherwise mix nccl and gloo ranks and hang.
    """
    store.set(f"aura/{key}/{rank}", "1" if ok else "0")
    keys = [f"aura/{key}/{r}" for r in range(world)]
    store.wait(keys)
    return all(store.get(k) == b"1" for k in keys)


def init_distributed(*, backend: str = "auto", device: str = "auto",
                     timeout_s: float = 1800.0) -> DistInfo:
    """Join the torchrun process group (or return a single-process DistInfo)."""
    if backend not in ("auto", "nccl", "gloo"):
        raise AuraError(M("bad_backend", backend=backend))
    if not under_torchrun():
        return DistInfo(device=pick_device(0, device))
    from torch.distributed import PrefixStore
    from torch.distributed.rendezvous import rendezvous

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    dev = pick_device(local_rank, device)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    if backend == "nccl" and not _local_nccl_ok(dev):
        raise AuraError(M("nccl_unavailable"))
    timeout = datetime.timedelta(seconds=timeout_s)
    chosen = backend
    if not torch.distributed.is_initialized():
        store, rank, world = next(rendezvous("env://", rank=rank, world_size=world, timeout=timeout))
        store.set_timeout(timeout)
        # torchrun's static rendezvous keeps one store across --max-restarts: without a per-attempt
        # prefix the restarted group reads the dead group's gloo addresses and hangs in init.
        store = PrefixStore(f"aura/attempt-{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", store)
        if backend == "auto":
            chosen = "nccl" if _all_ranks_agree(store, "nccl", _local_nccl_ok(dev),
                                                rank=rank, world=world) else "gloo"
        error = None
        if chosen == "nccl":
            try:
                torch.distributed.init_process_group(
                    backend="nccl", store=PrefixStore("default_pg", store), rank=rank,
                    world_size=world, timeout=timeout, device_id=dev)
                probe = torch.ones(1, device=dev)  # NCCL initialises lazily: force it now
                torch.distributed.all_reduce(probe)
            except Exception as err:  # noqa: BLE001 - any NCCL failure means: try gloo
                if backend == "nccl":
                    raise
                error = err
            if backend == "auto" and not _all_ranks_agree(store, "nccl_probe", error is None,
                                                           rank=rank, world=world):
                msg = str(error).splitlines()[0][:200] if error else M("peer_failed")
                console.warn(M("nccl_fallback", err=msg))
                if torch.distributed.is_initialized():
                    torch.distributed.destroy_process_group()
                chosen = "gloo"
        if chosen == "gloo":
            torch.distributed.init_process_group(
                backend="gloo", store=PrefixStore("aura_gloo", store), rank=rank,
                world_size=world, timeout=timeout)
    else:
        chosen = torch.distributed.get_backend()
    info = DistInfo(rank=rank, world_size=world, local_rank=local_rank, device=dev, backend=chosen)
    console.set_prefix(info.prefix)
    console.info(M("mode", backend=chosen, world=world))
    return info


def teardown(info: DistInfo) -> None:
    if info.is_distributed and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


# --------------------------------------------------------------------------------------------------
# Parallelism, applied from outside the model in torchtitan's order: checkpointing -> compile -> FSDP2/DDP

STRATEGIES = ("auto", "ddp", "fsdp", "none")
# Bytes of training state per trainable parameter beyond the weight itself: its gradient (same dtype)
# and AdamW's two fp32 moments. Frozen parameters (LoRA bases) cost only their weight.
_ADAMW_BYTES = 8
# Share of device memory the model state may take; the rest is activations, workspace, fragmentation.
_STATE_SHARE = 0.5


def _fsdp_api():
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


def choose_strategy(model: torch.nn.Module, *, dist: DistInfo, strategy: str = "auto",
                    device_memory: int | None = None) -> tuple[str, str]:
    """``(strategy, reason)``: none for one rank; DDP when the full training state fits a device, else FSDP."""
    from aura.utils.fsutil import human_bytes

    if strategy not in STRATEGIES:
        raise AuraError(M("bad_strategy", strategy=strategy))
    if dist.world_size == 1:
        return "none", M("why_single") if strategy in ("auto", "none") else M(
            "strategy_single", strategy=strategy)
    if strategy == "fsdp" and is_quantized(model):
        raise AuraError(M("fsdp_quantized"))
    if strategy != "auto":
        return strategy, M("why_forced")
    if is_quantized(model):
        return "ddp", M("why_quantized")
    need = training_state_bytes(model)
    have = device_memory if device_memory is not None else device_memory_bytes(dist)
    budget = int(have * _STATE_SHARE)
    if need <= budget:
        return "ddp", M("why_fits", need=human_bytes(need), have=human_bytes(have))
    shard = need // dist.world_size
    if shard > budget:
        console.warn(M("still_too_big", world=dist.world_size, shard=human_bytes(shard),
                       have=human_bytes(have)))
    return "fsdp", M("why_too_big", need=human_bytes(need), have=human_bytes(have),
                     world=dist.world_size, shard=human_bytes(shard))


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
    table = {None: None, "": None, "no": None, "fp32": None, "bf16": torch.bfloat16,
             "fp16": torch.float16}
    if mixed_precision not in table:
        raise AuraError(M("bad_precision", value=mixed_precision))
    return table[mixed_precision]


def parallelize(model: torch.nn.Module, *, dist: DistInfo, strategy: str = "auto",
                gradient_checkpointing: bool = False, compile: bool = False,
                mixed_precision: str | None = None, reshard_after_forward: bool = True,
                find_unused_parameters: bool = False,
                device_memory: int | None = None) -> torch.nn.Module:
    """Wrap ``model`` for training on ``dist``: activation checkpointing -> compile -> FSDP2 or DDP.

    Returns the module to train (DDP wrapper, the FSDP2-sharded model itself, or the plain model),
    moved to ``dist.device``. ``mixed_precision`` (bf16/fp16) sets FSDP2's parameter dtype with fp32
    gradient reduction; under DDP autocast in the loop does that job. Build the optimizer afterwards.
    """
    dtype = _precision_dtype(mixed_precision)
    chosen, reason = choose_strategy(model, dist=dist, strategy=strategy, device_memory=device_memory)
    console.info(M("strategy", strategy=M("strategy_none") if chosen == "none" else chosen, reason=reason))
    blocks = find_blocks(model)
    if gradient_checkpointing:
        _apply_checkpointing(model, blocks)
    if compile:
        for block in blocks or [model]:
            block.compile()  # in place: parameter names and state_dict keys do not change
    if chosen == "fsdp":
        from torch.distributed.device_mesh import init_device_mesh

        _, MixedPrecisionPolicy, fully_shard = _fsdp_api()
        mesh = init_device_mesh(dist.device.type, (dist.world_size,))
        mp = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32) if dtype else \
            MixedPrecisionPolicy()
        for i, block in enumerate(blocks):
            # the last block's parameters are needed again at once by backward: keep them gathered
            fully_shard(block, mesh=mesh, mp_policy=mp,
                        reshard_after_forward=reshard_after_forward and i < len(blocks) - 1)
        fully_shard(model, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard_after_forward)
        return model
    model.to(dist.device)
    if chosen == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        ids = [dist.device.index] if dist.device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids,
                                       find_unused_parameters=find_unused_parameters)
    return model


def strategy_of(model: torch.nn.Module) -> str:
    """"ddp", "fsdp" or "none": how ``parallelize`` wrapped this model."""
    from torch.nn.parallel import DistributedDataParallel

    if isinstance(model, DistributedDataParallel):
        return "ddp"
    return "fsdp" if isinstance(model, _fsdp_api()[0]) else "none"


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The user's model inside a DDP wrapper or ``torch.compile`` (FSDP2 shards in place)."""
    inner = getattr(model, "module", model) if strategy_of(model) == "ddp" else model
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


def _replicated_params(model: torch.nn.Module):
    from torch.distributed.tensor import DTensor

    for name, p in unwrap(model).named_parameters():
        if not isinstance(p, DTensor):  # FSDP2 shards are different on every rank by design
            yield name, p


def sync_check(model: torch.nn.Module, dist: DistInfo) -> bool:
    """True when every rank holds the same weights (the guides' ``Sync=OK``); AuraError otherwise.

    One float64 sum per parameter tensor (no copy of the weights), all-gathered and compared with
    rank 0's bit for bit: DDP keeps replicas identical, so any difference is a real divergence.
    """
    if not dist.is_distributed or dist.world_size == 1:
        return True
    named = list(_replicated_params(model))
    with torch.no_grad():
        sums = [p.sum(dtype=torch.float64) for _, p in named]
        local = (torch.stack(sums) if sums else torch.zeros(0, dtype=torch.float64)).to(dist.comm_device)
    gathered = [torch.empty_like(local) for _ in range(dist.world_size)]
    torch.distributed.all_gather(gathered, local)
    ref = gathered[0]
    bad = [r for r in range(1, dist.world_size) if not torch.equal(gathered[r], ref)]
    if bad:
        diff = (gathered[bad[0]] != ref).nonzero()
        param = named[int(diff[0])][0] if len(diff) else "?"
        raise AuraError(M("desync", ranks=", ".join(map(str, bad)), param=param))
    return True


def sync_status(model: torch.nn.Module, dist: DistInfo) -> str | None:
    """The ``Sync=`` field of a log line (collective: every rank calls it at the same step).

    None for one process; "OK" after a real ``sync_check`` of DDP replicas (AuraError if they
    diverge); "FSDP" under FSDP2, whose ranks hold different shards by design, so there is nothing
    to compare; "n/a" for a DeepSpeed engine, whose ZeRO-3 parameters are partitions this check
    cannot compare.
    """
    if not dist.is_distributed or dist.world_size == 1:
        return None
    kind = strategy_of(model)
    if kind == "fsdp":
        return "FSDP"
    if type(model).__name__ == "DeepSpeedEngine":  # ZeRO-3 parameters are empty partitions here
        return "n/a"
    sync_check(model, dist)  # DDP, or unwrapped replicas (--strategy none), which must agree too
    return "OK"


@contextlib.contextmanager
def main_process_first(dist: DistInfo) -> Iterator[None]:
    """Rank 0 runs the block first (downloads, caches, tokenising); the others follow it."""
    if not dist.is_main:
        dist.barrier()
    try:
        yield
    finally:
        if dist.is_main:
            dist.barrier()
