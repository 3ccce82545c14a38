"""Model set-up for fine-tuning: base model loading, LoRA / QLoRA (peft, bitsandbytes) or full.

* ``load_base_model``: any Hugging Face causal LM, by local directory (offline) or hub name, including
  Aura's own ``final/`` dirs; QLoRA loads it in 4-bit NF4 through bitsandbytes.
* ``setup_model``: LoRA adapters on every attention and MLP projection (discovered generically from the
  model's linear layers) or all weights trainable for full fine-tuning; prints the
  "trainable params: N / total (x %)" line of the original guide.
* ``save_finetuned``: the adapter (adapter_config.json, adapter_model.safetensors) or a full HF model
  dir in safetensors, plus tokenizer (with its chat template) and ``aura_adapter.json`` (the base's
  fingerprint), written atomically.
* ``load_adapter``: an adapter back onto its base (resume, chat, merge); another base -> clear error.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from aura.core import console, hub
from aura.core.atomic import atomic_write_json, read_json
from aura.core.errors import AuraError
from aura.core.files import check_model_files
from aura.core.i18n import Messages
from aura.core.staging import staged_dir
from aura.models.adapter_check import ADAPTER_META, base_fingerprint, check_adapter_base  # noqa: F401 - re-exported
from aura.models.peft_import import import_peft, peft_quiet
from aura.models.presets import count_parameters

METHODS = ("lora", "qlora", "full")
CAUSAL_LM, SEQ_CLS = "causal_lm", "sequence_classification"  # the heads a base model is loaded with
SCORE = "score"  # the one-output head transformers puts on a causal LM's backbone for sequence classification
LORA_PRESETS = {"frida": {"lora_r": 64, "lora_alpha": 128, "lora_dropout": 0.05}}
M = Messages(
    "adapters",
    {
        "base_missing": (
            "No existe el modelo base '{name}'. Indica un directorio de modelo de Hugging Face "
            "(con config.json), p. ej. el final/ de 'aura pretrain', o un nombre del hub como "
            "'mistralai/Mistral-7B-Instruct-v0.2'.",
            "The base model '{name}' does not exist. Give a Hugging Face model directory (with "
            "config.json), e.g. the final/ of 'aura pretrain', or a hub name such as "
            "'mistralai/Mistral-7B-Instruct-v0.2'.",
        ),
        "base_not_model": (
            "'{name}' existe pero no es un modelo: le falta config.json.{hint} Indica el "
            "directorio de un modelo de Hugging Face, p. ej. el final/ de 'aura pretrain'.",
            "'{name}' exists but is not a model: it has no config.json.{hint} Give a Hugging "
            "Face model directory, e.g. the final/ of 'aura pretrain'.",
        ),
        "run_hint": (" Parece una ejecución: usa {path}.", " It looks like a run dir: use {path}."),
        "base_failed": (
            "No se pudo cargar el modelo base '{name}': {err}",
            "Could not load the base model '{name}': {err}",
        ),
        "no_bnb": (
            "QLoRA necesita bitsandbytes, que no está instalado. Instálalo con: pip install bitsandbytes "
            "(o pip install 'aura-llm[qlora]'), o usa --method lora.",
            "QLoRA needs bitsandbytes, which is not installed. Install it with: pip install "
            "bitsandbytes (or pip install 'aura-llm[qlora]'), or use --method lora.",
        ),
        "bad_targets": (
            "El modelo no tiene las capas {missing} pedidas en --target-modules. Capas lineales "
            "del modelo: {available}.",
            "The model has no layers {missing} requested in --target-modules. The model's linear layers: {available}.",
        ),
        "trainable": (
            "Parámetros entrenables: {trainable:,} / {total:,} ({pct:.2f}%)",
            "Trainable params: {trainable:,} / {total:,} ({pct:.2f}%)",
        ),
        "resized": (
            "El tokenizador tiene {tokens:token|tokens} y el modelo {rows:fila|filas} de embeddings: se amplían "
            "los embeddings (las filas nuevas no se entrenan).",
            "The tokenizer has {tokens:token|tokens} and the model {rows} embedding rows: the embeddings "
            "are enlarged (the new rows are not trained).",
        ),
        "no_adapter": (
            "{path} no es un adaptador LoRA (falta adapter_config.json).",
            "{path} is not a LoRA adapter (adapter_config.json is missing).",
        ),
        "packing_leaks": (
            "Con este modelo ({arch}, atención {attn}) los ejemplos empaquetados se ven entre sí: "
            "transformers no separa las secuencias a partir de position_ids. Entrena sin --packing "
            "o usa otra implementación de atención (--attn-implementation).",
            "With this model ({arch}, {attn} attention) packed examples see each other: "
            "transformers does not separate sequences from position_ids. Train without --packing "
            "or use another attention implementation (--attn-implementation).",
        ),
    },
)


def resolve_base(name_or_path: str) -> str:
    """A local model dir (absolute) or a hub name; a missing local path, or a folder that is not a
    model, is a clear error at once."""
    name = str(name_or_path)
    local = Path(os.path.expanduser(name))
    if local.exists():
        if not (local / "config.json").is_file():
            final = local / "final"
            hint = M("run_hint", path=final) if (final / "config.json").is_file() else ""
            raise AuraError(M("base_not_model", name=name, hint=hint))
        check_model_files(local)  # a damaged config or cut-off weights: named before anything is written
        return str(local.resolve())
    if hub.looks_like_path(name):
        raise AuraError(M("base_missing", name=name))
    return name


def require_bitsandbytes() -> None:
    try:
        import bitsandbytes  # noqa: F401
    except ImportError:
        raise AuraError(M("no_bnb")) from None


def load_base_model(
    name_or_path: str,
    *,
    method: str = "lora",
    dtype=None,
    device=None,
    attn_implementation: str | None = None,
    trust_remote_code: bool = False,
    head: str = CAUSAL_LM,
):
    """The base causal LM, on ``device``; 4-bit NF4 (compute in ``dtype``) for ``method='qlora'``. With
    ``head=SEQ_CLS`` the same backbone under transformers' ``...ForSequenceClassification`` with one output
    (a reward model; a causal LM's folder gets a new ``score`` head, initialised from the torch RNG)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    name = resolve_base(name_or_path)
    source = hub.Source(
        name, local=Path(name).is_dir(), local_files_only=not Path(name).is_dir() and not hub.hub_reachable()
    )
    dtype = dtype or torch.float32
    kwargs: dict = {"dtype": dtype, "trust_remote_code": trust_remote_code, "local_files_only": source.local_files_only}
    auto = AutoModelForCausalLM
    if head == SEQ_CLS:
        auto, kwargs["num_labels"] = AutoModelForSequenceClassification, 1
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    if method == "qlora":
        require_bitsandbytes()
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=dtype
        )
        # bitsandbytes quantizes while loading onto the target device
        kwargs["device_map"] = {"": str(device) if device is not None else "cpu"}
    try:
        with _quiet_new_head() if head == SEQ_CLS else contextlib.nullcontext():
            model = auto.from_pretrained(name, **kwargs)
    except (OSError, ValueError) as e:  # not a model dir, no connection, unknown architecture
        offline = hub.offline_error(source, flag="--base-model")
        if offline is not None:
            raise offline from None
        raise AuraError(
            M("base_failed", name=name, err=str(e).splitlines()[0] if str(e) else type(e).__name__)
        ) from None
    if method != "qlora" and device is not None:
        model.to(device)
    return model


