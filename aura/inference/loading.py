"""Find and load models for inference, merge and export, with errors a user can act on.

A model argument may be a Hugging Face dir (``final/``, a merged or full fine-tuned model), a
checkpoint dir (``RUN_DIR/checkpoint-step-N``: weights + config, tokenizer maybe only in the run dir),
a peft adapter dir (its base comes from ``adapter_config.json`` or ``--model``), or a ``.gguf`` file
(run through llama.cpp). Never imports ``aura.train``.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

from aura.core.errors import AuraError
from aura.core.files import check_safetensors, read_json_object
from aura.core.i18n import Messages

M = Messages(
    "loading",
    {
        "missing": (
            "No existe el modelo {path}. Indica un directorio de modelo Hugging Face, un checkpoint, "
            "un adaptador o un archivo .gguf.",
            "The model {path} does not exist. Give a Hugging Face model dir, a checkpoint, an adapter or a .gguf file.",
        ),
        "not_model": (
            "{path} no parece un modelo: falta config.json (o adapter_config.json). Si es una "
            "ejecución, usa {path}/final o un {path}/checkpoint-step-N.",
            "{path} does not look like a model: config.json (or adapter_config.json) is missing. "
            "If it is a run dir, use {path}/final or a {path}/checkpoint-step-N.",
        ),
        "no_weights": (
            "{path} no contiene pesos (model.safetensors o model-*.safetensors).",
            "{path} holds no weights (model.safetensors or model-*.safetensors).",
        ),
        "dcp": (
            "{path} es un checkpoint FSDP2 (dcp/) sin model.safetensors; exporta primero el modelo "
            "completo (el directorio final/ de la ejecución).",
            "{path} is an FSDP2 checkpoint (dcp/) without model.safetensors; use the run's final/ "
            "dir, which holds the full model.",
        ),
        "no_tokenizer": (
            "No hay tokenizador para {path} (se buscó tokenizer.json / tokenizer_config.json "
            "en {searched}). Copia los archivos del tokenizador al directorio del modelo.",
            "No tokenizer found for {path} (looked for tokenizer.json / tokenizer_config.json "
            "in {searched}). Copy the tokenizer files into the model dir.",
        ),
        "adapter_no_base": (
            "El adaptador {path} no indica su modelo base (base_model_name_or_path); indícalo con --model.",
            "The adapter {path} does not name its base model (base_model_name_or_path); pass it with --model.",
        ),
        "adapter_base_missing": (
            "El modelo base del adaptador {adapter}, '{base}', no existe aquí. "
            "Indica el modelo base local con --model.",
            "The adapter {adapter}'s base model '{base}' is not here. Pass the local base model with --model.",
        ),
        "bad_adapter_field": (
            "{path}: '{field}' debe ser {expected} (es {found}). Vuelve a copiar el adaptador desde "
            "su origen o entrénalo de nuevo.",
            "{path}: '{field}' must be {expected} (it is {found}). Copy the adapter again from where "
            "it came from, or train it again.",
        ),
        "bad_config": (
            "{path} no es una configuración de modelo válida ({err}). Vuelve a copiar el modelo desde su "
            "origen o corrige ese campo.",
            "{path} is not a valid model configuration ({err}). Copy the model again from where it came "
            "from, or fix that field.",
        ),
        "not_adapter": (
            "{path} no es un adaptador peft: falta adapter_config.json.",
            "{path} is not a peft adapter: adapter_config.json is missing.",
        ),
        "gguf_bad": (
            "{path} no es un archivo GGUF válido o está truncado ({err}). Vuelve a exportarlo con 'aura export gguf'.",
            "{path} is not a valid GGUF file or is truncated ({err}). Export it again with 'aura export gguf'.",
        ),
        "no_llama_cpp": (
            "Para usar archivos GGUF hace falta llama-cpp-python: pip install llama-cpp-python",
            "GGUF files need llama-cpp-python: pip install llama-cpp-python",
        ),
        "llama_load": (
            "llama.cpp no pudo cargar {path} ({why}).{hint}",
            "llama.cpp could not load {path} ({why}).{hint}",
        ),
        "llama_load_hint": (
            " Si lo escribió Aura, vuelve a exportarlo con esta versión (aura export gguf lo verifica en "
            "llama.cpp); un archivo de otra procedencia puede necesitar otra llama-cpp-python (aquí "
            "{version}).",
            " If Aura wrote it, export it again with this version (aura export gguf verifies it in "
            "llama.cpp); a file from elsewhere may need another llama-cpp-python (here {version}).",
        ),
        "llama_load_phi3": (
            " Su nombre ('{name}') activa la regla de Phi-3 de llama.cpp, que busca <s>, </s>, <unk> y "
            "<|endoftext|> en el vocabulario: vuelve a exportarlo con esta versión de Aura, que no "
            "escribe ese nombre para un vocabulario sin ellos.",
            " Its name ('{name}') triggers llama.cpp's Phi-3 rule, which looks up <s>, </s>, <unk> and "
            "<|endoftext|> in the vocabulary: export it again with this version of Aura, which does "
            "not write that name for a vocabulary without them.",
        ),
        "gguf_adapter": (
            "--adapter no se puede usar con un archivo GGUF: fusiona primero (aura merge) y "
            "exporta el modelo fusionado.",
            "--adapter cannot be used with a GGUF file: merge first (aura merge) and export the merged model.",
        ),
    },
)

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")
END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|end_of_text|>", "</s>")


@dataclass
class ModelSource:
    """What a model argument points at: ``kind`` is "hf", "adapter" or "gguf"."""

    kind: str
    path: Path
    base: Path | None = None  # for adapters: the base model dir
    allow_other_base: bool = False  # --allow-other-base: a fingerprint mismatch only warns

    @property
    def weights_dir(self) -> Path:
        return self.base if self.kind == "adapter" and self.base else self.path


def read_json_file(path: Path) -> dict:
    """The JSON object of a model's config or manifest, or an AuraError naming the file."""
    return read_json_object(path)


