"""Is this adapter being put on the base it was trained on? The one check every path uses.

Fine-tuning writes ``aura_adapter.json`` beside an adapter with the base's fingerprint (a hash of its
architecture config and a sample of its embedding weights). ``check_adapter_base`` is called by every
path that puts an adapter on a loaded base (merge, chat, generate, eval, fine-tuning ``--resume-from``)
before peft touches it:

* every LoRA matrix must fit the layer it modifies (otherwise peft fails deep inside with a shape error);
* with ``aura_adapter.json``: the base's config and embeddings must match the fingerprint (a base with
  another vocabulary or other weights has the same layer shapes, and peft would accept it silently);
  ``--allow-other-base`` turns that refusal into a warning, for users who know what they are doing;
* without it (an adapter made elsewhere): only the recorded base name can be compared (a warning).

Names are compared as models (``same_base``): one folder named once absolute and once relative, or a
byte-identical copy, is the same base and nothing is said.

Torch-free at import; used by ``aura.train``, ``aura.inference`` and ``aura.export`` alike.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from aura.core import console
from aura.core.atomic import read_json
from aura.core.errors import AuraError
from aura.core.i18n import Messages

ADAPTER_META = "aura_adapter.json"
ALLOW_FLAG = "--allow-other-base"
# Config keys that do not change which weights an adapter fits (paths, dtypes, runtime switches).
_VOLATILE_KEYS = {
    "_name_or_path",
    "transformers_version",
    "torch_dtype",
    "dtype",
    "quantization_config",
    "use_cache",
    "_attn_implementation",
    "_attn_implementation_autoset",
    "attn_implementation",
    "output_attentions",
    "output_hidden_states",
    "return_dict",
    "architectures",
    "auto_map",
    "_commit_hash",
    "pad_token_id",
    "tie_word_embeddings",
}

M = Messages(
    "adapter_check",
    {
        "wrong_base": (
            "El adaptador {path} se entrenó sobre '{saved}' pero el modelo base es '{now}' y no "
            "coincide ({what}). Usa el mismo modelo base con el que se entrenó{hint}.",
            "The adapter {path} was trained on '{saved}' but the base model is '{now}', which "
            "does not match ({what}). Use the base model it was trained on{hint}.",
        ),
        "hint": (" (o {flag} si sabes que es compatible)", " (or {flag} if you know it is compatible)"),
        "forced": (
            "El adaptador {path} se entrenó sobre '{saved}' y no coincide con '{now}' ({what}); se "
            "aplica igualmente por {flag}. El resultado puede no tener sentido.",
            "The adapter {path} was trained on '{saved}' and does not match '{now}' ({what}); it is "
            "applied anyway because of {flag}. The result may be meaningless.",
        ),
        "what_config": ("config.json distinto: {keys}", "different config.json: {keys}"),
        "what_embed": ("pesos de embeddings distintos", "different embedding weights"),
        "moved_base": (
            "El adaptador se entrenó sobre '{saved}'; se usa '{now}', que tiene la misma "
            "arquitectura y pesos de embeddings.",
            "The adapter was trained on '{saved}'; using '{now}', which has the same architecture "
            "and embedding weights.",
        ),
        "unverified_base": (
            "El adaptador {path} indica como base '{saved}' y se carga sobre '{now}'; sin "
            "aura_adapter.json no se puede comprobar que sean el mismo modelo.",
            "The adapter {path} names '{saved}' as its base and is being loaded onto '{now}'; "
            "without aura_adapter.json it cannot be checked that they are the same model.",
        ),
        "adapter_shape": (
            "El adaptador {adapter} no corresponde al modelo base {base}: la capa '{layer}' "
            "tiene forma {expected} (entrada, salida) en la base pero el adaptador espera "
            "{found}. El adaptador se entrenó sobre '{trained_on}'; usa ese modelo base.",
            "The adapter {adapter} does not fit the base model {base}: layer '{layer}' has "
            "shape {expected} (in, out) in the base but the adapter expects {found}. The adapter "
            "was trained on '{trained_on}'; use that base model.",
        ),
        "adapter_layer": (
            "El adaptador {adapter} modifica la capa '{layer}', que no existe en el modelo base "
            "{base}. El adaptador se entrenó sobre '{trained_on}'; usa ese modelo base.",
            "The adapter {adapter} changes layer '{layer}', which does not exist in the base "
            "model {base}. The adapter was trained on '{trained_on}'; use that base model.",
        ),
    },
)


def _unwrap(model):
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def _config_dict(base) -> dict:
    return {k: v for k, v in base.config.to_dict().items() if k not in _VOLATILE_KEYS}


def base_fingerprint(model) -> dict:
    """What identifies a base model for an adapter: its architecture config and its embedding weights
    (sampled, rounded to bf16 so a bf16 and an fp32 load of the same weights agree)."""
    import torch

    base = _unwrap(model)
    cfg = _config_dict(base)
    config_hash = hashlib.sha256(json.dumps(cfg, sort_keys=True, default=str).encode()).hexdigest()
    emb = base.get_input_embeddings().weight
    rows = torch.linspace(0, emb.shape[0] - 1, steps=min(16, emb.shape[0])).long()
    sample = emb.detach()[rows.to(emb.device), :64].to("cpu", torch.bfloat16).float()  # (16, 64)
    embed_hash = hashlib.sha256(sample.numpy().tobytes()).hexdigest()
    name = getattr(base.config, "_name_or_path", "") or getattr(base, "name_or_path", "")
    # the few config values a user recognises, to say what differs
    summary = {
        k: cfg[k]
        for k in ("model_type", "vocab_size", "hidden_size", "n_embd", "num_hidden_layers", "n_layer")
        if k in cfg
    }
    return {"base_model": str(name), "config_hash": config_hash, "embed_hash": embed_hash, "config_summary": summary}


def _in_out(module) -> tuple[int, int] | None:
    """(in, out) features of a linear-like layer: nn.Linear, bitsandbytes 4/8-bit, GPT-2 Conv1D, or a
    peft LoRA layer wrapping one."""
    module = getattr(module, "base_layer", module)
    if type(module).__name__ == "Conv1D":  # GPT-2 stores (in, out)
        return int(module.weight.shape[0]), int(module.nf)
    if hasattr(module, "in_features") and hasattr(module, "out_features"):
        return int(module.in_features), int(module.out_features)
    return None


def _check_shapes(adapter_dir: Path, base, *, base_name: str, trained_on: str) -> None:
    from safetensors import safe_open

    for f in sorted(adapter_dir.glob("adapter_model*.safetensors")):
        with safe_open(str(f), framework="pt") as sf:
            for key in sf.keys():
                part = ".lora_A." if ".lora_A." in key else ".lora_B." if ".lora_B." in key else None
                if part is None:
                    continue
                layer = key.split(part)[0].removeprefix("base_model.model.")
                try:
                    module = base.get_submodule(layer)
                except AttributeError:
                    module = None
                dims = _in_out(module) if module is not None else None
                if dims is None:
                    raise AuraError(
                        M("adapter_layer", adapter=adapter_dir, layer=layer, base=base_name, trained_on=trained_on)
                    )
                shape = tuple(sf.get_slice(key).get_shape())  # lora_A: (r, in), lora_B: (out, r)
                found = shape[1] if part == ".lora_A." else shape[0]
                expected = dims[0] if part == ".lora_A." else dims[1]
                if found != expected:
                    raise AuraError(
                        M(
                            "adapter_shape",
                            adapter=adapter_dir,
                            base=base_name,
                            layer=layer,
                            expected=list(dims),
                            found=found,
                            trained_on=trained_on,
                        )
                    )


def _differences(saved: dict, now: dict) -> str:
    if saved.get("config_hash") and saved["config_hash"] != now["config_hash"]:
        old, new = saved.get("config_summary") or {}, now["config_summary"]
        keys = [f"{k} {old[k]} → {new[k]}" for k in new if k in old and old[k] != new[k]]
        return M("what_config", keys=", ".join(keys) or "?")
    if saved.get("embed_hash") and saved["embed_hash"] != now["embed_hash"]:
        return M("what_embed")
    return ""


def _model_files(directory: Path) -> dict[str, int]:
    """A model dir's config and weight files -> their sizes."""
    return {
        p.name: p.stat().st_size
        for p in sorted(directory.iterdir())
        if p.is_file() and (p.name == "config.json" or p.suffix in (".safetensors", ".bin"))
    }


