"""What this machine has, and what `auto` trains on it.

``detect()`` -> ``HardwareInfo`` (device type, name, count, memory per device, fast bf16, peak FLOP/s
when known and where that figure comes from). ``estimate_memory`` is the memory model behind ``auto``:
weights, gradients and AdamW states, activations with and without gradient checkpointing, and the
logits, by precision. ``choose_auto(info)`` walks the presets from the largest down and returns the
first (preset, batch, checkpointing) that fits, with the reason. All three are pure (no side effects,
nothing printed) so ``aura doctor`` can call them freely. The tiers are tabulated in docs/presets.md.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from functools import lru_cache

from aura.i18n import Messages
from aura.models import PRESET_TRAINING, PRESETS, ModelSpec, spec_parameters

GIB = 1024 ** 3
PLANNING_VOCAB = 32000  # `auto` runs before the tokenizer is known; typical Spanish BPE size
TARGET_TOKENS_PER_STEP = 65536  # the 72-hour guide: batch 2 x accumulation 16 x context 2048

M = Messages("hardware", {
    "reason_cpu": ("CPU ({name}): se usa 'tiny' (pocos millones de parámetros), lote {batch}.",
                   "CPU ({name}): using 'tiny' (a few million parameters), batch {batch}."),
    "reason_fit": ("{device} con {mem:.0f} GiB: '{preset}' con lote {batch}{ckpt} ocupa ~{need:.1f} GiB "
                   "según el modelo de memoria; es el preset más grande que cabe.",
                   "{device} with {mem:.0f} GiB: '{preset}' with batch {batch}{ckpt} needs ~{need:.1f} GiB "
                   "by the memory model; it is the largest preset that fits."),
    "ckpt": (" y gradient checkpointing", " and gradient checkpointing"),
    "reason_small": ("{device} con {mem:.1f} GiB: ningún preset de GPU cabe; se usa 'tiny'.",
                     "{device} with {mem:.1f} GiB: no GPU preset fits; using 'tiny'."),
})

# Dense (no sparsity) tensor-core peaks in FLOP/s: (16-bit, fp32/tf32-off) from NVIDIA data sheets.
_GPU_PEAKS: list[tuple[str, float, float]] = [
    ("H200", 989.4e12, 66.9e12), ("H100 PCIe", 756.0e12, 51.2e12), ("H100", 989.4e12, 66.9e12),
    ("H800", 989.4e12, 66.9e12), ("GH200", 989.4e12, 66.9e12), ("B200", 2250e12, 80e12),
    ("A100", 312e12, 19.5e12), ("A800", 312e12, 19.5e12), ("A6000", 154.8e12, 38.7e12),
    ("L40S", 362.1e12, 91.6e12), ("L40", 181e12, 90.5e12), ("L4", 121e12, 30.3e12),
    ("A10G", 70e12, 35e12), ("A10", 125e12, 31.2e12), ("RTX 4090", 165.2e12, 82.6e12),
    ("RTX 4080", 97.5e12, 48.7e12), ("RTX 3090", 71e12, 35.6e12), ("RTX 3080", 59.5e12, 29.8e12),
    ("V100", 125e12, 15.7e12), ("T4", 65e12, 8.1e12),
]


@dataclass(frozen=True)
class HardwareInfo:
    """One device type as seen by this process. ``memory_bytes`` is per device (RAM for CPU)."""

    device_type: str  # "cuda" | "mps" | "cpu"
    name: str
    count: int
    memory_bytes: int
    bf16: bool  # bf16 supported *and* fast (tensor cores, AMX or AVX-512-bf16)
    fp16: bool
    peak_flops_16bit: float | None = None
    peak_flops_fp32: float | None = None
    peak_source: str | None = None
    cpu_flags: tuple[str, ...] = field(default=(), repr=False)

    def peak_flops(self, precision: str) -> float | None:
        """Peak FLOP/s for ``precision`` (bf16/fp16/fp32), or None when unknown (then no MFU)."""
        return self.peak_flops_16bit if precision in ("bf16", "fp16") else self.peak_flops_fp32

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("cpu_flags")
        return d


@lru_cache(maxsize=1)
def cpu_flags() -> tuple[str, ...]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return tuple(line.split(":", 1)[1].split())
    except OSError:
        pass
    return ()


def cpu_fast_bf16(flags: tuple[str, ...] | None = None) -> bool:
    """AMX-bf16 or AVX-512-bf16: bf16 autocast beats fp32 on this CPU (1.6x measured with AMX)."""
    flags = cpu_flags() if flags is None else flags
    if "amx_bf16" in flags or "avx512_bf16" in flags:
        return True
    import torch

    probe = getattr(torch.cpu, "_is_amx_tile_supported", None)
    probe16 = getattr(torch.cpu, "_is_avx512_bf16_supported", None)
    return bool((probe and probe()) or (probe16 and probe16()))


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine() or "CPU"


def gpu_peak(name: str) -> tuple[float, float, str] | None:
    for key, p16, p32 in _GPU_PEAKS:
        if key.lower() in name.lower():
            return p16, p32, f"{key} {p16 / 1e12:.0f} TFLOP/s bf16/fp16 dense"
    return None


def detect() -> HardwareInfo:
    """The accelerator this process would train on (CUDA, then Apple MPS, else CPU)."""
    import psutil
    import torch

    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        peak = gpu_peak(props.name)
        return HardwareInfo("cuda", props.name, torch.cuda.device_count(), int(props.total_memory),
                            bf16=bool(torch.cuda.is_bf16_supported()) and props.major >= 8, fp16=True,
                            peak_flops_16bit=peak[0] if peak else None,
                            peak_flops_fp32=peak[1] if peak else None, peak_source=peak[2] if peak else None)
    ram = int(psutil.virtual_memory().total)
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return HardwareInfo("mps", "Apple MPS", 1, ram, bf16=False, fp16=True)
    flags = cpu_flags()
    return HardwareInfo("cpu", _cpu_name(), 1, ram, bf16=cpu_fast_bf16(flags), fp16=False,
                        cpu_flags=flags)


def default_precision(info: HardwareInfo) -> str:
    """``auto`` precision: bf16 where it is fast, fp16 on CUDA without bf16 (V100, T4), else fp32."""
    if info.bf16:
        return "bf16"
    if info.device_type == "cuda":
        return "fp16"
    return "fp32"


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes needed to train, by part (per device, no sharding)."""

    weights: int
    gradients: int
    optimizer: int
    activations: int
    logits: int
    overhead: int

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer + self.activations + self.logits + self.overhead


