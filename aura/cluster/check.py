"""``aura check-dist``: can these processes talk to each other, and how fast?

Run it under torchrun (``aura launch check-dist`` on every node) before a long training run. Every
rank prints backend, world size, rank, host and device, and checks an all_reduce whose answer is
known (rank r contributes r + 1, so the sum must be W(W+1)/2); then it measures all_reduce bandwidth
on a buffer of ``--size-mb`` MB (algbw = bytes / time; busbw = algbw * 2(W-1)/W, as nccl-tests
report it). A failure ends with a diagnosis mapped from the real error text (``aura.cluster.diagnose``).
Without torchrun it says how to launch it and checks the backend on a single rank.

With ``--model-preset`` it also measures the latency (all_reduce of one number) and says, for that
preset's gradients on this link, how long each communication mode takes per optimizer step and which
to use (``advise``): plain DDP, ``--ddp-comm bf16``, ``--ddp-comm powersgd`` or ``--local-steps H``.
The per-step times are computed from the measured latency and bandwidth (a ring all-reduce moves
2(W-1)/W of the bytes per rank), not measured with the model; the compute time of a step is
``--step-seconds`` (take it from a one-node run's log).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from aura.cluster.diagnose import diagnose
from aura.core import console
from aura.core.config import arg
from aura.core.errors import AuraError
from aura.core.i18n import Messages, num

M = Messages(
    "dist_check",
    {
        "bad_size": (
            "--size-mb debe ser mayor que 0 (recibido {value}).",
            "--size-mb must be greater than 0 (got {value}).",
        ),
        "bad_iters": ("--iters debe ser al menos 1 (recibido {value}).", "--iters must be at least 1 (got {value})."),
        "bad_timeout": (
            "--timeout debe ser mayor que 0 segundos (recibido {value}).",
            "--timeout must be greater than 0 seconds (got {value}).",
        ),
        "no_torchrun": (
            "No se está ejecutando bajo torchrun: se prueba un solo proceso. Para probar varios "
            "procesos o nodos: 'aura launch check-dist' (con NNODES, NODE_RANK, MASTER_ADDR, "
            "MASTER_PORT y GPUS_PER_NODE en cada nodo) o 'torchrun --nproc_per_node=2 -m aura "
            "check-dist'.",
            "Not running under torchrun: checking a single process. To check several processes "
            "or nodes: 'aura launch check-dist' (with NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT "
            "and GPUS_PER_NODE on every node) or 'torchrun --nproc_per_node=2 -m aura check-dist'.",
        ),
        "rank_line": (
            "Backend={backend} | Procesos={world} | Rango={rank} | Nodo={host} | Dispositivo={device} "
            "| all_reduce={got:g} (esperado {expected:g}) {status}",
            "Backend={backend} | World size={world} | Rank={rank} | Host={host} | Device={device} "
            "| all_reduce={got:g} (expected {expected:g}) {status}",
        ),
        "bandwidth": (
            "all_reduce de {size}: {ms:.2f} ms/iter | algbw {alg} | busbw {bus}",
            "all_reduce of {size}: {ms:.2f} ms/iter | algbw {alg} | busbw {bus}",
        ),
        "table": ("Procesos del trabajo", "Ranks in the job"),
        "nccl_fallback": ("NCCL no arrancó ({err}); se usa gloo.", "NCCL did not start ({err}); using gloo."),
        "h_rank": ("rango", "rank"),
        "h_device": ("dispositivo", "device"),
        "h_host": ("máquina", "host"),
        "h_local_rank": ("rango local", "local_rank"),
        "wrong_sum": (
            "El all_reduce dio {got:g} en lugar de {expected:g} en los rangos {ranks}: la "
            "comunicación corrompe datos. Prueba --backend gloo y revisa NCCL_DEBUG=INFO.",
            "all_reduce returned {got:g} instead of {expected:g} on ranks {ranks}: communication "
            "corrupts data. Try --backend gloo and check NCCL_DEBUG=INFO.",
        ),
        "passed": (
            "Comunicación correcta entre {world:proceso|procesos} en {nodes:nodo|nodos} (Sync=OK). Ancho de banda "
            "del más lento: algbw {alg} | busbw {bus}.",
            "Communication OK between {world:rank|ranks} on {nodes:node|nodes} (Sync=OK). Slowest rank's "
            "bandwidth: algbw {alg} | busbw {bus}.",
        ),
        "failed": ("La prueba distribuida falló: {err}", "The distributed check failed: {err}"),
        "link": (
            "Enlace: latencia {lat:.2f} ms | ancho de banda por proceso {gbit:.2f} Gbit/s (busbw del más lento)",
            "Link: latency {lat:.2f} ms | bandwidth per rank {gbit:.2f} Gbit/s (slowest rank's busbw)",
        ),
        "advice_title": (
            "{preset}: {mb:,} MB de gradientes fp32 por paso entre {world:proceso|procesos} (tiempos "
            "calculados con la latencia y el ancho de banda medidos; cómputo de {step:g} s por paso)",
            "{preset}: {mb:,} MB of fp32 gradients per step between {world:rank|ranks} (times computed "
            "from the measured latency and bandwidth; {step:g} s of compute per step)",
        ),
        "h_mode": ("modo", "mode"),
        "h_comm": ("comunicación por paso", "communication per step"),
        "h_share": ("parte del paso", "share of the step"),
        "advice_plain": (
            "Comunicación despreciable: entrena con DDP normal (sin --ddp-comm).",
            "Communication is negligible: train with plain DDP (no --ddp-comm).",
        ),
        "advice_use": (
            "{gbit:.2f} Gbit/s: ~{plain:.1f} s por paso de all-reduce con {preset}; usa {use}.",
            "{gbit:.2f} Gbit/s: ~{plain:.1f} s per step in all-reduce with {preset}; use {use}.",
        ),
        "or": ("{a} o {b}", "{a} or {b}"),
        "bad_preset": (
            "Preset desconocido '{value}' en --model-preset: usa uno de {names}.",
            "Unknown preset '{value}' in --model-preset: use one of {names}.",
        ),
        "bad_step": (
            "--step-seconds debe ser mayor que 0 (recibido {value}).",
            "--step-seconds must be greater than 0 (got {value}).",
        ),
        "unknown_cause": (
            "Causa no reconocida: ejecuta con --debug y TORCH_DISTRIBUTED_DEBUG=DETAIL para más detalle.",
            "Cause not recognised: run with --debug and TORCH_DISTRIBUTED_DEBUG=DETAIL for more detail.",
        ),
    },
)


@dataclass
class CheckDistConfig:
    backend: Literal["auto", "nccl", "gloo"] = arg(
        "auto",
        es="Backend: auto (NCCL con CUDA, si no gloo), nccl o gloo.",
        en="Backend: auto (NCCL with CUDA, else gloo), nccl or gloo.",
    )
    size_mb: float = arg(
        64.0,
        es="Tamaño en MB del búfer para medir el ancho de banda.",
        en="Size in MB of the buffer used to measure bandwidth.",
    )
    iters: int = arg(10, es="Repeticiones medidas de all_reduce.", en="Timed all_reduce repetitions.")
    timeout: float = arg(
        60.0, es="Segundos de espera máxima por los demás procesos.", en="Seconds to wait for the other ranks at most."
    )
    device: str = arg("auto", es="Dispositivo: auto, cpu, cuda.", en="Device: auto, cpu, cuda.")
    model_preset: str | None = arg(
        None,
        es="Preset que se va a entrenar: di qué modo de comunicación conviene "
        "en este enlace (--ddp-comm, --local-steps).",
        en="Preset you will train: say which communication mode suits this link (--ddp-comm, --local-steps).",
    )
    step_seconds: float = arg(
        1.0,
        es="Segundos de cómputo de un paso de optimización (del log de una ejecución "
        "en un nodo), para el consejo de --model-preset.",
        en="Seconds of compute per optimizer step (from a one-node run's log), for --model-preset's advice.",
    )
    vocab_size: int = arg(
        32000, es="Vocabulario del modelo de --model-preset.", en="Vocabulary of --model-preset's model."
    )
    advice_out: str | None = arg(
        None,
        es="Escribe el enlace medido y el consejo de --model-preset en este "
        "archivo JSON (lo escribe el primer proceso de cada nodo; lo aplica "
        "'comm: auto' de aura pipeline).",
        en="Write the measured link and --model-preset's advice to this JSON file "
        "(the first process of every node writes it; aura pipeline's 'comm: auto' "
        "applies it).",
    )

    def __post_init__(self):
        from aura.models.presets import PRESETS

        if self.model_preset is not None and self.model_preset not in PRESETS:
            raise AuraError(M("bad_preset", value=self.model_preset, names=", ".join(PRESETS)))
        if self.step_seconds <= 0:
            raise AuraError(M("bad_step", value=self.step_seconds))
        if self.size_mb <= 0:
            raise AuraError(M("bad_size", value=self.size_mb))
        if self.iters < 1:
            raise AuraError(M("bad_iters", value=self.iters))
        if self.timeout <= 0:
            raise AuraError(M("bad_timeout", value=self.timeout))


def _rate(bytes_per_s: float) -> str:
    return f"{num(bytes_per_s / 1e9, '.2f')} GB/s" if bytes_per_s >= 1e9 else f"{num(bytes_per_s / 1e6, '.1f')} MB/s"


def _single_process(cfg: CheckDistConfig):
    """A one-process group on an in-process store: no TCP port is opened (torchrun's store would listen
    on every interface)."""
    import datetime

    import torch
    from torch.distributed import HashStore

    from aura.distributed import process as D

    dev = D.pick_device(0, cfg.device)
    timeout = datetime.timedelta(seconds=cfg.timeout)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    nccl_ok = dev.type == "cuda" and torch.distributed.is_nccl_available()
    if cfg.backend == "nccl" and not nccl_ok:
        raise AuraError(D.M("nccl_unavailable"))
    if cfg.backend == "nccl" or (cfg.backend == "auto" and nccl_ok):
        try:
            torch.distributed.init_process_group(
                "nccl", store=HashStore(), rank=0, world_size=1, timeout=timeout, device_id=dev
            )
            torch.distributed.all_reduce(torch.ones(1, device=dev))  # NCCL starts lazily: make it start now
            return D.DistInfo(rank=0, world_size=1, local_rank=0, device=dev, backend="nccl")
        except Exception as err:  # noqa: BLE001 - auto falls back to gloo, as a torchrun job does
            if cfg.backend == "nccl":
                raise
            console.warn(M("nccl_fallback", err=str(err).splitlines()[0][:200] if str(err) else type(err).__name__))
            if torch.distributed.is_initialized():
                torch.distributed.destroy_process_group()
    torch.distributed.init_process_group("gloo", store=HashStore(), rank=0, world_size=1, timeout=timeout)
    return D.DistInfo(rank=0, world_size=1, local_rank=0, device=dev, backend="gloo")


def _failure(err: BaseException) -> AuraError:
    text = f"{type(err).__name__}: {err}"
    lines = diagnose(
        text,
        addr=os.environ.get("MASTER_ADDR", "MASTER_ADDR"),
        port=os.environ.get("MASTER_PORT", "MASTER_PORT"),
        expected=int(os.environ.get("WORLD_SIZE", 0)) or None,
    )
    first = next((ln.strip() for ln in str(err).splitlines() if ln.strip()), type(err).__name__)
    return AuraError(M("failed", err=first[:400]), hint="\n".join(lines) or M("unknown_cause"), exit_code=1)


def _run(cfg: CheckDistConfig, info) -> None:
    """Every rank: who is where, the sum check, the bandwidth, then (``--model-preset``) the link's advice."""
    import torch

    peers: list = [None] * info.world_size
    torch.distributed.all_gather_object(peers, (info.rank, info.node, str(info.device), info.local_rank))
    if info.is_main:
        console.table(M("table"), [M("h_rank"), M("h_host"), M("h_device"), M("h_local_rank")], peers)
    _check_sum(info)
    nodes = len({p[1] for p in peers})
    nbytes, slowest = _bandwidth(cfg, info, nodes=nodes)
    if cfg.model_preset and info.world_size > 1:
        _advice(cfg, info, nbytes=nbytes, slowest=slowest, nodes=nodes)


