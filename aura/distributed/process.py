"""torchrun environment -> ``DistInfo``; process-group set-up and tear-down.

Under torchrun (RANK, WORLD_SIZE, LOCAL_RANK in the environment) ``init_distributed`` joins the
process group with NCCL when CUDA is there, gloo otherwise. If NCCL cannot start (WSL2 without NCCL, a
driver too old) ``auto`` falls back to gloo with a warning only where every node runs one GPU (a LAN of
PCs: the network bounds the speed either way); a node with several GPUs is refused (gloo would route their
traffic through the CPU, ~10x slower) unless ``--backend gloo`` asks for it. Without torchrun it
returns a single-process ``DistInfo`` and every collective is a no-op, so the training loop has one
code path. Model code knows nothing of this; parallelism is applied from outside (``parallel``).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import socket
from dataclasses import dataclass
from typing import Iterator

import torch

from aura.core import console
from aura.core.errors import AuraError
from aura.core.i18n import Messages
from aura.distributed.launcher import SHARE_GPU_ENV

M = Messages(
    "distributed",
    {
        "nccl_fallback": (
            "NCCL no pudo inicializarse ({err}); se usa gloo (cada nodo tiene una GPU: la red marca "
            "la velocidad en ambos casos).",
            "NCCL failed to initialise ({err}); using gloo (every node has one GPU: the network "
            "bounds the speed either way).",
        ),
        "nccl_unavailable": (
            "Se pidió --backend nccl pero esta instalación de PyTorch no tiene NCCL o no hay "
            "GPU CUDA. Usa --backend gloo o auto.",
            "--backend nccl was requested but this PyTorch has no NCCL or there is no CUDA "
            "GPU. Use --backend gloo or auto.",
        ),
        "mode": (
            "Modo distribuido. Backend={backend}. Procesos={world}. Sincronizando...",
            "Distributed mode. Backend={backend}. World size={world}. Synchronising...",
        ),
        "peer_failed": ("falló en otro proceso", "it failed on another rank"),
        "agreed": (
            "Los {world:proceso|procesos} planifican con el dispositivo más pequeño: {name}, {mem:.1f} GiB "
            "por proceso, capacidad {cap}; todas las decisiones de `auto` parten de él.",
            "The {world:rank|ranks} plan with the smallest device: {name}, {mem:.1f} GiB per rank, "
            "capability {cap}; every `auto` decision starts from it.",
        ),
        "share_nccl": (
            "--share-gpu pone varios procesos en una GPU y NCCL no lo admite: usa --backend gloo o auto.",
            "--share-gpu puts several ranks on one GPU and NCCL does not allow it: use --backend gloo or auto.",
        ),
        "shared": (
            "Modo de prueba (--share-gpu): {local:proceso comparte|procesos comparten} {devices:GPU|GPUs} "
            "por gloo. Sirve para probar el código de varios procesos, no para ir rápido.",
            "Test mode (--share-gpu): {local:rank shares|ranks share} {devices:GPU|GPUs} over gloo. It "
            "tests multi-rank code; it is not fast.",
        ),
        "oversubscribed": (
            "{local:proceso|procesos} por nodo pero solo {devices:GPU visible|GPUs visibles}: NCCL no "
            "admite dos procesos en una GPU. Usa --gpus-per-node {devices}, o, para probar el código "
            "de varios procesos en una sola GPU, 'aura launch --share-gpu' (gloo, lento).",
            "{local:rank|ranks} per node but only {devices:visible GPU|visible GPUs}: NCCL does not "
            "allow two ranks on one GPU. Use --gpus-per-node {devices}, or, to test multi-rank code "
            "on one GPU, 'aura launch --share-gpu' (gloo, slow).",
        ),
        "gloo_refused": (
            "NCCL no está disponible en todos los procesos ({why}) y un nodo tiene varias GPU: con gloo "
            "las GPU de un mismo nodo se comunican pasando por la CPU, unas 10 veces más lento. "
            "Arregla NCCL (NCCL_DEBUG=INFO dice por qué falla; 'aura doctor' lo comprueba) o, si "
            "aceptas la lentitud, pide gloo explícitamente con --backend gloo.",
            "NCCL is not available on every rank ({why}) and a node has several GPUs: with gloo the "
            "GPUs of one node talk through the CPU, about 10x slower. Fix NCCL (NCCL_DEBUG=INFO says "
            "why it fails; 'aura doctor' checks it) or, if you accept the slowdown, ask for gloo "
            "explicitly with --backend gloo.",
        ),
        "no_nccl_here": ("esta instalación de PyTorch no tiene NCCL", "this PyTorch has no NCCL"),
        "bad_backend": (
            "Backend desconocido '{backend}': usa auto, nccl o gloo.",
            "Unknown backend '{backend}': use auto, nccl or gloo.",
        ),
    },
)


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
        """In-place all_reduce (sum, max, min or avg) that is a no-op outside torchrun. A tensor on another
        device than the backend's (a CPU number under NCCL, which has no CPU transport) travels through
        ``comm_device`` and comes back: 'No backend type associated with device type cpu' otherwise."""
        if self.is_distributed:
            ops = {
                "sum": torch.distributed.ReduceOp.SUM,
                "max": torch.distributed.ReduceOp.MAX,
                "min": torch.distributed.ReduceOp.MIN,
            }
            moved = tensor.to(self.comm_device)
            torch.distributed.all_reduce(moved, op=ops["sum" if op == "avg" else op])
            if op == "avg":
                moved /= self.world_size
            if moved is not tensor:
                tensor.copy_(moved)
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


def gpu_sharing_backend(
    backend: str, *, share: bool, local_world: int, devices: int, explicit_device: bool = False
) -> str:
    """The backend a CUDA rank may use given how many ranks its node runs on how many GPUs.

    NCCL refuses two ranks on one GPU, gloo does not: ``aura launch --share-gpu`` (``AURA_SHARE_GPU``) runs
    several ranks on one GPU over gloo, to test multi-rank code on a single card; never chosen by itself.
    Without it, more ranks than GPUs on a node (an explicit ``--device`` aside) is refused before any
    process group starts, naming the two fixes."""
    if share:
        if backend == "nccl":
            raise AuraError(M("share_nccl"))
        return "gloo"
    if local_world > devices and not explicit_device:
        raise AuraError(M("oversubscribed", local=local_world, devices=devices))
    return backend


def init_distributed(*, backend: str = "auto", device: str = "auto", timeout_s: float = 1800.0) -> DistInfo:
    """Join the torchrun process group (or return a single-process DistInfo)."""
    if backend not in ("auto", "nccl", "gloo"):
        raise AuraError(M("bad_backend", backend=backend))
    if not under_torchrun():
        dev = pick_device(0, device)
        if dev.type == "cuda":  # --device cuda:N: kernels, NCCL and memory stats all follow the current device
            torch.cuda.set_device(dev)
        return DistInfo(device=dev)
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    dev = pick_device(local_rank, device)
    share = False
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
        share = os.environ.get(SHARE_GPU_ENV) == "1"
        backend = gpu_sharing_backend(
            backend,
            share=share,
            local_world=local_world,
            devices=torch.cuda.device_count(),
            explicit_device=device != "auto",
        )
    if backend == "nccl" and not _local_nccl_ok(dev):
        raise AuraError(M("nccl_unavailable"))
    chosen = backend
    if not torch.distributed.is_initialized():
        chosen, rank, world = _join(
            backend,
            dev=dev,
            rank=rank,
            world=world,
            local_world=local_world,
            timeout=datetime.timedelta(seconds=timeout_s),
        )
    if share:
        console.warn(M("shared", local=local_world, devices=torch.cuda.device_count()))
    else:
        chosen = torch.distributed.get_backend()
    info = DistInfo(rank=rank, world_size=world, local_rank=local_rank, device=dev, backend=chosen)
    console.set_prefix(info.prefix)
    console.info(M("mode", backend=chosen, world=world))
    return info


def _join(backend: str, *, dev, rank: int, world: int, local_world: int, timeout) -> tuple[str, int, int]:
    """(backend, rank, world) after joining torchrun's group: NCCL or gloo as asked; ``auto`` takes NCCL when every
    rank has it and its probe works on every rank, else gloo (refused on a node with several GPUs)."""
    from torch.distributed import PrefixStore
    from torch.distributed.rendezvous import rendezvous

    chosen = backend
    store, rank, world = next(rendezvous("env://", rank=rank, world_size=world, timeout=timeout))
    store.set_timeout(timeout)
    # torchrun's static rendezvous keeps one store across --max-restarts: without a per-attempt
    # prefix the restarted group reads the dead group's gloo addresses and hangs in init.
    store = PrefixStore(f"aura/attempt-{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", store)
    # gloo for a node's several GPUs goes through the CPU (~10x slower than NCCL): only when asked for
    several_gpus = dev.type == "cuda" and local_world > 1
    why = None
    if backend == "auto":
        here = _local_nccl_ok(dev)
        chosen = "nccl" if _all_ranks_agree(store, "nccl", here, rank=rank, world=world) else "gloo"
        if chosen == "gloo":
            why = M("no_nccl_here") if not here else M("peer_failed")
    error = None
    if chosen == "nccl":
        try:
            torch.distributed.init_process_group(
                backend="nccl",
                store=PrefixStore("default_pg", store),
                rank=rank,
                world_size=world,
                timeout=timeout,
                device_id=dev,
            )
            probe = torch.ones(1, device=dev)  # NCCL initialises lazily: force it now
            torch.distributed.all_reduce(probe)
        except Exception as err:  # noqa: BLE001 - any NCCL failure means: try gloo
            if backend == "nccl":
                raise
            error = err
        if backend == "auto" and not _all_ranks_agree(store, "nccl_probe", error is None, rank=rank, world=world):
            why = str(error).splitlines()[0][:200] if error else M("peer_failed")
            if torch.distributed.is_initialized():
                torch.distributed.destroy_process_group()
            chosen = "gloo"
    if why is not None:  # auto ends on gloo: refused on every rank when a node has several GPUs
        if not _all_ranks_agree(store, "gloo_ok", not several_gpus, rank=rank, world=world):
            raise AuraError(M("gloo_refused", why=why))
        if error is not None or (chosen == "gloo" and dev.type == "cuda"):
            console.warn(M("nccl_fallback", err=why))
    if chosen == "gloo":
        torch.distributed.init_process_group(
            backend="gloo", store=PrefixStore("aura_gloo", store), rank=rank, world_size=world, timeout=timeout
        )
    return chosen, rank, world


def teardown(info: DistInfo) -> None:
    if info.is_distributed and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


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


def rank_memory_bytes(info, dist: DistInfo) -> int:
    """Memory one rank can use: the device's, or this node's RAM split between its local ranks."""
    if info.device_type != "cpu":
        return int(info.memory_bytes)
    local = int(os.environ.get("LOCAL_WORLD_SIZE", dist.world_size))
    return int(info.memory_bytes) // max(local, 1)


def agree_hardware(info, dist: DistInfo):
    """The ``HardwareInfo`` every rank plans with: rank 0 gathers each rank's view, takes the smallest
    device (least memory per rank, lowest compute capability, bf16 only if every rank has it), and
    broadcasts it, so `auto` (preset, batch, checkpointing, precision, strategy, attention) decides the
    same thing everywhere. One process: ``info`` unchanged. Printed once, by rank 0."""
    import dataclasses

    if not dist.is_distributed or dist.world_size == 1:
        return info
    mine = dataclasses.replace(info, memory_bytes=rank_memory_bytes(info, dist), cpu_flags=())
    views: list = [None] * dist.world_size
    torch.distributed.all_gather_object(views, mine)
    agreed = None
    if dist.is_main:
        smallest = min(views, key=lambda v: (v.memory_bytes, v.capability or (99, 0), v.name))
        caps = [v.capability for v in views if v.capability is not None]
        agreed = dataclasses.replace(
            smallest,
            bf16=all(v.bf16 for v in views),
            fp16=all(v.fp16 for v in views),
            flash_attn=all(v.flash_attn for v in views),
            capability=min(caps) if caps else None,
            count=min(v.count for v in views),
        )
        cap = "{}.{}".format(*agreed.capability) if agreed.capability else "-"
        console.info(M("agreed", world=dist.world_size, name=agreed.name, mem=agreed.memory_bytes / 1024**3, cap=cap))
    return dist.broadcast_object(agreed)