def estimate_memory(spec: ModelSpec, *, vocab_size: int, batch_size: int, precision: str,
                    gradient_checkpointing: bool, device_type: str = "cuda") -> MemoryEstimate:
    """Peak training memory of ``spec`` under AdamW with fp32 master weights.

    * weights: 4 B/param fp32, plus 2 B/param for the 16-bit copies autocast keeps for backward;
    * gradients 4 B/param; AdamW exp_avg + exp_avg_sq 8 B/param;
    * activations per token per layer (elements): Llama ~ 6d + 2 kv_dim + 4 i (norm in/out, q, k, v,
      attention out, gate, up, act, product), GPT-2 ~ 8d + 2 i; SDPA never materialises T x T.
      Checkpointing keeps only each layer's fp32 input plus one layer being recomputed;
    * logits: B T V in the compute dtype, their fp32 upcast for the loss, and its gradient;
    * overhead: CUDA context and allocator fragmentation (1 GiB + 10 %), 0.5 GiB on CPU.
    A 25 % margin on activations covers norms, residual adds and allocator rounding.
    """
    n = spec_parameters(spec, vocab_size)
    half = precision in ("bf16", "fp16")
    act_b = 2 if half else 4
    weights = 4 * n + (2 * n if half else 0)
    tokens = batch_size * spec.seq_len
    d, i, kvd = spec.d_model, spec.intermediate_size, spec.n_kv_heads * spec.head_dim
    per_layer_el = (6 * d + 2 * kvd + 4 * i) if spec.arch == "llama" else (8 * d + 2 * i)
    full_layer = int(tokens * per_layer_el * act_b * 1.25)
    if gradient_checkpointing:
        activations = tokens * d * 4 * spec.n_layers + full_layer
    else:
        activations = full_layer * spec.n_layers
    logits = tokens * vocab_size * (act_b + 4 + 4)
    base = 4 * n + 4 * n + 8 * n + activations + logits
    overhead = int(GIB + 0.10 * base) if device_type == "cuda" else GIB // 2
    return MemoryEstimate(weights=weights, gradients=4 * n, optimizer=8 * n, activations=activations,
                          logits=logits, overhead=overhead)


def fits(spec: ModelSpec, memory_bytes: int, **kwargs) -> tuple[bool, MemoryEstimate]:
    est = estimate_memory(spec, **kwargs)
    return est.total <= memory_bytes, est


@dataclass(frozen=True)
class AutoChoice:
    """What ``auto`` trains here, with its training defaults and a sentence saying why."""

    preset: str
    batch_size: int
    gradient_accumulation_steps: int
    precision: str
    gradient_checkpointing: bool
    learning_rate: float
    save_steps: int
    estimated_bytes: int
    reason: str

    def to_dict(self) -> dict:
        return asdict(self)


