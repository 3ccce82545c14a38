"""What this machine has, and what `auto` trains on it.

``detect()`` -> ``HardwareInfo`` (device type, name, count, memory per device, fast bf16, peak FLOP/s
when known and where that figure comes from). ``estimate_memory`` is the memory model behind ``auto``:
weights, gradients and AdamW states, activations with and without gradient checkpointing, and the
logits, by precision. ``choose_auto(info)`` walks the presets from the largest down and returns the
first (preset, batch, checkpointing) that fits, with the reason; with a time budget and a known peak,
the size the budget can train (``aura.models.size_budget``: ~20 tokens per parameter) among those that fit.
All three are pure (no side effects, nothing printed) so ``aura doctor`` can call them freely. The tiers are
tabulated in docs/presets.md.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache

from aura.core.i18n import Messages
from aura.models.presets import PRESET_TRAINING, PRESETS, ModelSpec, hidden_matrix_parameters, spec_parameters
from aura.models.size_budget import (
    ASSUMED_MFU,
    SizeChoice,
    SizeOption,
    budget_reason,
    budget_tokens,
    no_peak_note,
    pick_size,
)

GIB = 1024**3
PLANNING_VOCAB = 32000  # `auto` runs before the tokenizer is known; typical Spanish BPE size
TARGET_TOKENS_PER_STEP = 65536  # the 72-hour guide: batch 2 x accumulation 16 x context 2048

M = Messages(
    "hardware",
    {
        "reason_cpu": (
            "CPU ({name}): se usa '{preset}' (pocos millones de parámetros; Muon + WSD), lote {batch}.",
            "CPU ({name}): using '{preset}' (a few million parameters; Muon + WSD), batch {batch}.",
        ),
        "reason_fit": (
            "{device} con {mem:.0f} GiB: '{preset}' con lote {batch}{ckpt} ocupa ~{need:.1f} GiB "
            "según el modelo de memoria; es el preset más grande que cabe (receta: Muon + WSD).",
            "{device} with {mem:.0f} GiB: '{preset}' with batch {batch}{ckpt} needs ~{need:.1f} GiB "
            "by the memory model; it is the largest preset that fits (recipe: Muon + WSD).",
        ),
        "ckpt": (" y gradient checkpointing", " and gradient checkpointing"),
        "reason_small": (
            "{device} con {mem:.1f} GiB: ningún preset de GPU cabe; se usa '{preset}'.",
            "{device} with {mem:.1f} GiB: no GPU preset fits; using '{preset}'.",
        ),
    },
)

# Dense (no sparsity) peaks in TFLOP/s from NVIDIA's data sheets and architecture whitepapers:
# (name as its words appear in the driver's device name, 16-bit tensor with fp32 accumulation, TF32 tensor
# (None before Ampere), fp32 without tensor cores, compute capability). Names match whole words, most
# specific first, so "H100 NVL" / "H100 PCIe" never get the SXM figure, "A10" is not "A100", "L4" is not
# "L40S". GeForce cards accumulate fp16 products in fp32 at half rate: those are the figures used here.
_GPU_TABLE: list[tuple[str, float, float | None, float, tuple[int, int]]] = [
    ("B200", 2250, 1100, 80, (10, 0)),
    ("H200 NVL", 835.5, 417.5, 60, (9, 0)),
    ("H200", 989.4, 494.7, 66.9, (9, 0)),
    ("GH200", 989.4, 494.7, 67, (9, 0)),
    ("H100 NVL", 835.5, 417.5, 60, (9, 0)),
    ("H100 PCIe", 756.5, 378, 51.2, (9, 0)),
    ("H100", 989.4, 494.7, 66.9, (9, 0)),
    ("H800 PCIe", 756.5, 378, 51.2, (9, 0)),
    ("H800", 989.4, 494.7, 66.9, (9, 0)),
    ("A100", 312, 156, 19.5, (8, 0)),
    ("A800", 312, 156, 19.5, (8, 0)),
    ("A30", 165, 82, 10.3, (8, 0)),
    ("L40S", 362.05, 183, 91.6, (8, 9)),
    ("L40", 181.05, 90.5, 90.5, (8, 9)),
    ("L4", 121, 60, 30.3, (8, 9)),
    ("A10G", 70, 35, 31.2, (8, 6)),
    ("A10", 125, 62.5, 31.2, (8, 6)),
    ("RTX A6000", 154.8, 77.4, 38.7, (8, 6)),
    ("RTX A5000", 111.1, 55.6, 27.8, (8, 6)),
    ("RTX A4000", 76.7, 38.4, 19.2, (8, 6)),
    ("RTX 4090", 165.2, 82.6, 82.6, (8, 9)),
    ("RTX 4080 SUPER", 104.4, 52.2, 52.2, (8, 9)),
    ("RTX 4080", 97.5, 48.7, 48.7, (8, 9)),
    ("RTX 4070 Ti", 80.2, 40.1, 40.1, (8, 9)),
    ("RTX 4070", 58.3, 29.1, 29.1, (8, 9)),
    ("RTX 4060 Ti", 44.1, 22.1, 22.1, (8, 9)),
    ("RTX 4060", 30.2, 15.1, 15.1, (8, 9)),
    ("RTX 3090 Ti", 80, 40, 40, (8, 6)),
    ("RTX 3090", 71, 35.6, 35.6, (8, 6)),
    ("RTX 3080 Ti", 68.2, 34.1, 34.1, (8, 6)),
    ("RTX 3080", 59.5, 29.8, 29.8, (8, 6)),
    ("RTX 3070 Ti", 43.5, 21.7, 21.7, (8, 6)),
    ("RTX 3070", 40.6, 20.3, 20.3, (8, 6)),
    ("RTX 3060 Ti", 32.4, 16.2, 16.2, (8, 6)),
    ("RTX 3060", 25.6, 12.8, 12.7, (8, 6)),
    ("V100S", 130, None, 16.4, (7, 0)),
    ("V100 PCIe", 112, None, 14, (7, 0)),
    ("V100", 125, None, 15.7, (7, 0)),
    ("T4", 65, None, 8.1, (7, 5)),
]
_MIG_SLICES = 7  # A100 / H100 / H200: 7 compute slices; "MIG 3g.40gb" holds 3 of them
MEMORY_SPEC = re.compile(r"^\s*(?P<name>.*?)\s*(?P<size>\d+(?:\.\d+)?)\s*(?P<unit>GB|GiB|G)\s*$", re.IGNORECASE)


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
    peak_flops_fp32: float | None = None  # without tensor cores
    peak_source: str | None = None
    capability: tuple[int, int] | None = None  # CUDA compute capability
    peak_flops_tf32: float | None = None  # fp32 matmuls on tensor cores (Ampere and later)
    flash_attn: bool = False  # the flash-attn package is importable (CUDA only)
    cpu_flags: tuple[str, ...] = field(default=(), repr=False)

    def peak_flops(self, precision: str) -> float | None:
        """Peak FLOP/s for ``precision`` (bf16/fp16/fp32), or None when unknown (then no MFU). Aura enables
        TF32 for fp32 runs on CUDA, so their peak is the TF32 one where the device has it."""
        if precision in ("bf16", "fp16"):
            return self.peak_flops_16bit
        return self.peak_flops_tf32 or self.peak_flops_fp32

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


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine() or "CPU"


def _words(name: str) -> list[str]:
    return re.sub(r"[-_/(),]", " ", name.lower()).split()


def gpu_entry(name: str) -> tuple[str, float, float | None, float, tuple[int, int]] | None:
    """The ``_GPU_TABLE`` row of a device name ("NVIDIA H100 80GB HBM3", "Tesla V100-PCIE-32GB"): the
    first row whose words appear consecutively, as whole words, in the name."""
    words = _words(name)
    for row in _GPU_TABLE:
        key = _words(row[0])
        if any(words[i : i + len(key)] == key for i in range(len(words) - len(key) + 1)):
            return row
    return None


def mig_fraction(name: str) -> float:
    """The share of the GPU a MIG instance holds ("... MIG 3g.40gb" -> 3/7); 1.0 for a whole GPU."""
    m = re.search(r"\bMIG\s+(\d+)g\.", name, re.IGNORECASE)
    return min(int(m.group(1)), _MIG_SLICES) / _MIG_SLICES if m else 1.0


def gpu_peak(name: str) -> tuple[float, float | None, float, str] | None:
    """(16-bit, TF32 or None, fp32 peak FLOP/s, where they come from) for a device name, or None."""
    row = gpu_entry(name)
    if row is None:
        return None
    key, p16, tf32, p32, _cap = row
    share = mig_fraction(name)
    key = f"{key} SXM" if key in ("H100", "H200", "H800") else key
    label = f"{key}{f' MIG {share * _MIG_SLICES:.0f}/{_MIG_SLICES}' if share < 1 else ''}"
    source = (
        f"{label} {p16 * share:.0f} TFLOP/s bf16/fp16"
        + (f", {tf32 * share:.0f} TF32" if tf32 else "")
        + f", {p32 * share:.1f} fp32 dense"
    )
    return p16 * share * 1e12, tf32 * share * 1e12 if tf32 else None, p32 * share * 1e12, source


def _cuda_info(
    name: str, count: int, memory: int, capability: tuple[int, int] | None, bf16: bool | None = None
) -> HardwareInfo:
    peak = gpu_peak(name)
    if capability is None:
        row = gpu_entry(name)
        capability = row[4] if row else (8, 0)
    return HardwareInfo(
        "cuda",
        name,
        count,
        memory,
        bf16=capability >= (8, 0) if bf16 is None else bf16,
        fp16=True,
        peak_flops_16bit=peak[0] if peak else None,
        peak_flops_fp32=peak[2] if peak else None,
        peak_source=peak[3] if peak else None,
        capability=capability,
        peak_flops_tf32=peak[1] if peak and capability >= (8, 0) else None,
    )


ASSUME_ENV = "AURA_ASSUME_HARDWARE"


def assumed_hardware(spec: str) -> HardwareInfo:
    """Hardware described in words, for planning and tests: "H100 80GB", "RTX 3060 12GB", "24GB" (a GPU
    known only by its memory), or "cpu" (this machine's CPU). Raises ValueError when it cannot be read."""
    text = spec.strip()
    if text.lower() == "cpu":
        return _detect_cpu()
    m = MEMORY_SPEC.match(text)
    if not m:
        raise ValueError(text)
    size = float(m.group("size"))
    memory = int(size * (GIB if m.group("unit").lower() == "gib" else 1e9 * 0.99))  # 80 GB -> 79.2 GiB
    name = m.group("name") or f"GPU {size:g} GB"
    return _cuda_info(name if name.lower().startswith(("nvidia", "tesla")) else f"NVIDIA {name}", 1, memory, None)


def rank_assumption(value: str, rank: int) -> str:
    """``AURA_ASSUME_HARDWARE`` may list one description per rank, separated by ";" (tests give two local
    ranks different hardware this way); a single description applies to every rank."""
    parts = [p for p in value.split(";") if p.strip()]
    return parts[min(rank, len(parts) - 1)] if parts else value


def detect(*, rank: int | None = None) -> HardwareInfo:
    """The accelerator this process would train on (CUDA, then Apple MPS, else CPU), or the hardware that
    ``AURA_ASSUME_HARDWARE`` describes (``aura doctor --assume``; tests of rank agreement)."""
    assumed = os.environ.get(ASSUME_ENV, "").strip()
    if assumed:
        rank = int(os.environ.get("RANK", "0")) if rank is None else rank
        return assumed_hardware(rank_assumption(assumed, rank))
    import psutil
    import torch

    if torch.cuda.is_available():
        index = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        import importlib.util

        info = _cuda_info(
            props.name,
            torch.cuda.device_count(),
            int(props.total_memory),
            (props.major, props.minor),
            bf16=bool(torch.cuda.is_bf16_supported()) and props.major >= 8,
        )
        return replace(info, flash_attn=importlib.util.find_spec("flash_attn") is not None)
    ram = int(psutil.virtual_memory().total)
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return HardwareInfo("mps", "Apple MPS", 1, ram, bf16=False, fp16=True)
    return _detect_cpu()


def _detect_cpu() -> HardwareInfo:
    import psutil

    flags = cpu_flags()
    return HardwareInfo(
        "cpu", cpu_name(), 1, int(psutil.virtual_memory().total), bf16=cpu_fast_bf16(flags), fp16=False, cpu_flags=flags
    )


def attention_implementation(requested: str, info: HardwareInfo, precision: str) -> str | None:
    """``--attn-implementation``: ``auto`` -> FlashAttention-2 where it runs (flash-attn installed on every
    rank, compute capability 8.0+, 16-bit compute), else None (transformers' default, SDPA)."""
    if requested != "auto":
        return requested
    if (
        info.device_type == "cuda"
        and info.flash_attn
        and (info.capability or (0, 0)) >= (8, 0)
        and precision in ("bf16", "fp16")
    ):
        return "flash_attention_2"
    return None


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


def estimate_memory(
    spec: ModelSpec,
    *,
    vocab_size: int,
    batch_size: int,
    precision: str,
    gradient_checkpointing: bool,
    device_type: str = "cuda",
    chunked_loss: bool = True,
    optimizer: str = "adamw",
) -> MemoryEstimate:
    """Peak training memory of ``spec`` under AdamW (or Muon) with fp32 master weights.

    * weights: 4 B/param fp32, plus 2 B/param for the 16-bit copies autocast keeps for backward;
    * gradients 4 B/param; AdamW exp_avg + exp_avg_sq 8 B/param; with ``optimizer="muon"`` the hidden
      matrices keep one fp32 momentum (4 B/param) and the rest (embeddings, head, norms) AdamW's 8 B;
    * activations per token per layer (elements): Llama ~ 6d + 2 kv_dim + 4 i (norm in/out, q, k, v,
      attention out, gate, up, act, product), GPT-2 ~ 8d + 2 i; SDPA never materialises T x T.
      Checkpointing keeps only each layer's fp32 input plus one layer being recomputed;
    * logits: with the chunked loss (``aura.train.objectives.chunked_loss``, every preset on one device or DDP) one
      chunk's fp32 logits and softmax plus the hidden states' gradient; without it (FSDP2) B T V in the
      compute dtype, their fp32 upcast for the loss, and its gradient;
    * overhead: CUDA context and allocator fragmentation (1 GiB + 10 %), 0.5 GiB on CPU.
    A 25 % margin on activations covers norms, residual adds and allocator rounding.
    """
    n = spec_parameters(spec, vocab_size)
    half = precision in ("bf16", "fp16")
    act_b = 2 if half else 4
    weights = 4 * n + (2 * n if half else 0)
    tokens = batch_size * spec.seq_len
    d, i, kvd = spec.d_model, spec.intermediate_size, spec.n_kv_heads * spec.head_dim
    per_layer_el = (6 * d + 2 * kvd + 4 * i) if spec.arch != "gpt2" else (8 * d + 2 * i)
    full_layer = int(tokens * per_layer_el * act_b * 1.25)
    if gradient_checkpointing:
        activations = tokens * d * 4 * spec.n_layers + full_layer
    else:
        activations = full_layer * spec.n_layers
    if chunked_loss:
        logits = (
            chunk_tokens(tokens, vocab_size, d, device_type=device_type) * vocab_size * (4 + 4 + act_b) + tokens * d * 4
        )
    else:
        logits = tokens * vocab_size * (act_b + 4 + 4)
    opt = 8 * n - (4 * hidden_matrix_parameters(spec) if optimizer == "muon" else 0)
    base = 4 * n + 4 * n + opt + activations + logits
    overhead = int(GIB + 0.10 * base) if device_type == "cuda" else GIB // 2
    return MemoryEstimate(
        weights=weights, gradients=4 * n, optimizer=opt, activations=activations, logits=logits, overhead=overhead
    )


CHUNK_ELEMENTS = 1 << 24  # the chunked loss's logits: at most this many elements per chunk (64 MiB in fp32) ...
# ... on a CPU. On CUDA chunks of at least 2,048 tokens (within 1 GiB of fp32 logits): with the CPU's rule the
# H200 ran the loss at vocab 128k 4x slower than the plain one (64 chunks of 130 tokens: narrow matmuls, and a
# pass over the fp32 head gradient per chunk); with 4 chunks, 0.73x the plain speed at 0.36x its memory
# (docs/benchmarks.md). 2,048 tokens, not more, so that the 24 GB guides' fine-tuning still fits.
CUDA_CHUNK_ELEMENTS = 1 << 28
CUDA_CHUNK_TOKENS = 2048


def chunk_tokens(n_tokens: int, vocab: int, d_model: int, *, device_type: str = "cpu") -> int:
    """Tokens per chunk of the chunked loss (``aura.train.objectives.chunked_loss``): a chunk's logits hold no more
    elements than the hidden states, or than CHUNK_ELEMENTS; on CUDA at least CUDA_CHUNK_TOKENS tokens, within
    CUDA_CHUNK_ELEMENTS."""
    chunk = max(n_tokens * d_model, CHUNK_ELEMENTS) // max(vocab, 1)
    if device_type == "cuda":
        chunk = min(max(chunk, CUDA_CHUNK_TOKENS), CUDA_CHUNK_ELEMENTS // max(vocab, 1))
    return max(1, min(n_tokens, chunk))


def fits(spec: ModelSpec, memory_bytes: int, **kwargs) -> tuple[bool, MemoryEstimate]:
    est = estimate_memory(spec, **kwargs)
    return est.total <= memory_bytes, est


def needs_checkpointing(
    spec: ModelSpec,
    info: HardwareInfo,
    *,
    batch_size: int,
    precision: str | None = None,
    vocab_size: int = PLANNING_VOCAB,
    usable_fraction: float = 0.9,
    optimizer: str = "adamw",
) -> bool:
    """Whether ``spec`` at ``batch_size`` needs gradient checkpointing to fit ``info``'s memory (a preset
    whose default is "from the model": the 72-hour ones)."""
    ok, _ = fits(
        spec,
        int(info.memory_bytes * usable_fraction),
        vocab_size=vocab_size,
        batch_size=batch_size,
        precision=precision or default_precision(info),
        gradient_checkpointing=False,
        device_type=info.device_type,
        optimizer=optimizer,
    )
    return not ok


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
    size: SizeChoice | None = None  # the size the time budget chose, with the other candidates (None: by memory)

    def to_dict(self) -> dict:
        return asdict(self)


# (preset, batch, checkpointing) from most to least preferred: bigger models first; per model, no
# recomputation (25-30 % faster) before checkpointing, larger batches first. The modern recipe at every tier:
# the Qwen3 block with Muon + WSD reached the old default's loss in 0.28x and 0.29x the tokens at two sizes
# (bench/bench_recipe.py, docs/training.md). qwen3-72h (1.26 B) is the largest: a 72-hour run on one 80 GB
# A100 is ~3e19 FLOPs, already past the compute-optimal size for it (~0.5 B); aura-72h-max (2.43 B, the
# 72-hour guide's original model) and the Llama/GPT-2 presets stay available by name. Without a time budget
# `auto` takes the first row that fits memory; with one, the size rule of aura.models.size_budget picks among
# BUDGET_LADDER (each at its first row that fits).
_CANDIDATES: list[tuple[str, int, bool]] = [
    ("qwen3-72h", 8, False),
    ("qwen3-72h", 4, False),
    ("qwen3-72h", 2, False),
    ("qwen3-72h", 4, True),
    ("qwen3-72h", 2, True),
    ("qwen3-medium", 8, False),
    ("qwen3-medium", 4, False),
    ("qwen3-medium", 8, True),
    ("qwen3-medium", 4, True),
    ("qwen3-medium", 2, True),
    ("qwen3-small", 16, False),
    ("qwen3-small", 8, False),
    ("qwen3-small", 4, False),
    ("qwen3-small", 8, True),
    ("qwen3-small", 4, True),
    ("qwen3-small", 2, True),
]
CPU_PRESET = "qwen3-tiny"
CPU_BATCH = PRESET_TRAINING[CPU_PRESET].batch_size
_TINY = PRESET_TRAINING[CPU_PRESET]
# The sizes a time budget chooses between, largest first (the memory ladder plus qwen3-500m and qwen3-tiny)
BUDGET_LADDER = ("qwen3-72h", "qwen3-500m", "qwen3-medium", "qwen3-small", CPU_PRESET)
_OTHER_ROWS = {
    "qwen3-500m": ((8, False), (4, False), (2, False), (4, True), (2, True)),
    CPU_PRESET: ((CPU_BATCH, False), (8, False), (4, False)),
}


def _rows(preset: str) -> list[tuple[int, bool]]:
    return [(b, c) for p, b, c in _CANDIDATES if p == preset] or list(_OTHER_ROWS[preset])


def _first_fit(
    preset: str, info: HardwareInfo, *, budget: int, precision: str, vocab_size: int
) -> tuple[int, bool, MemoryEstimate] | None:
    """The first (batch, checkpointing) of ``preset``'s rows that fits ``budget`` bytes, with its estimate."""
    for batch, ckpt in _rows(preset):
        ok, est = fits(
            PRESETS[preset],
            budget,
            vocab_size=vocab_size,
            batch_size=batch,
            precision=precision,
            gradient_checkpointing=ckpt,
            device_type=info.device_type,
            optimizer=PRESET_TRAINING[preset].optimizer,
        )
        if ok:
            return batch, ckpt, est
    return None


def _gpu_choice(preset: str, fit: tuple[int, bool, MemoryEstimate], precision: str, reason: str, size=None):
    batch, ckpt, est = fit
    accum = max(1, TARGET_TOKENS_PER_STEP // (batch * PRESETS[preset].seq_len))
    t = PRESET_TRAINING[preset]
    return AutoChoice(preset, batch, accum, precision, ckpt, t.learning_rate, t.save_steps, est.total, reason, size)


def _tiny_choice(info: HardwareInfo, precision: str, vocab_size: int, reason: str) -> AutoChoice:
    est = estimate_memory(
        PRESETS[CPU_PRESET],
        vocab_size=vocab_size,
        batch_size=CPU_BATCH,
        precision=precision,
        gradient_checkpointing=False,
        device_type=info.device_type,
        optimizer=_TINY.optimizer,
    )
    return AutoChoice(
        CPU_PRESET, CPU_BATCH, 1, precision, False, _TINY.learning_rate, _TINY.save_steps, est.total, reason
    )


def _choose_for_budget(
    info: HardwareInfo,
    *,
    hours: float,
    devices: int,
    precision: str,
    vocab_size: int,
    budget: int,
    keep: str | None = None,
) -> AutoChoice | None:
    """The size rule (aura.models.size_budget) over BUDGET_LADDER's presets that fit memory; None when the
    device's peak is unknown or nothing fits."""
    peak = info.peak_flops(precision)
    if not peak:
        return None
    flops = peak * ASSUMED_MFU * max(devices, 1)
    fitted = {
        p: f
        for p in BUDGET_LADDER
        if (f := _first_fit(p, info, budget=budget, precision=precision, vocab_size=vocab_size))
    }
    if not fitted:
        return None
    options = []
    for preset in fitted:
        n = spec_parameters(PRESETS[preset], vocab_size)
        options.append(SizeOption(preset, n, budget_tokens(n, flops, hours * 3600)))
    size = pick_size(options, hours * 3600)
    kept = keep in fitted and keep != size.chosen.preset
    if kept:  # a resumed run keeps its model whatever its budget now says
        size = replace(size, chosen=next(o for o in size.options if o.preset == keep))
    fit = fitted[size.chosen.preset]
    why = budget_reason(
        size,
        device=info.name,
        flops_per_s=flops,
        peak=peak * max(devices, 1),
        batch=fit[0],
        ckpt=M("ckpt") if fit[1] else "",
        need=fit[2].total / GIB,
        kept=kept,
    )
    return _gpu_choice(size.chosen.preset, fit, precision, why, size)


def choose_auto(
    info: HardwareInfo | None = None,
    *,
    vocab_size: int = PLANNING_VOCAB,
    usable_fraction: float = 0.9,
    time_budget_h: float | None = None,
    devices: int | None = None,
    keep: str | None = None,
) -> AutoChoice:
    """The preset, batch, accumulation, precision and checkpointing `auto` picks for ``info``: with
    ``time_budget_h`` (a run that ends on its budget) and a known peak, the size the budget can train on
    ``devices`` (default: ``info.count``) of them (aura.models.size_budget), or ``keep`` (a resumed run's preset)
    when it is one of the sizes the budget chooses between and fits; otherwise the largest that fits."""
    info = detect() if info is None else info
    precision = default_precision(info)
    budget = int(info.memory_bytes * usable_fraction)
    if time_budget_h:
        by_budget = _choose_for_budget(
            info,
            hours=time_budget_h,
            devices=info.count if devices is None else devices,
            precision=precision,
            vocab_size=vocab_size,
            budget=budget,
            keep=keep,
        )
        if by_budget is not None:
            return by_budget
    note = no_peak_note() if time_budget_h else ""
    if info.device_type == "cpu":
        reason = M("reason_cpu", name=info.name, preset=CPU_PRESET, batch=CPU_BATCH)
        return _tiny_choice(info, precision, vocab_size, reason + note)
    mem_gib = info.memory_bytes / GIB
    for preset in dict.fromkeys(p for p, _, _ in _CANDIDATES):
        fit = _first_fit(preset, info, budget=budget, precision=precision, vocab_size=vocab_size)
        if fit is not None:
            reason = M(
                "reason_fit",
                device=info.name,
                mem=mem_gib,
                preset=preset,
                batch=fit[0],
                ckpt=M("ckpt") if fit[1] else "",
                need=fit[2].total / GIB,
            )
            return _gpu_choice(preset, fit, precision, reason + note)
    return _tiny_choice(
        info, precision, vocab_size, M("reason_small", device=info.name, mem=mem_gib, preset=CPU_PRESET)
    )


FINETUNE_BATCHES = (8, 4, 2, 1)  # tried largest first; accumulation keeps 8 rows per optimizer step


def finetune_batch(model, *, info: HardwareInfo, max_length: int, precision: str, checkpointing: bool) -> int | None:
    """Largest fine-tuning micro-batch whose memory fits the device (CUDA only; None elsewhere): the memory
    model of ``estimate_memory``, with gradients and AdamW state only for ``model``'s trainable parameters."""
    if info.device_type != "cuda":
        return None
    c = model.config
    d = getattr(c, "hidden_size", None) or getattr(c, "n_embd", 0)
    heads = getattr(c, "num_attention_heads", None) or getattr(c, "n_head", 1)
    spec = ModelSpec(
        "finetune",
        "gpt2" if c.model_type == "gpt2" else "llama",
        d,
        getattr(c, "num_hidden_layers", None) or getattr(c, "n_layer", 1),
        heads,
        getattr(c, "num_key_value_heads", None) or heads,
        max_length,
        getattr(c, "intermediate_size", None) or 4 * d,
    )
    params = list(model.parameters())
    trainable = sum(p.numel() for p in params if p.requires_grad)
    weights = sum(p.numel() * p.element_size() for p in params)
    for batch in FINETUNE_BATCHES:
        est = estimate_memory(
            spec, vocab_size=c.vocab_size, batch_size=batch, precision=precision, gradient_checkpointing=checkpointing
        )
        if weights + 16 * trainable + est.activations + est.logits + est.overhead <= info.memory_bytes:
            return batch
    return 1


def nominal_gpu(memory_gb: float, *, bf16: bool = True, name: str | None = None) -> HardwareInfo:
    """A CUDA device of ``memory_gb`` GB as drivers report it (e.g. 80 GB -> 79.2 GiB), for planning."""
    reported = int(memory_gb * 1e9 * 0.99)
    return HardwareInfo(
        "cuda",
        name or f"GPU {memory_gb:g} GB",
        1,
        reported,
        bf16=bf16,
        fp16=True,
        capability=(8, 0) if bf16 else (7, 0),
    )


def auto_tiers(sizes_gb: tuple[float, ...] = (80, 40, 24, 16, 12, 8)) -> list[tuple[float, AutoChoice]]:
    """``choose_auto`` for nominal GPU sizes: the table in docs/presets.md."""
    return [(gb, choose_auto(nominal_gpu(gb))) for gb in sizes_gb]


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1