def is_gguf_path(path: str | Path) -> bool:
    p = Path(path)
    if p.suffix.lower() == ".gguf":
        return True
    if not p.is_file():
        return False
    with open(p, "rb") as f:
        return f.read(4) == b"GGUF"


def check_weight_index(model_dir: Path) -> None:
    """Every file a safetensors index names lies in ``model_dir`` (no absolute path, no ``..``; links are
    allowed, as in Hugging Face's cache)."""
    from aura.core.paths import contained

    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        data = read_json_file(index)
        weight_map = data.get("weight_map") if isinstance(data, dict) else None
        for name in set(weight_map.values()) if isinstance(weight_map, dict) else ():
            contained(model_dir, str(name), source=index, follow_links=False)


def weight_files(model_dir: Path) -> list[Path]:
    check_weight_index(model_dir)
    files = sorted(model_dir.glob("model*.safetensors"))
    if not files:
        if (model_dir / "dcp").is_dir():
            raise AuraError(M("dcp", path=model_dir))
        raise AuraError(M("no_weights", path=model_dir))
    for f in files:
        check_safetensors(f)  # a cut-off copy is named here, not deep inside transformers
    return files


def resolve_model(
    model: str | Path, adapter: str | Path | None = None, *, allow_other_base: bool = False
) -> ModelSource:
    """Classify ``model`` (and an optional ``adapter``) without loading anything heavy. Whether an
    adapter belongs on its base is checked once the base is loaded (``load_hf``)."""
    path = Path(model)
    if not path.exists():
        raise AuraError(M("missing", path=path))
    if path.is_file() or is_gguf_path(path):
        if adapter:
            raise AuraError(M("gguf_adapter"))
        validate_gguf(path)
        return ModelSource("gguf", path)
    if adapter:
        adapter_dir = Path(adapter)
        check_adapter_files(adapter_dir)
        _require_config(path)
        weight_files(path)
        return ModelSource("adapter", adapter_dir, base=path, allow_other_base=allow_other_base)
    if (path / "adapter_config.json").is_file() and not (path / "config.json").is_file():
        check_adapter_files(path)
        base = adapter_base(path)
        _require_config(base)
        weight_files(base)
        return ModelSource("adapter", path, base=base, allow_other_base=allow_other_base)
    _require_config(path)
    check_weight_index(path)
    for f in sorted(path.glob("model*.safetensors")):
        check_safetensors(f)
    return ModelSource("hf", path)