# (preset, batch, checkpointing) from most to least preferred: bigger models first; per model, no
# recomputation (faster) before checkpointing, larger batches first. aura-72h-max with batch 2 and
# checkpointing is the 72-hour guide's configuration for an 80 GB A100.
_CANDIDATES: list[tuple[str, int, bool]] = [
    ("aura-72h-max", 2, True),
    ("aura-72h-extended", 4, True), ("aura-72h-extended", 2, True),
    ("gpt2-medium", 8, False), ("gpt2-medium", 4, False), ("gpt2-medium", 8, True),
    ("gpt2-medium", 4, True), ("gpt2-medium", 2, True),
    ("gpt2-small", 16, False), ("gpt2-small", 8, False), ("gpt2-small", 4, False),
    ("gpt2-small", 8, True), ("gpt2-small", 4, True), ("gpt2-small", 2, True),
]
CPU_BATCH = PRESET_TRAINING["tiny"].batch_size
_TINY = PRESET_TRAINING["tiny"]


def choose_auto(info: HardwareInfo | None = None, *, vocab_size: int = PLANNING_VOCAB,
                usable_fraction: float = 0.9) -> AutoChoice:
    """The preset, batch, accumulation, precision and checkpointing `auto` picks for ``info``."""
    info = detect() if info is None else info
    precision = default_precision(info)
    if info.device_type == "cpu":
        spec = PRESETS["tiny"]
        est = estimate_memory(spec, vocab_size=vocab_size, batch_size=CPU_BATCH, precision=precision,
                              gradient_checkpointing=False, device_type="cpu")
        return AutoChoice("tiny", CPU_BATCH, 1, precision, False, _TINY.learning_rate, _TINY.save_steps, est.total,
                          M("reason_cpu", name=info.name, batch=CPU_BATCH))
    budget = int(info.memory_bytes * usable_fraction)
    mem_gib = info.memory_bytes / GIB
    for preset, batch, ckpt in _CANDIDATES:
        spec = PRESETS[preset]
        ok, est = fits(spec, budget, vocab_size=vocab_size, batch_size=batch, precision=precision,
                       gradient_checkpointing=ckpt, device_type=info.device_type)
        if ok:
            accum = max(1, TARGET_TOKENS_PER_STEP // (batch * spec.seq_len))
            reason = M("reason_fit", device=info.name, mem=mem_gib, preset=preset, batch=batch,
                       ckpt=M("ckpt") if ckpt else "", need=est.total / GIB)
            trained = PRESET_TRAINING[preset]
            return AutoChoice(preset, batch, accum, precision, ckpt, trained.learning_rate, trained.save_steps,
                              est.total, reason)
    est = estimate_memory(PRESETS["tiny"], vocab_size=vocab_size, batch_size=CPU_BATCH, precision=precision,
                          gradient_checkpointing=False, device_type=info.device_type)
    return AutoChoice("tiny", CPU_BATCH, 1, precision, False, _TINY.learning_rate, _TINY.save_steps, est.total,
                      M("reason_small", device=info.name, mem=mem_gib))


FINETUNE_BATCHES = (8, 4, 2, 1)  # tried largest first; accumulation keeps 8 rows per optimizer step


def finetune_batch(model, *, info: HardwareInfo, max_length: int, precision: str, checkpointing: bool) -> int | None:
    """Largest fine-tuning micro-batch whose memory fits the device (CUDA only; None elsewhere): the memory
    model of ``estimate_memory``, with gradients and AdamW state only for ``model``'s trainable parameters."""
    if info.device_type != "cuda":
        return None
    c = model.config
    d = getattr(c, "hidden_size", None) or getattr(c, "n_embd", 0)
    heads = getattr(c, "num_attention_heads", None) or getattr(c, "n_head", 1)
    spec = ModelSpec("finetune", "gpt2" if c.model_type == "gpt2" else "llama", d,
                     getattr(c, "num_hidden_layers", None) or getattr(c, "n_layer", 1), heads,
                     getattr(c, "num_key_value_heads", None) or heads, max_length,
                     getattr(c, "intermediate_size", None) or 4 * d)
    params = list(model.parameters())
    trainable = sum(p.numel() for p in params if p.requires_grad)
    weights = sum(p.numel() * p.element_size() for p in params)
    for batch in FINETUNE_BATCHES:
        est = estimate_memory(spec, vocab_size=c.vocab_size, batch_size=batch, precision=precision,
                              gradient_checkpointing=checkpointing)
        if weights + 16 * trainable + est.activations + est.logits + est.overhead <= info.memory_bytes:
            return batch
    return 1


def nominal_gpu(memory_gb: float, *, bf16: bool = True, name: str | None = None) -> HardwareInfo:
    """A CUDA device of ``memory_gb`` GB as drivers report it (e.g. 80 GB -> 79.2 GiB), for planning."""
    reported = int(memory_gb * 1e9 * 0.99)
    return HardwareInfo("cuda", name or f"GPU {memory_gb:g} GB", 1, reported, bf16=bf16, fp16=True)


def auto_tiers(sizes_gb: tuple[float, ...] = (80, 40, 24, 16, 12, 8)) -> list[tuple[float, AutoChoice]]:
    """``choose_auto`` for nominal GPU sizes: the table in docs/presets.md."""
    return [(gb, choose_auto(nominal_gpu(gb))) for gb in sizes_gb]


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1
