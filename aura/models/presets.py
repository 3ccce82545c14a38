"""Model presets -> Hugging Face configs; build, count parameters, FLOPs per token.

Every model Aura trains is a stock transformers class (``LlamaForCausalLM``, ``Qwen3ForCausalLM`` or
``GPT2LMHeadModel``)
built from a config, so a run's ``final/`` loads anywhere transformers does. ``ModelSpec`` holds the
shape; the vocabulary size always comes from the tokenizer.

Presets (``--model-preset``):

==================  =====  ======  ======  ====  ========  =====  =========
name                arch   d_model layers  heads kv heads  MLP    context
==================  =====  ======  ======  ====  ========  =====  =========
tiny                llama  256     4       4     2         768    256
gpt2-small          gpt2   768     12      12    12        3072   1024
gpt2-medium         gpt2   1024    24      16    16        4096   1024
aura-72h-extended   llama  2048    24      16    8         5632   2048
aura-72h-max        llama  2560    32      20    4         7168   2048
qwen3-tiny          qwen3  256     4       4     2         768    256
qwen3-small         qwen3  768     12      12    4         2048   1024
qwen3-medium        qwen3  1024    24      16    8         2816   1024
qwen3-500m          qwen3  1536    16      12    4         4096   2048
qwen3-72h           qwen3  2048    24      16    8         5632   2048
==================  =====  ======  ======  ====  ========  =====  =========

The ``qwen3-*`` presets are the Qwen3 block of transformers' ``Qwen3ForCausalLM`` (RMSNorm on the queries
and keys of every head, QK-norm; SwiGLU; RoPE; GQA; untied head), with the attention and MLP output
projections zero-initialised (every block starts as the identity, as in modded-nanogpt).

Llama MLP sizes are multiples of 256 so every row splits into 32-wide Q8_0 GGUF blocks.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from aura.core.errors import AuraError
from aura.core.i18n import Messages

M = Messages(
    "models",
    {
        "unknown_preset": (
            "Preset de modelo desconocido '{name}'. Opciones: {valid}.",
            "Unknown model preset '{name}'. Choices: {valid}.",
        ),
        "bad_arch": (
            "--arch debe ser 'llama', 'gpt2' o 'qwen3', no '{arch}'.",
            "--arch must be 'llama', 'gpt2' or 'qwen3', not '{arch}'.",
        ),
        "manual_missing": (
            "El preset 'manual' necesita {fields}. Ejemplo: --model-preset manual --arch llama "
            "--embed-size 512 --num-layers 8 --num-heads 8 --seq-length 1024",
            "The 'manual' preset needs {fields}. Example: --model-preset manual --arch llama "
            "--embed-size 512 --num-layers 8 --num-heads 8 --seq-length 1024",
        ),
        "heads_divide": (
            "--embed-size ({d}) debe ser múltiplo de --num-heads ({h}).",
            "--embed-size ({d}) must be a multiple of --num-heads ({h}).",
        ),
        "kv_divide": (
            "--num-heads ({h}) debe ser múltiplo de --num-kv-heads ({kv}).",
            "--num-heads ({h}) must be a multiple of --num-kv-heads ({kv}).",
        ),
        "gpt2_kv": (
            "GPT-2 no admite --num-kv-heads distinto de --num-heads ({h}); usa --arch llama para GQA.",
            "GPT-2 does not support --num-kv-heads other than --num-heads ({h}); use --arch llama for GQA.",
        ),
        "positive": (
            "{field} debe ser un entero positivo (recibido: {value}).",
            "{field} must be a positive integer (got: {value}).",
        ),
        "custom_config": (
            "Config personalizada '{name}': d_model={d}, layers={layers}, heads={heads}, seq_len={seq}",
            "Custom config '{name}': d_model={d}, layers={layers}, heads={heads}, seq_len={seq}",
        ),
    },
)


@dataclass(frozen=True)
class ModelSpec:
    """The shape of a decoder-only transformer; ``arch`` picks the transformers class."""

    name: str
    arch: str  # "llama" | "gpt2"
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    seq_len: int
    intermediate_size: int

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        return M(
            "custom_config", name=self.name, d=self.d_model, layers=self.n_layers, heads=self.n_heads, seq=self.seq_len
        )


PRESETS: dict[str, ModelSpec] = {
    "tiny": ModelSpec("tiny", "llama", 256, 4, 4, 2, 256, 768),
    "gpt2-small": ModelSpec("gpt2-small", "gpt2", 768, 12, 12, 12, 1024, 3072),
    "gpt2-medium": ModelSpec("gpt2-medium", "gpt2", 1024, 24, 16, 16, 1024, 4096),
    "aura-72h-extended": ModelSpec("aura-72h-extended", "llama", 2048, 24, 16, 8, 2048, 5632),
    "aura-72h-max": ModelSpec("aura-72h-max", "llama", 2560, 32, 20, 4, 2048, 7168),
    "qwen3-tiny": ModelSpec("qwen3-tiny", "qwen3", 256, 4, 4, 2, 256, 768),
    "qwen3-small": ModelSpec("qwen3-small", "qwen3", 768, 12, 12, 4, 1024, 2048),
    "qwen3-medium": ModelSpec("qwen3-medium", "qwen3", 1024, 24, 16, 8, 1024, 2816),
    # ~0.5 B at vocab 32000: the compute-optimal size of the 72-hour guide's 58 pretraining hours on an 80 GB A100
    # (aura.models.size_budget), between qwen3-medium (349 M) and qwen3-72h (1.26 B); head dim 128 as qwen3-72h
    "qwen3-500m": ModelSpec("qwen3-500m", "qwen3", 1536, 16, 12, 4, 2048, 4096),
    "qwen3-72h": ModelSpec("qwen3-72h", "qwen3", 2048, 24, 16, 8, 2048, 5632),
}
ARCHS = ("llama", "gpt2", "qwen3")


@dataclass(frozen=True)
class PresetTraining:
    """A preset's training defaults, for the flags the user does not give (``auto`` picks its own)."""

    batch_size: int  # micro-batch per process
    learning_rate: float
    save_steps: int
    # None: decided from the memory model on the device at hand (aura.models.hardware.needs_checkpointing): the
    # 72-hour guide's models need it on a 40 GB GPU, not on an 80 GB one (where it costs 25-30 % throughput)
    gradient_checkpointing: bool | None = False
    optimizer: str = "adamw"  # the recipe (docs/training.md, "Receta"): --optimizer and --lr-schedule
    lr_schedule: str = "cosine"

    def to_defaults(self) -> dict[str, Any]:
        return asdict(self)