def _require_config(path: Path) -> None:
    if not (path / "config.json").is_file():
        raise AuraError(M("not_model", path=path))
    read_json_file(path / "config.json")
    from transformers import AutoConfig

    try:  # a field of the wrong type fails here, named, rather than inside the tokenizer or model load
        AutoConfig.from_pretrained(str(path))
    except Exception as e:  # noqa: BLE001 - ValueError, KeyError, transformers' validation errors
        err = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise AuraError(M("bad_config", path=path / "config.json", err=f"{type(e).__name__}: {err}"[:300])) from None


def check_adapter_files(adapter_dir: Path) -> None:
    """A peft adapter dir whose adapter_config.json is a JSON object and whose weights are whole."""
    if not (adapter_dir / "adapter_config.json").is_file():
        raise AuraError(M("not_adapter", path=adapter_dir))
    cfg = read_json_file(adapter_dir / "adapter_config.json")
    for field, ok, expected in ADAPTER_FIELDS:
        if field in cfg and not ok(cfg[field]):
            raise AuraError(
                M(
                    "bad_adapter_field",
                    path=adapter_dir / "adapter_config.json",
                    field=field,
                    expected=expected,
                    found=repr(cfg[field])[:60],
                )
            )
    for f in sorted(adapter_dir.glob("adapter_model*.safetensors")):
        check_safetensors(f)


# adapter_config.json fields peft reads: a wrong type there fails deep inside peft
ADAPTER_FIELDS = (
    ("r", lambda v: type(v) is int and v > 0, "int > 0"),
    ("lora_alpha", lambda v: type(v) in (int, float), "int | float"),
    (
        "target_modules",
        lambda v: v is None or isinstance(v, str) or (isinstance(v, list) and all(isinstance(x, str) for x in v)),
        "list[str] | str",
    ),
    ("peft_type", lambda v: isinstance(v, str), "str"),
    ("base_model_name_or_path", lambda v: v is None or isinstance(v, str), "str"),
)


def adapter_base(adapter_dir: Path) -> Path:
    cfg = read_json_file(adapter_dir / "adapter_config.json")
    name = cfg.get("base_model_name_or_path")
    if not name:
        raise AuraError(M("adapter_no_base", path=adapter_dir))
    base = Path(name)
    if not base.is_absolute() and not base.exists():
        base = (adapter_dir / name).resolve()
    if not (base / "config.json").is_file():
        raise AuraError(M("adapter_base_missing", adapter=adapter_dir, base=name))
    return base


def find_tokenizer_dir(path: Path) -> Path:
    """The model dir if it has tokenizer files; else its run dir (checkpoints) or the run's final/."""
    candidates = [path, path.parent, path.parent / "final", path.parent / "tokenizer"]
    for c in candidates:
        if c.is_dir() and has_tokenizer(c):
            return c
    raise AuraError(M("no_tokenizer", path=path, searched=", ".join(str(c) for c in candidates)))


def has_tokenizer(path: Path) -> bool:
    return any((Path(path) / f).is_file() for f in TOKENIZER_FILES)


def tokenizer_dir_for(source: ModelSource) -> Path:
    """Adapters: their own tokenizer (fine-tuning may add tokens and a chat template), else the base's."""
    if source.kind == "adapter" and not has_tokenizer(source.path) and source.base is not None:
        return find_tokenizer_dir(source.base)
    return find_tokenizer_dir(source.path)


