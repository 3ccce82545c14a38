"""The fine-tuning memory model behind `aura finetune`'s `auto`: micro-batch and gradient checkpointing.

Pretraining's model is ``aura.models.hardware.estimate_memory``; fine-tuning differs in what is trained and how
the base is stored, so its terms are (bytes per device, no sharding):

* base weights: 4-bit NF4 with double quantisation (~0.52 B/param) for the layers' linear weights under
  QLoRA, embeddings and head in fp32 (peft's k-bit recipe upcasts them); the compute dtype (bf16: 2 B/param) for LoRA on
  a GPU;
  fp32 master weights plus their 16-bit autocast copies for a full fine-tune;
* trainable states: fp32 weight, gradient and AdamW's two moments (16 B/param) for the LoRA matrices
  (r x (d_in + d_out) per linear layer, every linear layer by default); 12 B/param more for a full one;
* activations per token per layer, the same count as pretraining's (``estimate_memory``), in the compute
  dtype; with checkpointing only each layer's input plus one layer being recomputed; QLoRA adds one
  layer's weights dequantised;
* logits: with the chunked loss (``aura.train.objectives.chunked_loss``) one chunk's fp32 logits and softmax, the
  hidden states' gradient and the head's fp32 gradient; without it B x T x V in the compute dtype, their
  fp32 upcast and its gradient;
* teacher (``--objective distill``): the frozen teacher's weights in the compute dtype (no gradient, no
  optimizer state) and its B x T x V logits with their fp32 log-softmax; the student's logits then take the
  plain path (the generalised JSD needs both distributions whole);
* overhead: CUDA context and allocator fragmentation (1 GiB + 10 %), as pretraining's.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from aura.core import console
from aura.core.i18n import Messages
from aura.models.hardware import GIB, HardwareInfo, chunk_tokens
from aura.models.presets import matmul_parameters, model_dims

M = Messages(
    "finetune_memory",
    {
        "plan": (
            "`auto` (modelo de memoria): lote {batch}{ckpt} con filas de {length:token|tokens} en {device} "
            "({have:.1f} GiB): ~{need:.1f} GiB.",
            "`auto` (memory model): batch {batch}{ckpt} with {length}-token rows on {device} ({have:.1f} GiB): "
            "~{need:.1f} GiB.",
        ),
        "ckpt": (" y gradient checkpointing", " and gradient checkpointing"),
        "none_fits": (
            "`auto` (modelo de memoria): ni el lote 1 con gradient checkpointing cabe en {device} "
            "({have:.1f} GiB; se estiman ~{need:.1f} GiB). Prueba --method qlora, un --max-length menor "
            "o --deepspeed.",
            "`auto` (memory model): not even batch 1 with gradient checkpointing fits {device} "
            "({have:.1f} GiB; ~{need:.1f} GiB estimated). Try --method qlora, a smaller --max-length or "
            "--deepspeed.",
        ),
    },
)

NF4_BYTES = 0.516  # 4 bits + one fp8 absmax per 64 weights + one fp32 constant per 256 blocks
# (micro-batch, checkpointing), most preferred first: recomputation costs ~25-30 % throughput, so every
# batch without it comes before any batch with it; accumulation keeps 8 rows per optimizer step
CANDIDATES: tuple[tuple[int, bool], ...] = (
    (8, False),
    (4, False),
    (2, False),
    (1, False),
    (8, True),
    (4, True),
    (2, True),
    (1, True),
)
ROWS_PER_STEP = 8


@dataclass(frozen=True)
class FinetuneEstimate:
    """Bytes needed to fine-tune, by part (per device)."""

    base_weights: int
    trainable_states: int
    activations: int
    logits: int
    overhead: int
    teacher: int = 0

    @property
    def total(self) -> int:
        return self.base_weights + self.trainable_states + self.activations + self.logits + self.overhead + self.teacher

    def to_dict(self) -> dict:
        return {**asdict(self), "total": self.total}


def lora_parameters(config, rank: int) -> int:
    """LoRA parameters of rank ``rank`` on every linear layer of the blocks (Aura's default targets)."""
    k = model_dims(config)
    d, hd = k["d"], k["head_dim"]
    q, kv, inter = k["heads"] * hd, k["kv"] * hd, k["inter"]
    shapes = [(d, q), (d, kv), (d, kv), (q, d)]  # q, k, v, o
    shapes += [(d, inter), (d, inter), (inter, d)] if k["gated"] else [(d, inter), (inter, d)]
    return k["layers"] * sum(rank * (a + b) for a, b in shapes)


def finetune_estimate(
    config,
    *,
    method: str,
    lora_r: int,
    batch_size: int,
    max_length: int,
    precision: str,
    checkpointing: bool,
    chunked_loss: bool = True,
    device_type: str = "cuda",
    teacher_config=None,
) -> FinetuneEstimate:
    """Peak memory of fine-tuning a transformers ``config`` (see the module docstring for the terms);
    ``teacher_config``: a distillation teacher's."""
    k = model_dims(config)
    d, layers, vocab, inter = k["d"], k["layers"], k["vocab"], k["inter"]
    half = precision in ("bf16", "fp16")
    act_b = 2 if half else 4
    head = d * vocab
    embed = 0 if getattr(config, "tie_word_embeddings", False) else d * vocab
    block = matmul_parameters(config) - head  # the layers' linear weights
    n = block + head + embed
    if method == "qlora":
        base = int(block * NF4_BYTES) + (head + embed) * 4  # peft's k-bit recipe keeps them in fp32
        trainable = lora_parameters(config, lora_r)
    elif method == "lora":  # the frozen base in bf16 on a GPU; fp16 runs keep it in fp32 (aura.train.finetune)
        base = n * (2 if precision == "bf16" and device_type == "cuda" else 4)
        trainable = lora_parameters(config, lora_r)
    else:  # full: fp32 master weights (+ 16-bit copies), and every weight trains
        base = n * (6 if half else 4)
        trainable = n
    states = trainable * (12 if method == "full" else 16)
    tokens = batch_size * max_length
    kvd = k["kv"] * k["head_dim"]
    per_layer_el = (6 * d + 2 * kvd + 4 * inter) if k["gated"] else (8 * d + 2 * inter)
    full_layer = int(tokens * per_layer_el * act_b * 1.25)
    activations = tokens * d * act_b * layers + full_layer if checkpointing else full_layer * layers
    if method == "qlora":
        activations += (4 * d * d + 3 * d * inter) * act_b  # one layer dequantised for its matmuls
    teacher = teacher_bytes(teacher_config, tokens=tokens, act_b=act_b) if teacher_config is not None else 0
    if chunked_loss and teacher_config is None:
        chunk = chunk_tokens(tokens, vocab, d, device_type=device_type)
        logits = chunk * vocab * (4 + 4 + act_b) + tokens * d * 4 + (head * 4 if method == "full" else 0)
    else:
        logits = tokens * vocab * (act_b + 4 + 4)
    overhead = int(GIB + 0.10 * (base + states + activations + logits + teacher)) if device_type == "cuda" else GIB // 2
    return FinetuneEstimate(
        base_weights=base,
        trainable_states=states,
        activations=activations,
        logits=logits,
        overhead=overhead,
        teacher=teacher,
    )


def teacher_bytes(config, *, tokens: int, act_b: int) -> int:
    """A frozen teacher's weights in the compute dtype and its logits (compute dtype + fp32 log-softmax)."""
    k = model_dims(config)
    head = k["d"] * k["vocab"]
    weights = matmul_parameters(config) + (0 if getattr(config, "tie_word_embeddings", False) else head)
    return weights * act_b + tokens * k["vocab"] * (act_b + 4)


def plan_finetune(
    config,
    *,
    info: HardwareInfo,
    method: str,
    lora_r: int,
    max_length: int,
    precision: str,
    batch_size: int | None = None,
    checkpointing: bool | None = None,
    chunked_loss: bool = True,
    usable_fraction: float = 0.9,
    teacher_config=None,
) -> tuple[int, bool, FinetuneEstimate, bool]:
    """(micro-batch, checkpointing, estimate, fits): the first of ``CANDIDATES`` that fits ``info``'s memory,
    keeping whatever the user fixed (``batch_size``, ``checkpointing``); the last candidate when none fits."""
    budget = int(info.memory_bytes * usable_fraction)
    options = [
        (b, c)
        for b, c in CANDIDATES
        if (batch_size is None or b == batch_size) and (checkpointing is None or c == checkpointing)
    ]
    if not options:
        options = [(batch_size or 1, bool(checkpointing))]
    for b, c in options:
        est = finetune_estimate(
            config,
            method=method,
            lora_r=lora_r,
            batch_size=b,
            max_length=max_length,
            precision=precision,
            checkpointing=c,
            chunked_loss=chunked_loss,
            teacher_config=teacher_config,
        )
        if est.total <= budget:
            return b, c, est, True
    return b, c, est, False


def finetune_defaults(cfg, *, run, base_name: str):
    """``cfg`` with the micro-batch, accumulation and checkpointing that `auto` picks on a CUDA device (the
    flags the user gave are kept); unchanged elsewhere (the CPU defaults stay: batch 2 x 4, no recomputation)."""
    if not _auto_applies(cfg, run) or cfg.deepspeed:
        return cfg
    from transformers import AutoConfig

    model_config = AutoConfig.from_pretrained(base_name, trust_remote_code=cfg.trust_remote_code)
    teacher = getattr(cfg, "teacher", None)  # distillation's frozen teacher
    return memory_defaults(
        cfg,
        run=run,
        model_config=model_config,
        method=cfg.method,
        lora_r=cfg.lora_settings()["lora_r"],
        max_length=cfg.max_length,
        teacher_config=AutoConfig.from_pretrained(teacher, trust_remote_code=cfg.trust_remote_code)
        if teacher
        else None,
    )


def training_share(info: HardwareInfo, cfg) -> HardwareInfo:
    """``info`` with the memory left to training: GRPO with ``--rollout-engine vllm`` gives vLLM
    ``--vllm-gpu-memory`` of every GPU (its weights and KV cache) before training allocates anything."""
    if getattr(cfg, "objective", None) == "grpo" and getattr(cfg, "rollout_engine", None) == "vllm":
        from dataclasses import replace

        return replace(info, memory_bytes=int(info.memory_bytes * (1 - cfg.vllm_gpu_memory)))
    return info


def _auto_applies(cfg, run) -> bool:
    """A CUDA run whose micro-batch or checkpointing the user left to `auto`."""
    want_batch = cfg.batch_size is None and cfg.gradient_accumulation_steps is None
    return (
        run.info.device_type == "cuda"
        and run.dist.device.type == "cuda"
        and (want_batch or cfg.gradient_checkpointing is None)
    )


def memory_defaults(cfg, *, run, model_config, method: str, lora_r: int, max_length: int, teacher_config=None):
    """``cfg`` with the micro-batch, accumulation and checkpointing that fit ``run.info`` for training
    ``model_config`` by ``method`` (``full`` for continued pretraining) on ``max_length``-token rows, beside a
    distillation teacher (``teacher_config``); the flags the user gave are kept, and nothing changes off CUDA."""
    from aura.train.args import with_defaults

    if not _auto_applies(cfg, run):
        return cfg
    info = training_share(run.info, cfg)
    want_batch = cfg.batch_size is None and cfg.gradient_accumulation_steps is None
    batch, ckpt, est, fits = plan_finetune(
        model_config,
        info=info,
        method=method,
        lora_r=lora_r,
        max_length=max_length,
        precision=run.precision,
        batch_size=None if want_batch else cfg.batch_size,
        checkpointing=cfg.gradient_checkpointing,
        teacher_config=teacher_config,
    )
    have, need = info.memory_bytes / GIB, est.total / GIB
    if fits:
        console.info(
            M(
                "plan",
                batch=batch,
                ckpt=M("ckpt") if ckpt else "",
                length=max_length,
                device=info.name,
                have=have,
                need=need,
            )
        )
    else:
        console.warn(M("none_fits", device=info.name, have=have, need=need))
    values = {"gradient_checkpointing": ckpt}
    if want_batch:
        values.update(batch_size=batch, gradient_accumulation_steps=max(1, ROWS_PER_STEP // batch))
    return with_defaults(cfg, **values)