@contextlib.contextmanager
def _quiet_new_head():
    """transformers' report that the ``score`` head is new (a reward model made from a causal LM: expected)."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)


def linear_module_names(model) -> list[str]:
    """Leaf names of the model's linear layers (nn.Linear, GPT-2 Conv1D, bitsandbytes 4/8-bit), in
    model order, without the output head: q_proj…down_proj for Llama/Mistral, c_attn, c_proj, c_fc
    for GPT-2."""
    import torch

    kinds: tuple[type, ...] = (torch.nn.Linear,)
    try:
        from transformers.pytorch_utils import Conv1D

        kinds += (Conv1D,)
    except ImportError:  # pragma: no cover - very old transformers
        pass
    head = model.get_output_embeddings()
    names: list[str] = []
    for full_name, module in model.named_modules():
        if module is head or not isinstance(module, kinds) and "Linear" not in type(module).__name__:
            continue
        if not hasattr(module, "weight"):
            continue
        leaf = full_name.rsplit(".", 1)[-1]
        if leaf not in names and not leaf.startswith("lora_"):
            names.append(leaf)
    return names


def resolve_target_modules(model, requested: list[str] | None) -> list[str]:
    """``--target-modules`` (default: every linear layer except the head), checked against the model."""
    available = linear_module_names(model)
    if not requested or requested in (["all"], ["all-linear"]):
        return available
    missing = [t for t in requested if t not in available]
    if missing:
        raise AuraError(M("bad_targets", missing=", ".join(missing), available=", ".join(available)))
    return list(requested)


def match_vocab(model, tokenizer) -> None:
    """Enlarge the embeddings when the tokenizer gained tokens (e.g. a pad token added)."""
    rows = model.get_input_embeddings().weight.shape[0]
    if len(tokenizer) > rows:
        console.warn(M("resized", tokens=len(tokenizer), rows=rows))
        model.resize_token_embeddings(len(tokenizer))


def setup_model(
    model,
    *,
    method: str,
    lora_r: int = 16,
    lora_alpha: int = 32,
    lora_dropout: float = 0.05,
    target_modules: list[str] | None = None,
    gradient_checkpointing: bool = False,
    head: str = CAUSAL_LM,
):
    """Make ``model`` ready to train: a peft LoRA model (``lora``/``qlora``) or all weights trainable. A
    reward model's (``head=SEQ_CLS``) LoRA leaves its new ``score`` head out of the adapted layers and trains
    it whole (peft's ``modules_to_save``, saved with the adapter)."""
    if method == "full":
        for p in model.parameters():
            p.requires_grad_(True)
        if gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        return model
    import_peft()
    from peft import LoraConfig, get_peft_model

    targets = resolve_target_modules(model, target_modules)
    if head == SEQ_CLS:
        targets = [t for t in targets if t != SCORE]
    if method == "qlora":
        from peft import prepare_model_for_kbit_training

        # fp32 norms/head for stability, input grads for checkpointing (peft's recipe for k-bit bases)
        model = prepare_model_for_kbit_training(
            model,
            use_gradient_checkpointing=gradient_checkpointing,
            gradient_checkpointing_kwargs={"use_reentrant": False},
        )
    elif gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    from transformers.pytorch_utils import Conv1D

    conv1d = any(isinstance(m, Conv1D) for m in model.modules())  # GPT-2 stores weights transposed
    config = LoraConfig(
        r=lora_r,
        lora_alpha=lora_alpha,
        lora_dropout=lora_dropout,
        target_modules=targets,
        bias="none",
        task_type="SEQ_CLS" if head == SEQ_CLS else "CAUSAL_LM",
        fan_in_fan_out=conv1d,
        modules_to_save=[SCORE] if head == SEQ_CLS else None,
    )
    with peft_quiet():
        model = get_peft_model(model, config)
    if head == SEQ_CLS:
        _score_in_fp32(model)
    return model


def _score_in_fp32(model) -> None:
    """The trained copy of a reward model's score head in fp32, as peft keeps LoRA's adapters (it copies a
    module to save in the base's dtype: bf16 on a GPU); the base's hidden states are cast to it, so it also
    runs outside autocast."""
    import torch

    def to_fp32(module, args):
        return tuple(a.float() if torch.is_tensor(a) else a for a in args)

    for name, module in model.named_modules():
        if name.split(".")[-3:-1] == [SCORE, "modules_to_save"]:
            module.float().register_forward_pre_hook(to_fp32)


def keep_autocast_inputs(model) -> int:
    """Every LoRA layer of ``model`` stops casting its input to the adapter's dtype while autocast runs in
    the input's dtype; returns how many layers.

    peft keeps adapters in fp32 and casts each adapted projection's input to fp32 before ``lora_A``
    (``BaseTunerLayer._cast_input_dtype``); under bf16/fp16 autocast ``lora_A``'s matmul casts it straight
    back. The round trip is exact (16 bits to 32 and back), so skipping it changes no number, and it saves
    two copies of the activation per adapted projection, forward and backward (~340 per forward for 24
    layers x 7 projections): kernel launches that leave a GPU idle on small models. Outside autocast (an
    fp32 run, an evaluation without it) peft's cast is kept: there it is needed."""
    import types

    from peft.tuners.tuners_utils import BaseTunerLayer

    count = 0
    for module in model.modules():
        if isinstance(module, BaseTunerLayer) and hasattr(module, "_cast_input_dtype"):
            module._cast_input_dtype = types.MethodType(_cast_unless_autocast, module)
            count += 1
    return count


def _cast_unless_autocast(layer, x, dtype):
    import torch

    if (
        x is not None
        and x.dtype != dtype
        and torch.is_autocast_enabled(x.device.type)
        and x.dtype == torch.get_autocast_dtype(x.device.type)
    ):
        return x  # autocast gives lora_A this very tensor after the round trip: skip it
    return type(layer)._cast_input_dtype(layer, x, dtype)


def trainable_line(model) -> str:
    trainable, total = count_parameters(model, trainable_only=True), count_parameters(model)
    return M("trainable", trainable=trainable, total=total, pct=100.0 * trainable / max(total, 1))


# ---------------------------------------------------------------------------------------------------
# Base fingerprint, saving and loading


def write_model_files(
    model,
    directory: str | os.PathLike,
    state_dict: dict | None = None,
    *,
    method: str,
    template_name: str | None = None,
    extra: dict | None = None,
    fingerprint: dict | None = None,
) -> None:
    """Weights into an existing dir (the loop's ``write(model, dir, state_dict)`` hook): the peft adapter
    (adapter_config.json, adapter_model.safetensors) or a full HF model in safetensors, plus
    ``aura_adapter.json`` (method, template, the base's fingerprint). ``state_dict``: the full state
    gathered from FSDP2 shards, None to read the model's own. ``fingerprint``: the base's, taken before
    the model was sharded (under FSDP2 the embedding is a DTensor that rank 0 alone cannot read)."""
    directory = Path(directory)
    fingerprint = fingerprint or base_fingerprint(model)
    if method == "full":
        model.save_pretrained(str(directory), state_dict=state_dict, safe_serialization=True)
    else:  # peft keeps only the adapter's tensors from the (possibly gathered) state dict
        model.save_pretrained(str(directory), state_dict=state_dict)
    atomic_write_json(
        directory / ADAPTER_META, {"method": method, "template": template_name, **fingerprint, **(extra or {})}
    )


def save_finetuned(
    model,
    tokenizer,
    out_dir: str | os.PathLike,
    *,
    method: str,
    template_name: str | None = None,
    extra: dict | None = None,
    replace: bool = True,
) -> Path:
    """Adapter or full model + tokenizer (chat template included) + aura_adapter.json, atomically."""
    out_dir = Path(out_dir)
    with staged_dir(out_dir, replace=replace, kind="model" if method == "full" else "adapter") as tmp:
        write_model_files(model, tmp, method=method, template_name=template_name, extra=extra)
        write_tokenizer_files(tokenizer, tmp)
    return out_dir


def write_tokenizer_files(tokenizer, directory: str | os.PathLike) -> None:
    """Tokenizer files with the chat template inside, and the template as chat_template.jinja too (so
    chat and GGUF export find it whatever the tokenizer format)."""
    tokenizer.save_pretrained(str(directory))
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, str) and not (Path(directory) / "chat_template.jinja").is_file():
        (Path(directory) / "chat_template.jinja").write_text(template, encoding="utf-8")


