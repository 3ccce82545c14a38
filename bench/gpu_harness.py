"""What the GPU suite's checks share (``bench/gpu_checks.py``): the check registry and its result, the context
(folder, device, prepared data), and Aura's own training step on random tokens timed with CUDA events after a
warm-up, with its memory peaks and a profile (top kernels, GPU idle share, the SDPA implementation that ran).
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "aura" / "resources" / "corpus_es"
GB = 1e9


@dataclass
class Result:
    figure: str
    ok: bool | None  # None: skipped (an optional package is missing, or the check is GPU-only in --cpu)
    target: str = ""
    metrics: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Check:
    name: str
    title: str
    fn: Callable
    timeout: float  # seconds on a GPU; --cpu gives every check cpu_timeout
    expect: float  # seconds it took on the H200 (2026-11-28): not started with less of the budget left
    cpu_timeout: float = 240
    cpu_expect: float = 1
    gpu_only: bool = False
    keep: bool = False  # its folder stays until the end (a later check reads it)


CHECKS: list[Check] = []


def check(
    name: str,
    title: str,
    *,
    timeout: float = 90,
    expect: float | None = None,
    cpu_timeout: float = 240,
    cpu_expect: float = 1,
    gpu_only: bool = False,
    keep: bool = False,
):
    def register(fn):
        CHECKS.append(
            Check(
                name,
                title,
                fn,
                timeout,
                timeout / 2 if expect is None else expect,
                cpu_timeout,
                cpu_expect,
                gpu_only,
                keep,
            )
        )
        return fn

    return register


class Context:
    """What every check shares: the suite's folder, the device, the prepared data and tokenizer."""

    def __init__(self, work: Path, *, cpu: bool):
        import torch

        self.work, self.cpu = work, cpu
        self.device = torch.device("cpu" if cpu else "cuda")
        self.precision = "fp32" if cpu else "bf16"
        self.tok, self.data = work / "setup" / "tok", work / "setup" / "data"

    def dir(self, name: str) -> Path:
        path = self.work / "checks" / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def aura(self, *args) -> int:
        """``aura ARGS`` in this process; its console lines go to the worker's log."""
        from aura.cli import main

        return main([str(a) for a in args])

    def aura_child(
        self, *args, timeout: float | None = 300, python: list[str] | None = None, env: dict | None = None
    ) -> subprocess.CompletedProcess:
        cmd = [*(python or [sys.executable, "-m", "aura"]), *map(str, args)]
        return subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, cwd=self.work, env={**os.environ, **(env or {})}
        )


def spec_of(ctx: Context, preset: str):
    from aura.models.presets import PRESETS, ModelSpec

    if ctx.cpu:  # the same family at a size a 2-core CI machine trains in seconds
        return ModelSpec(f"{preset} (tiny)", PRESETS[preset].arch, 128, 2, 4, 2, 128, 384)
    return PRESETS[preset]


def log_rows(run: Path, kind: str = "step") -> list[dict]:
    with open(run / "training_log.csv", newline="", encoding="utf-8") as f:
        return [r for r in csv.DictReader(f) if r["kind"] == kind]


def _gb(x: float | None) -> str:
    return "-" if x is None else f"{x / GB:.1f} GB"


# ---- Aura's training step on random tokens, timed ---------------------------------------------------------


@dataclass
class StepFigures:
    seconds_per_step: float
    tokens_per_s: float
    mfu: float | None
    peak_allocated: float | None
    peak_reserved: float | None
    profile: dict | None = None


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


class _Timer:
    """CUDA events on a GPU (the device's own clock, no host gaps counted twice), perf_counter on the CPU."""

    def __init__(self, device):
        import torch

        self.device = device
        self.events = [torch.cuda.Event(enable_timing=True) for _ in range(2)] if device.type == "cuda" else None

    def __enter__(self):
        if self.events:
            self.events[0].record()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        if self.events:
            self.events[1].record()
            self.events[1].synchronize()
            self.seconds = self.events[0].elapsed_time(self.events[1]) / 1000
        else:
            self.seconds = time.perf_counter() - self.t0


def build_for_steps(ctx: Context, spec, *, vocab: int, ckpt: bool = False, compile_: bool = False):
    """(model, its training FLOPs per token): Aura's model, built on the device and parallelised as
    ``aura pretrain`` does (one process: no wrapper)."""
    import torch

    from aura.distributed import DistInfo, parallelize
    from aura.models.presets import build_model, flops_per_token

    torch.manual_seed(0)
    model = build_model(spec, vocab, device=ctx.device)
    fpt = flops_per_token(model.config, spec.seq_len)
    model = parallelize(
        model,
        dist=DistInfo(device=ctx.device),
        strategy="auto",
        compile=compile_,
        gradient_checkpointing=ckpt,
        mixed_precision=None,
    )
    model.train()
    return model, fpt


