"""``aura merge``: fold a LoRA/QLoRA adapter into its base model -> a plain Hugging Face model dir.

The base is always loaded unquantised (fp32, then saved in ``--dtype``): a QLoRA adapter was trained
against a 4-bit base, but merging into 4-bit weights would round the update away and leave a model
that only bitsandbytes can read. The adapter is checked against the loaded base
(``aura.models.adapter_check``: the fingerprint fine-tuning saved, every LoRA matrix against the layer it
modifies), so an adapter for another model fails with both names instead of writing a broken model.
The output dir is built under a temporary name and renamed at the end.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from aura import __version__
from aura.core import console
from aura.core.config import arg
from aura.core.errors import AuraError
from aura.core.i18n import Messages

M = Messages(
    "merge",
    {
        "need": ("Faltan --base-model y/o --adapter.", "--base-model and/or --adapter are missing."),
        "need_out": (
            "Falta --output-dir (directorio del modelo fusionado).",
            "--output-dir is missing (dir for the merged model).",
        ),
        "exists": (
            "{path} ya existe; usa --overwrite para reemplazarlo.",
            "{path} already exists; use --overwrite to replace it.",
        ),
        "loading": (
            "Cargando la base {base} sin cuantizar y el adaptador {adapter}…",
            "Loading the unquantised base {base} and the adapter {adapter}…",
        ),
        "resized": (
            "El tokenizador del adaptador tiene {tokens:token|tokens} y la base {rows}: se amplían los embeddings.",
            "The adapter's tokenizer has {tokens:token|tokens} and the base {rows}: embeddings are resized.",
        ),
        "done": (
            "Modelo fusionado en {path} ({dtype}, {params:parámetro|parámetros}, {seconds:.1f} s).",
            "Merged model written to {path} ({dtype}, {params:parameter|parameters}, {seconds:.1f} s).",
        ),
        "next": (
            "Siguiente paso: aura export gguf --model {path} --quant q8_0",
            "Next step: aura export gguf --model {path} --quant q8_0",
        ),
    },
)


@dataclass
class MergeConfig:
    base_model: str = arg("", es="Directorio del modelo base (sin cuantizar).", en="Base model dir (unquantised).")
    adapter: str = arg(
        "",
        es="Directorio del adaptador LoRA/QLoRA (adapter_config.json).",
        en="LoRA/QLoRA adapter dir (adapter_config.json).",
    )
    output_dir: str = arg("", es="Directorio del modelo fusionado.", en="Dir for the merged model.")
    dtype: str = arg(
        "auto",
        es="Tipo de los pesos guardados (auto = el de la base).",
        en="Dtype of the saved weights (auto = the base's).",
        choices=("auto", "float32", "float16", "bfloat16"),
    )
    overwrite: bool = arg(
        False, es="Reemplazar --output-dir si existe.", en="Replace --output-dir if it exists.", deprecated=["--force"]
    )
    allow_other_base: bool = arg(
        False,
        es="Fusionar aunque el adaptador se entrenara sobre otro modelo base (distinto config.json o embeddings).",
        en="Merge even if the adapter was trained on another base model (different config.json or embeddings).",
    )

    def __post_init__(self):
        if not self.base_model or not self.adapter:
            raise AuraError(M("need"))
        if not self.output_dir:
            raise AuraError(M("need_out"))


def _saved_dtype(choice: str, base_config: dict) -> str:
    if choice != "auto":
        return choice
    found = base_config.get("dtype") or base_config.get("torch_dtype")
    return found if found in ("float32", "float16", "bfloat16") else "float32"


def merge(cfg: MergeConfig) -> int:
    from aura.core.ownership import check_replaceable

    # Never into the base, the adapter or a directory holding them; only an Aura model dir is replaced.
    # Checked before torch is even imported: a refusal is immediate.
    out = Path(cfg.output_dir)
    if check_replaceable(out, kind="model", inputs=[cfg.base_model, cfg.adapter]) == "owned" and not cfg.overwrite:
        raise AuraError(M("exists", path=out))
    from aura.core.atomic import check_writable
    from aura.core.locks import output_lock

    check_writable(out, flag="--output-dir")
    with output_lock(out, command="merge"):  # a second merge into ``out`` is refused, naming the first
        return _merge(cfg, out)


def _set_generation(model, tok, base_dir: Path) -> list[int]:
    """The merged model's generation config: the base's (or one from the model's config), ending at the
    tokenizer's end-of-turn ids, with its pad and BOS ids; returns those end ids."""
    from transformers import GenerationConfig

    from aura.inference.loading import end_of_turn_ids

    gen_file = base_dir / "generation_config.json"
    gen = (
        GenerationConfig.from_pretrained(str(base_dir))
        if gen_file.is_file()
        else GenerationConfig.from_model_config(model.config)
    )
    eos = end_of_turn_ids(tok)
    gen.eos_token_id = eos[0] if len(eos) == 1 else eos
    gen.pad_token_id = tok.pad_token_id
    if tok.bos_token_id is not None:
        gen.bos_token_id = tok.bos_token_id
    model.generation_config = gen
    model.config.eos_token_id = tok.eos_token_id
    model.config.pad_token_id = tok.pad_token_id
    return eos


def _merge(cfg: MergeConfig, out: Path) -> int:
    import torch
    from transformers import AutoModelForCausalLM

    from aura.core.atomic import atomic_write_json
    from aura.core.ownership import check_location
    from aura.core.staging import staged_dir
    from aura.inference.loading import (
        load_model_tokenizer,
        quiet_transformers,
        read_json_file,
        resolve_model,
        tokenizer_dir_for,
        torch_dtype,
    )
    from aura.models.adapter_check import check_adapter_base

    source = resolve_model(cfg.base_model, cfg.adapter)
    base_dir, adapter_dir = source.base, source.path
    check_location(out, inputs=[base_dir, adapter_dir])  # as resolved (e.g. the base the adapter names)
    base_config = read_json_file(base_dir / "config.json")
    dtype = _saved_dtype(cfg.dtype, base_config)
    t0 = time.perf_counter()
    quiet_transformers()
    console.info(M("loading", base=base_dir, adapter=adapter_dir))

    # The adapter's tokenizer wins: fine-tuning may have added tokens (and resized the embeddings).
    tok = load_model_tokenizer(tokenizer_dir_for(source))
    model = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
    if getattr(model.config, "quantization_config", None) is not None:
        model = model.dequantize()  # a base saved in 4-bit: merge into its dequantised weights
    rows = model.get_input_embeddings().weight.shape[0]
    if len(tok) > rows:
        console.info(M("resized", tokens=len(tok), rows=rows))
        model.resize_token_embeddings(len(tok))
    check_adapter_base(adapter_dir, model, allow_other_base=cfg.allow_other_base)
    from aura.models.deepspeed_import import save_pretrained
    from aura.models.peft_import import import_peft, peft_quiet

    import_peft()
    from peft import PeftModel

    with peft_quiet():
        model = PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()
    model = model.to(torch_dtype(dtype)).eval()

    eos = _set_generation(model, tok, base_dir)

    with staged_dir(out, replace=True, kind="model") as tmp:
        save_pretrained(model, tmp)
        tok.save_pretrained(str(tmp))
        atomic_write_json(
            tmp / "aura_merge.json",
            {
                "base_model": str(base_dir),
                "adapter": str(adapter_dir),
                "adapter_config": read_json_file(adapter_dir / "adapter_config.json"),
                "dtype": dtype,
                "eos_token_ids": eos,
                "aura_version": __version__,
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            },
        )
    params = sum(p.numel() for p in model.parameters())
    console.success(M("done", path=out, dtype=dtype, params=params, seconds=time.perf_counter() - t0))
    console.info(M("next", path=out))
    return 0