def is_adapter_dir(path: str | os.PathLike) -> bool:
    return (Path(path) / "adapter_config.json").is_file()


def load_adapter(base_model, adapter_dir: str | os.PathLike, *, is_trainable: bool = True):
    """``PeftModel`` of ``adapter_dir`` on ``base_model`` (checked to be the base it was trained on)."""
    import_peft()
    from peft import PeftModel

    adapter_dir = Path(adapter_dir)
    if not is_adapter_dir(adapter_dir):
        raise AuraError(M("no_adapter", path=adapter_dir))
    check_adapter_base(adapter_dir, base_model, flag=None)
    with peft_quiet():
        return PeftModel.from_pretrained(base_model, str(adapter_dir), is_trainable=is_trainable)


def load_adapter_weights(peft_model, adapter_dir: str | os.PathLike) -> None:
    """Resume: load a saved adapter's weights into a peft model set up with the same flags (same
    parameter order, so the optimizer state saved beside it loads as is)."""
    import_peft()
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    adapter_dir = Path(adapter_dir)
    if not is_adapter_dir(adapter_dir):
        raise AuraError(M("no_adapter", path=adapter_dir))
    check_adapter_base(adapter_dir, peft_model, flag=None)
    weights = load_file(str(adapter_dir / "adapter_model.safetensors"))
    result = set_peft_model_state_dict(peft_model, weights)
    unexpected = [k for k in getattr(result, "unexpected_keys", []) if "lora_" in k]
    if unexpected:  # a layer the adapter changes but this model's LoRA set-up lacks (other --target-modules)
        from aura.models.adapter_check import M as CM

        raise AuraError(
            CM(
                "adapter_layer",
                adapter=adapter_dir,
                layer=unexpected[0],
                base=base_fingerprint(peft_model)["base_model"],
                trained_on=read_json(adapter_dir / "adapter_config.json").get("base_model_name_or_path", "?"),
            )
        )