def engine_for(ctx: Context, model, *, optimizer: str = "adamw", precision: str | None = None):
    from aura.distributed import DistInfo
    from aura.train.optim.step_engine import TorchEngine, build_optimizer

    args = SimpleNamespace(
        learning_rate=3e-4, adam_beta1=0.9, adam_beta2=0.95, adam_eps=1e-8, weight_decay=0.1, optimizer=optimizer
    )
    return TorchEngine(
        build_optimizer(model, args, ctx.device),
        precision=precision or ctx.precision,
        dist=DistInfo(device=ctx.device),
        max_grad_norm=1.0,
    )


def time_steps(
    ctx: Context,
    model,
    engine,
    *,
    fpt: float,
    batch: int,
    seq: int,
    vocab: int,
    accum: int = 1,
    warmup: int = 3,
    steps: int = 5,
    profile: bool = False,
) -> StepFigures:
    """Seconds per optimizer step of Aura's step over ``accum`` micro-batches of ``batch`` x ``seq`` random
    tokens, after ``warmup`` steps (compilation, cuBLAS heuristics, the allocator's first growth). Peaks are
    read over the timed steps only."""
    import torch

    from aura.distributed import DistInfo
    from aura.models.hardware import detect
    from aura.train.loop import optimizer_step

    dist = DistInfo(device=ctx.device)
    gen = torch.Generator().manual_seed(0)

    def window() -> list[dict]:
        return [
            {
                "input_ids": torch.randint(vocab, (batch, seq), generator=gen),  # (B, T)
                "shift_labels": torch.randint(vocab, (batch, seq), generator=gen),
            }
            for _ in range(accum)
        ]

    for _ in range(warmup):
        optimizer_step(model, engine, window(), lr=1e-4, dist=dist)
    _sync(ctx.device)
    if ctx.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(ctx.device)
    windows = [window() for _ in range(steps)]  # made before the clock starts
    with _Timer(ctx.device) as t:
        for w in windows:
            optimizer_step(model, engine, w, lr=1e-4, dist=dist)
    tokens = batch * seq * accum * steps
    peak = detect().peak_flops(engine.precision)
    fig = StepFigures(
        t.seconds / steps, tokens / t.seconds, fpt * tokens / t.seconds / peak if peak else None, *(_peaks(ctx.device))
    )
    if profile:
        try:
            fig.profile = profile_steps(ctx, model, engine, window, dist)
        except Exception as e:  # noqa: BLE001 - the profile is a side figure: it never hides the timing
            fig.profile = {"error": f"{type(e).__name__}: {e}"[:300], "sdpa_ops": []}
    return fig


def _peaks(device) -> tuple[float | None, float | None]:
    import torch

    if device.type != "cuda":
        return None, None
    return float(torch.cuda.max_memory_allocated(device)), float(torch.cuda.max_memory_reserved(device))


def profile_steps(ctx: Context, model, engine, window, dist, steps: int = 2) -> dict:
    """torch.profiler over ``steps`` steps: the top kernels by device time, the share of the wall time the
    GPU had no kernel running (an upper bound of host overhead: overlapping kernels are counted once each),
    and which scaled-dot-product-attention implementation ran."""
    from torch.profiler import ProfilerActivity, profile

    from aura.train.loop import optimizer_step

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if ctx.device.type == "cuda" else [])
    windows = [window() for _ in range(steps)]
    _sync(ctx.device)
    t0 = time.perf_counter()
    with profile(activities=acts) as prof:
        for w in windows:
            optimizer_step(model, engine, w, lr=1e-4, dist=dist)
        _sync(ctx.device)
    wall = time.perf_counter() - t0
    events = prof.key_averages()
    sdpa = sorted(
        {
            e.key
            for e in events
            if e.key.startswith("aten::_scaled_dot_product")
            or e.key.startswith("aten::_flash_attention")
            or e.key.startswith("aten::_efficient_attention")
            or e.key.startswith("aten::_cudnn_attention")
        }
    )
    out = {"sdpa_ops": sdpa, "wall_s": wall}
    if ctx.device.type == "cuda":
        kernels = [e for e in events if e.device_type.name == "CUDA" and e.self_device_time_total > 0]
        busy = sum(e.self_device_time_total for e in kernels) / 1e6
        top = sorted(kernels, key=lambda e: e.self_device_time_total, reverse=True)[:6]
        out["gpu_idle_share"] = max(0.0, 1 - busy / wall)
        out["top_kernels"] = [(e.key[:70], round(e.self_device_time_total / 1e6 / max(busy, 1e-9), 3)) for e in top]
        out["attention_kernels"] = sorted(
            {
                e.key[:70]
                for e in kernels
                if any(k in e.key.lower() for k in ("flash", "fmha", "attention", "cudnn_sdpa", "sdpa"))
            }
        )[:4]
    return out


def release() -> None:
    """After each check (the worker calls it): the check's tensors freed, the allocator's cache returned,
    compiled graphs dropped, so that the next check's memory figures are its own."""
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    try:
        torch._dynamo.reset()
    except Exception:  # noqa: BLE001 - dynamo not loaded
        pass