PRESET_TRAINING: dict[str, PresetTraining] = {
    "tiny": PresetTraining(16, 1e-3, 100),
    "gpt2-small": PresetTraining(8, 6e-4, 500),
    "gpt2-medium": PresetTraining(8, 3e-4, 500),
    "aura-72h-extended": PresetTraining(2, 3e-4, 500, gradient_checkpointing=None),
    "aura-72h-max": PresetTraining(2, 2e-4, 500, gradient_checkpointing=None),
    # the modern recipe where bench/bench_recipe.py measured it (docs/training.md): Muon + WSD
    "qwen3-tiny": PresetTraining(16, 1e-3, 100, optimizer="muon", lr_schedule="wsd"),
    "qwen3-small": PresetTraining(8, 6e-4, 500, optimizer="muon", lr_schedule="wsd"),
    "qwen3-medium": PresetTraining(8, 3e-4, 500, optimizer="muon", lr_schedule="wsd"),
    "qwen3-500m": PresetTraining(4, 3e-4, 500, gradient_checkpointing=None, optimizer="muon", lr_schedule="wsd"),
    "qwen3-72h": PresetTraining(2, 3e-4, 500, gradient_checkpointing=None, optimizer="muon", lr_schedule="wsd"),
}
MANUAL_TRAINING = PresetTraining(8, 3e-4, 500)  # --model-preset manual