def same_base(saved: str, now: str) -> bool:
    """Do two names of a base model mean the same model? Equal names; one local folder named two ways
    (absolute and relative, through a link: the resolved paths agree); or two folders holding the same
    config and weights byte for byte (a copy). Hub names compare as names."""
    if saved == now:
        return True
    a, b = Path(os.path.expanduser(saved)), Path(os.path.expanduser(now))
    if not (a.is_dir() and b.is_dir()):
        return False
    try:
        if a.resolve() == b.resolve() or os.path.samefile(a, b):
            return True
        files = _model_files(a)
        if "config.json" not in files or files != _model_files(b):
            return False
        import filecmp

        return all(filecmp.cmp(a / name, b / name, shallow=False) for name in files)
    except OSError:
        return False


def check_adapter_base(
    adapter_dir: str | os.PathLike, base_model, *, allow_other_base: bool = False, flag: str | None = ALLOW_FLAG
) -> None:
    """Raise a clear error when ``adapter_dir`` does not belong on the loaded ``base_model``.

    ``allow_other_base``: a fingerprint mismatch is only a warning (layer shapes must still fit).
    ``flag``: the override flag the calling command offers (named in the error), None if it has none.
    """
    adapter_dir = Path(adapter_dir)
    base = _unwrap(base_model)
    saved_cfg = read_json(adapter_dir / "adapter_config.json")
    trained_on = saved_cfg.get("base_model_name_or_path") or "?"
    now = base_fingerprint(base)
    meta_file = adapter_dir / ADAPTER_META
    if not meta_file.is_file():  # an adapter made elsewhere: only the name can be compared
        _check_shapes(adapter_dir, base, base_name=now["base_model"], trained_on=trained_on)
        if (
            trained_on != "?"
            and not same_base(trained_on, now["base_model"])
            and Path(trained_on).name != Path(now["base_model"]).name
        ):
            console.warn(M("unverified_base", path=adapter_dir, saved=trained_on, now=now["base_model"]))
        return
    saved = read_json(meta_file)
    saved_name = saved.get("base_model") or trained_on
    what = _differences(saved, now)
    if what:
        if allow_other_base and flag:
            console.warn(M("forced", path=adapter_dir, saved=saved_name, now=now["base_model"], what=what, flag=flag))
            _check_shapes(adapter_dir, base, base_name=now["base_model"], trained_on=saved_name)
            return
        raise AuraError(
            M(
                "wrong_base",
                path=adapter_dir,
                saved=saved_name,
                now=now["base_model"],
                what=what,
                hint=M("hint", flag=flag) if flag else "",
            )
        )
    _check_shapes(adapter_dir, base, base_name=now["base_model"], trained_on=saved_name)
    if saved.get("base_model") and not same_base(saved["base_model"], now["base_model"]):
        console.info(M("moved_base", saved=saved["base_model"], now=now["base_model"]))