def _check_sum(info) -> None:
    """all_reduce of each rank's number: every rank must get 1 + 2 + ... + world, else the command fails."""
    import torch

    world, dev = info.world_size, info.comm_device
    expected = world * (world + 1) / 2
    t = torch.full((1,), float(info.rank + 1), dtype=torch.float32, device=dev)
    torch.distributed.all_reduce(t)
    got = float(t.item())
    console.always(
        M(
            "rank_line",
            backend=info.backend,
            world=world,
            rank=info.rank,
            host=info.node,
            device=info.device,
            got=got,
            expected=expected,
            status="OK" if got == expected else "FAIL",
        )
    )
    oks = [None] * world
    torch.distributed.all_gather_object(oks, got == expected)
    if not all(oks):
        bad = ", ".join(str(r) for r, ok in enumerate(oks) if not ok)
        raise AuraError(M("wrong_sum", got=got, expected=expected, ranks=bad), exit_code=1)


def _bandwidth(cfg: CheckDistConfig, info, *, nodes: int) -> tuple[int, float]:
    """(bytes per all_reduce, the slowest rank's seconds per all_reduce) of ``--size-mb``, printed."""
    import torch

    world, dev = info.world_size, info.comm_device
    nbytes = int(cfg.size_mb * 1e6) // 4 * 4
    buf = torch.ones(nbytes // 4, dtype=torch.float32, device=dev)  # (N,)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    for _ in range(2):  # warm-up: connection set-up and allocator
        torch.distributed.all_reduce(buf)
    sync()
    info.barrier()
    start = time.perf_counter()
    for _ in range(cfg.iters):
        torch.distributed.all_reduce(buf)
    sync()
    per_iter = (time.perf_counter() - start) / cfg.iters
    slowest = info.all_reduce(torch.tensor([per_iter], dtype=torch.float64), "max").item()
    factor = 2 * (world - 1) / world
    alg = _rate(nbytes / per_iter)
    bus = _rate(nbytes / per_iter * factor) if world > 1 else "n/a"
    console.always(M("bandwidth", size=f"{nbytes / 1e6:g} MB", ms=per_iter * 1e3, alg=alg, bus=bus))
    if info.is_main:
        console.success(
            M(
                "passed",
                world=world,
                nodes=nodes,
                alg=_rate(nbytes / slowest),
                bus=_rate(nbytes / slowest * factor) if world > 1 else "n/a",
            )
        )
    return nbytes, slowest


def _advice(cfg: CheckDistConfig, info, *, nbytes: int, slowest: float, nodes: int) -> None:
    """The link's latency and bus bandwidth -> the slow-link settings for ``--model-preset``, decided on rank 0
    for every node and written to ``--advice-out``."""
    world = info.world_size
    latency = _latency(info, cfg.iters)
    busbw = nbytes * 2 * (world - 1) / world / max(slowest - latency, 1e-9)
    decided = None
    if info.is_main:
        console.info(M("link", lat=latency * 1e3, gbit=busbw * 8 / 1e9))
        line = advise(
            cfg.model_preset,
            world=world,
            latency_s=latency,
            busbw=busbw,
            step_s=cfg.step_seconds,
            vocab_size=cfg.vocab_size,
        )
        decided = dict(
            choose(
                cfg.model_preset,
                world=world,
                latency_s=latency,
                busbw=busbw,
                step_s=cfg.step_seconds,
                vocab_size=cfg.vocab_size,
            ),
            advice=line,
            latency_ms=latency * 1e3,
            gbit=busbw * 8 / 1e9,
            world=world,
            nodes=nodes,
            preset=cfg.model_preset,
            step_seconds=cfg.step_seconds,
        )
    decided = info.broadcast_object(decided)  # one decision, made on rank 0, for every node
    if cfg.advice_out and info.local_rank == 0:
        from aura.core.atomic import atomic_write_json

        atomic_write_json(Path(cfg.advice_out), decided)


def _latency(info, iters: int) -> float:
    """Seconds of an all_reduce of one number (the slowest rank's)."""
    import torch

    one = torch.zeros(1, device=info.comm_device)
    for _ in range(3):
        torch.distributed.all_reduce(one)
    info.barrier()
    start = time.perf_counter()
    for _ in range(max(iters, 10)):
        torch.distributed.all_reduce(one)
    per = (time.perf_counter() - start) / max(iters, 10)
    return info.all_reduce(torch.tensor([per], dtype=torch.float64), "max").item()


_BUCKET = 25 * 2**20  # DDP's default bucket: one all-reduce each (three under PowerSGD)
_POWERSGD_RANK = 4  # --powersgd-rank's default


def comm_times(
    preset: str, *, world: int, latency_s: float, busbw: float, vocab_size: int = 32000, rank: int = _POWERSGD_RANK
) -> tuple[int, dict[str, float]]:
    """(gradient bytes per step, {mode: seconds of communication per optimizer step}), computed:
    a ring all-reduce of B bytes takes latency + B * 2(W-1)/W / busbw, once per DDP bucket."""
    import math

    from aura.distributed.comm_hooks import powersgd_ratio
    from aura.models.presets import PRESETS, build_model

    # shapes only: nothing is allocated nor initialised (build_model's own device wins over a `with
    # torch.device` around it: on the CPU default, gpt2-medium took ~20 s of random init per call)
    model = build_model(PRESETS[preset], vocab_size, device="meta")
    nbytes = sum(p.numel() for p in model.parameters() if p.requires_grad) * 4
    buckets = max(1, math.ceil(nbytes / _BUCKET))
    wire = 2 * (world - 1) / world / busbw
    plain = buckets * latency_s + nbytes * wire
    return nbytes, {
        "none": plain,
        "bf16": buckets * latency_s + nbytes / 2 * wire,
        "powersgd": 3 * buckets * latency_s + nbytes / powersgd_ratio(model, rank) * wire,
    }


def local_steps_for(plain_s: float, step_s: float, share: float = 0.25) -> int:
    """The smallest power of two H (at least 4) that keeps a plain all-reduce every H steps under
    ``share`` of the compute."""
    h = 4
    while plain_s / h > share * step_s and h < 1024:
        h *= 2
    return h


def choose(preset: str, *, world: int, latency_s: float, busbw: float, step_s: float, vocab_size: int = 32000) -> dict:
    """The mode ``advise`` recommends, as training flags: the first of plain DDP, bf16 and PowerSGD whose
    communication takes at most 10 % of ``step_s``; when none does, PowerSGD while it stays within 25 % of the
    step (the share ``--local-steps H`` is sized for), else ``--local-steps H`` (the slowest links).
    ``{"mode": ..., "flags": {"ddp_comm": ...} or {"local_steps": H}, "comm_seconds": ...}``."""
    _, times = comm_times(preset, world=world, latency_s=latency_s, busbw=busbw, vocab_size=vocab_size)
    h = local_steps_for(times["none"], step_s)
    fits = [m for m in ("none", "bf16", "powersgd") if times[m] <= 0.1 * step_s]
    if fits:
        mode = fits[0]
    else:
        mode = "powersgd" if times["powersgd"] <= 0.25 * step_s else "local-steps"
    flags = {"local_steps": h} if mode == "local-steps" else {"ddp_comm": mode}
    return {"mode": mode, "flags": flags, "comm_seconds": times["none"] / h if mode == "local-steps" else times[mode]}


def advise(preset: str, *, world: int, latency_s: float, busbw: float, step_s: float, vocab_size: int = 32000) -> str:
    """Print the per-mode table and the advice for ``preset`` on this link; returns the advice line."""
    nbytes, times = comm_times(preset, world=world, latency_s=latency_s, busbw=busbw, vocab_size=vocab_size)
    h = local_steps_for(times["none"], step_s)
    times[f"local-steps {h}"] = times["none"] / h
    names = {
        "none": "DDP",
        "bf16": "--ddp-comm bf16",
        "powersgd": f"--ddp-comm powersgd (rank {_POWERSGD_RANK})",
        f"local-steps {h}": f"--local-steps {h}",
    }
    rows = [[names[m], f"{num(t, '.2f')} s", f"{num(100 * t / (t + step_s), '.0f')} %"] for m, t in times.items()]
    console.table(
        M("advice_title", preset=preset, mb=round(nbytes / 1e6), world=world, step=step_s),
        [M("h_mode"), M("h_comm"), M("h_share")],
        rows,
    )
    gbit = busbw * 8 / 1e9
    fits = [m for m in ("none", "bf16", "powersgd") if times[m] <= 0.1 * step_s]
    if fits and fits[0] == "none":
        line = M("advice_plain")
    elif fits:
        line = M("advice_use", gbit=gbit, preset=preset, plain=times["none"], use=names[fits[0]])
    else:
        line = M(
            "advice_use",
            gbit=gbit,
            preset=preset,
            plain=times["none"],
            use=M("or", a=names["powersgd"].split(" (")[0], b=names[f"local-steps {h}"]),
        )
    console.info(line)
    return line


def check_dist(cfg: CheckDistConfig) -> int:
    from aura import distributed as D

    single = not D.under_torchrun()
    if single:
        console.info(M("no_torchrun"))
    try:
        info = (
            _single_process(cfg)
            if single
            else D.init_distributed(backend=cfg.backend, device=cfg.device, timeout_s=cfg.timeout)
        )
    except AuraError:
        raise
    except Exception as err:  # noqa: BLE001 - every failure gets a diagnosis
        raise _failure(err) from err
    try:
        _run(cfg, info)
    except AuraError:
        raise
    except Exception as err:  # noqa: BLE001
        raise _failure(err) from err
    finally:
        D.teardown(info)
    return 0