def preset_training(preset: str) -> PresetTraining:
    """The training defaults of ``preset`` (``manual``: MANUAL_TRAINING)."""
    return PRESET_TRAINING.get(preset, MANUAL_TRAINING)


def _check_positive(field: str, value: int | None) -> None:
    if value is not None and (not isinstance(value, int) or value <= 0):
        raise AuraError(M("positive", field=field, value=value))


def resolve_spec(
    preset: str,
    *,
    arch: str | None = None,
    embed_size: int | None = None,
    num_layers: int | None = None,
    num_heads: int | None = None,
    num_kv_heads: int | None = None,
    seq_length: int | None = None,
    intermediate_size: int | None = None,
) -> ModelSpec:
    """A preset with explicit overrides applied, or a fully ``manual`` spec; validated."""
    for field, value in (
        ("--embed-size", embed_size),
        ("--num-layers", num_layers),
        ("--num-heads", num_heads),
        ("--num-kv-heads", num_kv_heads),
        ("--seq-length", seq_length),
        ("--intermediate-size", intermediate_size),
    ):
        _check_positive(field, value)
    if arch is not None and arch not in ARCHS:
        raise AuraError(M("bad_arch", arch=arch))
    if preset == "manual":
        missing = [
            f
            for f, v in (
                ("--embed-size", embed_size),
                ("--num-layers", num_layers),
                ("--num-heads", num_heads),
                ("--seq-length", seq_length),
            )
            if v is None
        ]
        if missing:
            raise AuraError(M("manual_missing", fields=", ".join(missing)))
        arch = arch or "llama"
        assert embed_size and num_heads and num_layers and seq_length
        kv = num_kv_heads or num_heads
        if intermediate_size is None:
            # Llama: ~8/3 d rounded up to a multiple of 256 (Q8_0-friendly); GPT-2: 4 d.
            intermediate_size = (-(-(8 * embed_size // 3) // 256) * 256) if arch != "gpt2" else 4 * embed_size
        spec = ModelSpec("manual", arch, embed_size, num_layers, num_heads, kv, seq_length, intermediate_size)
    else:
        if preset not in PRESETS:
            raise AuraError(M("unknown_preset", name=preset, valid=", ".join([*PRESETS, "manual", "auto"])))
        spec = PRESETS[preset]
        changes: dict[str, Any] = {}
        for key, value in (
            ("arch", arch),
            ("d_model", embed_size),
            ("n_layers", num_layers),
            ("n_heads", num_heads),
            ("n_kv_heads", num_kv_heads),
            ("seq_len", seq_length),
            ("intermediate_size", intermediate_size),
        ):
            if value is not None:
                changes[key] = value
        if changes:
            if "n_heads" in changes and "n_kv_heads" not in changes:
                changes["n_kv_heads"] = (
                    changes["n_heads"] if spec.n_kv_heads == spec.n_heads else min(spec.n_kv_heads, changes["n_heads"])
                )
            spec = replace(spec, **changes)
    if spec.d_model % spec.n_heads:
        raise AuraError(M("heads_divide", d=spec.d_model, h=spec.n_heads))
    if spec.n_heads % spec.n_kv_heads:
        raise AuraError(M("kv_divide", h=spec.n_heads, kv=spec.n_kv_heads))
    if spec.arch == "gpt2" and spec.n_kv_heads != spec.n_heads:
        raise AuraError(M("gpt2_kv", h=spec.n_heads))
    return spec


def hf_config(
    spec: ModelSpec,
    vocab_size: int,
    *,
    bos_token_id: int | None = None,
    eos_token_id: int | None = None,
    pad_token_id: int | None = None,
):
    """The transformers config for ``spec`` (dropout off: pretraining on a stream rarely repeats data)."""
    if spec.arch == "gpt2":
        from transformers import GPT2Config

        cfg = GPT2Config(
            vocab_size=vocab_size,
            n_positions=spec.seq_len,
            n_embd=spec.d_model,
            n_layer=spec.n_layers,
            n_head=spec.n_heads,
            n_inner=spec.intermediate_size,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            # torch's fused tanh GELU: GPT-2's formula (transformers' default "gelu_new" spells
            # it out in five element-wise kernels), equal within float rounding
            activation_function="gelu_pytorch_tanh",
            bos_token_id=bos_token_id,
            eos_token_id=eos_token_id,
            pad_token_id=pad_token_id,
        )
    elif spec.arch == "qwen3":
        from transformers import Qwen3Config

        cfg = Qwen3Config(
            vocab_size=vocab_size,
            hidden_size=spec.d_model,
            num_hidden_layers=spec.n_layers,
            num_attention_heads=spec.n_heads,
            num_key_value_heads=spec.n_kv_heads,
            head_dim=spec.head_dim,
            intermediate_size=spec.intermediate_size,
            max_position_embeddings=spec.seq_len,
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
            attention_bias=False,
            attention_dropout=0.0,
            use_sliding_window=False,
            bos_token_id=bos_token_id,
            eos_token_id=eos_token_id,
            pad_token_id=pad_token_id,
        )
    else:
        from transformers import LlamaConfig

        cfg = LlamaConfig(
            vocab_size=vocab_size,
            hidden_size=spec.d_model,
            num_hidden_layers=spec.n_layers,
            num_attention_heads=spec.n_heads,
            num_key_value_heads=spec.n_kv_heads,
            intermediate_size=spec.intermediate_size,
            max_position_embeddings=spec.seq_len,
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            attention_dropout=0.0,
            bos_token_id=bos_token_id,
            eos_token_id=eos_token_id,
            pad_token_id=pad_token_id,
        )
    return cfg


def build_model(
    spec: ModelSpec,
    vocab_size: int,
    *,
    bos_token_id: int | None = None,
    eos_token_id: int | None = None,
    pad_token_id: int | None = None,
    device=None,
):
    """A randomly initialised HF causal LM (fp32 master weights, SDPA attention) for ``spec``, built and
    initialised on ``device`` (default: the CPU): on a GPU a 2.4B model is not first written to 10 GB of
    host memory per rank by a serial CPU initialisation."""
    import torch
    from transformers import AutoModelForCausalLM

    cfg = hf_config(spec, vocab_size, bos_token_id=bos_token_id, eos_token_id=eos_token_id, pad_token_id=pad_token_id)
    with torch.device(device or "cpu"):
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")
    if spec.arch == "qwen3":
        zero_output_projections(model)
    return model


def zero_output_projections(model) -> None:
    """Attention and MLP output projections (``o_proj``, ``down_proj``) set to zero: every block starts as
    the identity and the residual stream carries the embeddings unchanged at step 0 (modded-nanogpt)."""
    import torch

    with torch.no_grad():
        for name, module in model.named_modules():
            if name.endswith(("self_attn.o_proj", "mlp.down_proj")):
                module.weight.zero_()


def count_parameters(model, *, trainable_only: bool = False) -> int:
    """Unique parameters (tied embeddings counted once), or only the trainable ones. A peft model
    counts its 4-bit weights at their real size (``get_nb_trainable_parameters``), as peft reports them."""
    if hasattr(model, "get_nb_trainable_parameters"):
        trainable, total = model.get_nb_trainable_parameters()
        return trainable if trainable_only else total
    seen: set[int] = set()
    total = 0
    for p in model.parameters():
        if trainable_only and not p.requires_grad:
            continue
        if id(p) in seen:
            continue
        seen.add(id(p))
        total += p.numel()
    return total


def model_dims(config) -> dict[str, int | bool]:
    """Shape fields of a transformers config, whatever its family names them."""

    def get(*names, default=None):
        return next(
            (getattr(config, n) for n in names if getattr(config, n, None) is not None),
            default,
        )

    d = int(get("hidden_size", "n_embd", "d_model"))
    heads = int(get("num_attention_heads", "n_head"))
    kv = int(get("num_key_value_heads", default=heads))
    inter = get("intermediate_size", "n_inner", "ffn_dim")
    gated = getattr(config, "model_type", "") not in ("gpt2", "gpt_neox", "opt", "gptj", "bloom", "falcon")
    return {
        "d": d,
        "layers": int(get("num_hidden_layers", "n_layer")),
        "heads": heads,
        "kv": kv,
        "inter": int(inter) if inter else 4 * d,
        "vocab": int(config.vocab_size),
        "gated": gated,
        "head_dim": int(get("head_dim", default=d // heads)),
    }


def matmul_parameters(config) -> int:
    """Parameters that take part in matrix multiplies per token (layers + LM head, no embedding lookup)."""
    k = model_dims(config)
    d, hd = k["d"], k["head_dim"]
    attn = d * (k["heads"] * hd) + 2 * d * (k["kv"] * hd) + (k["heads"] * hd) * d
    mlp = (3 if k["gated"] else 2) * d * k["inter"]
    return k["layers"] * (attn + mlp) + d * k["vocab"]


def flops_per_token(config, seq_len: int | None = None, *, trainable_parameters: int | None = None) -> float:
    """Training FLOPs per token (forward + backward), PaLM appendix B: 6 N + 12 L d T.

    With a frozen base (LoRA / QLoRA: pass the adapter's ``trainable_parameters``) no weight gradient is
    computed for the base: 2 N forward + 2 N for the activations' gradients = 4 N, plus 6 per trainable
    parameter (the attention term is unchanged: it has no weights).

    ``N`` counts matmul parameters (LM head included, embedding lookup excluded); the attention term
    covers QK^T and AV over a context of ``seq_len`` tokens. Activation recomputation is not counted,
    so MFU stays comparable with and without gradient checkpointing.
    """
    k = model_dims(config)
    if seq_len is None:
        seq_len = context_length(config)
    n = matmul_parameters(config)
    dense = 6.0 * n if trainable_parameters is None else 4.0 * n + 6.0 * trainable_parameters
    return dense + 12.0 * k["layers"] * k["heads"] * k["head_dim"] * seq_len


def context_length(config) -> int | None:
    """The most positions a Hugging Face model config can attend to (Llama-style ``max_position_embeddings``,
    GPT-2 ``n_positions``); None when the config says neither."""
    for key in ("max_position_embeddings", "n_positions", "n_ctx"):
        value = getattr(config, key, None)
        if value:
            return int(value)
    return None


def hidden_matrix_parameters(spec: ModelSpec) -> int:
    """Parameters of the blocks' 2-D weights (attention and MLP projections): what Muon orthogonalises."""
    d, L, i = spec.d_model, spec.n_layers, spec.intermediate_size
    if spec.arch == "gpt2":
        return L * (3 * d * d + d * d + 2 * d * i)
    kvd = spec.n_kv_heads * spec.head_dim
    return L * (2 * d * d + 2 * d * kvd + 3 * d * i)


def spec_parameters(spec: ModelSpec, vocab_size: int) -> int:
    """Parameters of ``spec`` without building it (for the memory model and the presets table)."""
    d, L, i = spec.d_model, spec.n_layers, spec.intermediate_size
    kvd = spec.n_kv_heads * spec.head_dim
    if spec.arch == "gpt2":
        per_layer = (d * 3 * d + 3 * d) + (d * d + d) + (d * i + i) + (i * d + d) + 4 * d
        return vocab_size * d + spec.seq_len * d + L * per_layer + 2 * d  # LM head tied to wte
    per_layer = d * d + 2 * d * kvd + d * d + 3 * d * i + 2 * d
    if spec.arch == "qwen3":
        per_layer += 2 * spec.head_dim  # QK-norm gains
    return 2 * vocab_size * d + L * per_layer + d