def load_model_tokenizer(path: Path):
    """The tokenizer that goes with a model dir (``find_tokenizer_dir``), loaded by Aura's one rule
    (``aura.tokenizer.loading.load_tokenizer``) without ever growing the model's vocabulary."""
    from aura.tokenizer.loading import load_tokenizer

    return load_tokenizer(str(find_tokenizer_dir(path)), training=False)


def end_of_turn_ids(tok) -> list[int]:
    """EOS plus the end-of-turn tokens the chat template uses (``<|im_end|>`` ...), deduplicated."""
    ids = [tok.eos_token_id] if tok.eos_token_id is not None else []
    template = getattr(tok, "chat_template", None) or ""
    vocab = tok.get_vocab()
    for t in END_OF_TURN_TOKENS:
        if t in vocab and t in template and vocab[t] not in ids:
            ids.append(vocab[t])
    return ids


def quiet_transformers() -> None:
    """Aura prints its own progress; transformers' per-load bars and deprecation chatter are noise here."""
    import warnings

    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"transformers\..*")
    warnings.filterwarnings("ignore", category=UserWarning, module=r"peft\..*")


def torch_dtype(name: str):
    import torch

    return {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[name]


def load_hf(source: ModelSource, *, dtype: str = "float32", device: str = "cpu", merge: bool = False):
    """(model, tokenizer) for an "hf" or "adapter" source; adapters load on an unquantised base."""
    from transformers import AutoModelForCausalLM

    quiet_transformers()
    tok = load_model_tokenizer(tokenizer_dir_for(source))
    model = AutoModelForCausalLM.from_pretrained(str(source.weights_dir), dtype=torch_dtype(dtype))
    if getattr(model.config, "quantization_config", None) is not None:
        model = model.dequantize()
    if source.kind == "adapter":
        from aura.models.peft_import import import_peft, peft_quiet

        import_peft()
        from peft import PeftModel

        from aura.models.adapter_check import check_adapter_base

        if len(tok) > model.get_input_embeddings().weight.shape[0]:
            model.resize_token_embeddings(len(tok))  # as fine-tuning did before taking the fingerprint
        check_adapter_base(source.path, model, allow_other_base=source.allow_other_base)
        with peft_quiet():
            model = PeftModel.from_pretrained(model, str(source.path))
        if merge:
            model = model.merge_and_unload()
    model.to(device).eval()
    return model, tok


def validate_gguf(path: Path) -> dict:
    """Read a GGUF's header, metadata and tensor table; raise a clear error if it is damaged.

    llama.cpp may abort the whole process on a damaged file, so it never sees one.
    """
    import gguf

    try:
        if not is_gguf_path(path) or path.stat().st_size < 8 or not _has_magic(path):
            raise ValueError("missing GGUF magic")
        reader = gguf.GGUFReader(str(path))
        end = max((int(t.data_offset) + int(t.n_bytes) for t in reader.tensors), default=0)
        if end > path.stat().st_size:
            raise ValueError(f"tensor data ends at byte {end} but the file has {path.stat().st_size}")
        meta = {}
        for key in ("general.architecture", "tokenizer.chat_template", "tokenizer.ggml.eos_token_id"):
            field = reader.get_field(key)
            if field is not None:
                meta[key] = field.contents()
        return meta
    except AuraError:
        raise
    except Exception as e:  # noqa: BLE001 - anything the reader chokes on means a bad file
        raise AuraError(M("gguf_bad", path=path, err=e)) from None


def _has_magic(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(4) == b"GGUF"


@contextlib.contextmanager
def _llama_log(quiet: bool):
    """llama.cpp's C-level stderr, and llama-cpp-python's log lines (printed to sys.stderr), kept in a file while
    ``quiet`` (a vocab-only load warns about a context it never uses; a failed load's log is read back), else
    passed through."""
    if not quiet:
        yield lambda: ""
        return
    import io
    import sys
    import tempfile

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as log:
        said = io.StringIO()  # what llama-cpp-python prints to sys.stderr, where that is not fd 2
        os.dup2(log.fileno(), 2)
        try:
            with contextlib.redirect_stderr(said):
                yield lambda: (log.seek(0) or log.read().decode("utf-8", errors="replace")) + said.getvalue()
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)


def _load_failure(path: Path, err: Exception, **kwargs) -> str:
    """The message of a failed load: llama.cpp's own error lines (the load tried once more with its log on,
    kept here: llama-cpp-python silences it unless verbose), and what to do."""
    from importlib import metadata

    import llama_cpp

    with _llama_log(True) as log, llama_cpp_weights_plain():
        try:
            llama_cpp.Llama(model_path=str(path), **{**kwargs, "verbose": True}).close()
        except ValueError:
            pass
        finally:
            with contextlib.suppress(ImportError, AttributeError):
                from llama_cpp._logger import set_verbose

                set_verbose(False)  # verbose=True left llama.cpp's logger at DEBUG for the whole process
        text = log()
    lines = [ln.strip() for ln in text.splitlines()]
    errors = [ln for ln in lines if "error" in ln.lower()]
    why = "; ".join(dict.fromkeys(errors[-3:])) or str(err)
    try:
        version = metadata.version("llama_cpp_python")
    except metadata.PackageNotFoundError:
        version = "?"
    hint = M("llama_load_hint", version=version)
    if "unordered_map::at" in why:
        try:
            import gguf

            field = gguf.GGUFReader(str(path)).get_field("general.name")
            name = field.contents() if field is not None else ""
        except Exception:  # noqa: BLE001 - the hint is a bonus; the load error is the message
            name = ""
        if any(k in str(name).lower() for k in ("phi-3", "phi3")):
            hint = M("llama_load_phi3", name=name)
    return M("llama_load", path=path, why=why, hint=hint)


def _cpu_has_amx() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and "amx_int8" in line.split() for line in f)
    except OSError:
        return False