def packing_is_isolated(model, *, say: bool = True) -> bool:
    """Whether ``model`` keeps packed examples apart when position_ids restart at 0 and no attention
    mask is given (what ``SFTDataSource(packing=True)`` yields): two random sequences are run packed and
    alone, and the second one's logits must match. A few tokens of compute; False means cross-example
    attention (an architecture whose mask ignores packed position_ids), said unless ``say`` is False."""
    import torch

    device = next(model.parameters()).device
    vocab = model.get_input_embeddings().weight.shape[0]
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randint(0, vocab, (1, n), generator=g).to(device) for n in (6, 5))  # (1, 6), (1, 5)
    positions = torch.cat([torch.arange(6), torch.arange(5)])[None].to(device)  # (1, 11)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            packed = model(input_ids=torch.cat([a, b], 1), position_ids=positions, use_cache=False).logits
            alone = model(input_ids=b, use_cache=False).logits  # (1, 5, V)
    finally:
        model.train(was_training)
    ok = torch.allclose(packed[:, 6:].float(), alone.float(), atol=1e-2, rtol=1e-2)
    if not ok and say:
        cfg = getattr(model, "config", None)
        console.warn(
            M("packing_leaks", arch=getattr(cfg, "model_type", "?"), attn=getattr(cfg, "_attn_implementation", "?"))
        )
    return ok