@contextlib.contextmanager
def llama_cpp_weights_plain():
    """Around the building of a ``llama_cpp.Llama`` (a load, or a server's model): on a CPU with AMX,
    llama.cpp keeps its weights in plain buffers instead of its AMX (and repacked) layouts. There its AMX
    matmul segfaults on Q8_0 files, its own quantiser's included (llama.cpp issue 20824; seen with
    llama-cpp-python 0.3.36 built natively on a Xeon with AMX, single-threaded too), and
    ``Llama(use_extra_bufts=False)`` is silently ignored by that release, so the default model parameters
    are amended while the model loads. Elsewhere llama.cpp's defaults stay (its AVX2 repacking of Q4_0)."""
    if not _cpu_has_amx():
        yield
        return
    from llama_cpp import llama_cpp as lib

    default = lib.llama_model_default_params

    def plain_params():
        params = default()
        params.use_extra_bufts = False
        return params

    lib.llama_model_default_params = plain_params
    try:
        yield
    finally:
        lib.llama_model_default_params = default


def require_llama_cpp():
    try:
        import llama_cpp
    except ImportError:
        raise AuraError(M("no_llama_cpp")) from None
    return llama_cpp


def load_llama(
    path: Path,
    *,
    n_ctx: int = 0,
    logits_all: bool = False,
    vocab_only: bool = False,
    seed: int = 0,
    n_threads: int | None = None,
    verbose: bool = False,
):
    """A llama_cpp.Llama for a validated GGUF (on a CPU with AMX, without AMX buffers: ``llama_cpp_weights_plain``)."""
    llama_cpp = require_llama_cpp()
    validate_gguf(path)
    if vocab_only and not n_ctx:
        n_ctx = 64  # a vocab-only load has no trained context length, and 0 would mean "use it"
    kwargs = dict(n_ctx=n_ctx, logits_all=logits_all, vocab_only=vocab_only, seed=seed, n_threads=n_threads)
    try:
        with _llama_log(vocab_only), llama_cpp_weights_plain():
            return llama_cpp.Llama(model_path=str(path), verbose=verbose, **kwargs)
    except ValueError as e:  # llama-cpp-python reports load failures as ValueError
        raise AuraError(_load_failure(path, e, **kwargs)) from None
