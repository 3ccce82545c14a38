"""Tokenizers as every stage uses them: load (an Aura dir, a model dir, a hub name), hash, pad and
chat tokens, the fast backend behind a transformers tokenizer.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from aura.core import console
from aura.core.errors import AuraError
from aura.core.files import read_json_object
from aura.core.i18n import Messages

EOS = "<|endoftext|>"


PAD = "<|pad|>"


CHAT_TOKENS = ["<|im_start|>", "<|im_end|>", "<|system|>", "<|user|>", "<|assistant|>"]


NUM_RESERVED = 8


SPECIAL_TOKENS = [EOS, PAD, *CHAT_TOKENS, *[f"<|reserved_{i}|>" for i in range(NUM_RESERVED)]]


BYTE_ALPHABET = 256


META_FILE = "aura_tokenizer.json"


M = Messages(
    "tokenizer",
    {
        "vocab_too_small": (
            "--vocab-size {size} es demasiado pequeño: hacen falta al menos {need:entrada|entradas} "
            "({special:token especial|tokens especiales} + 256 bytes) y algunas fusiones. Usa, por ejemplo, "
            "--vocab-size 8000 o más.",
            "--vocab-size {size} is too small: at least {need:entry|entries} are needed ({special} "
            "special tokens + 256 bytes) plus some merges. Use, e.g., --vocab-size 8000 or more.",
        ),
        "no_inputs": (
            "Indica los textos de entrenamiento: archivos, directorios, patrones o un directorio "
            "preparado con 'aura data prepare'.",
            "Give the training texts: files, directories, patterns or a directory prepared with 'aura data prepare'.",
        ),
        "no_docs": (
            "No quedan documentos para entrenar el tokenizador tras la limpieza.",
            "No documents are left to train the tokenizer on after cleaning.",
        ),
        "no_merges": (
            "Con tan poco texto ({docs:documento|documentos}) ningún par de símbolos aparece {min_freq:vez|veces} "
            "(--min-frequency): no se puede aprender ninguna fusión. Da más texto.",
            "With this little text ({docs:document|documents}) no pair of symbols occurs {min_freq:time|times} "
            "(--min-frequency): not a single merge can be learnt. Give more text.",
        ),
        "exists": (
            "{path} ya existe. Usa --overwrite para reemplazarlo o elige otro --output-dir.",
            "{path} already exists. Use --overwrite to replace it or choose another --output-dir.",
        ),
        "bad_min_freq": ("--min-frequency debe ser al menos 1.", "--min-frequency must be at least 1."),
        "bad_heldout": (
            "--heldout-fraction debe estar entre 0 y 0.5.",
            "--heldout-fraction must be between 0 and 0.5.",
        ),
        "training": (
            "Entrenando BPE a nivel de bytes (vocabulario {vocab}) con {files:fuente|fuentes}...",
            "Training byte-level BPE (vocabulary {vocab}) on {files:source|sources}...",
        ),
        "done": (
            "Tokenizador guardado en {path}: vocabulario {vocab}, fertilidad {fertility} tokens/palabra "
            "en {docs:documento reservado|documentos reservados}, {secs:.1f} s.",
            "Tokenizer saved to {path}: vocabulary {vocab}, fertility {fertility} tokens/word on {docs} "
            "held-out documents, {secs:.1f} s.",
        ),
        "vocab_short": (
            "El vocabulario tiene {got:token|tokens} y no los {asked:pedido|pedidos}: en este corpus "
            "({docs:documento|documentos}) no quedan pares de símbolos que aparezcan al menos "
            "{min_freq:vez|veces} "
            "(--min-frequency), así que BPE no puede hacer más fusiones. El tokenizador es válido; "
            "para llegar a {asked} hace falta más texto (o baja --min-frequency), o pide --vocab-size "
            "{got} para que coincida.",
            "The vocabulary has {got:token|tokens}, not the {asked} asked: in this corpus "
            "({docs:document|documents}) no pair of symbols is left that occurs at least "
            "{min_freq:time|times} (--min-frequency), so "
            "BPE cannot merge any further. The tokenizer is valid; reaching {asked} needs more text "
            "(or a lower --min-frequency), or ask for --vocab-size {got} to match.",
        ),
        "no_heldout_zero": (
            "Fertilidad sin medir: con --heldout-fraction 0 todos los documentos se usan para "
            "entrenar. Usa, p. ej., --heldout-fraction 0.05 para medirla.",
            "Fertility not measured: with --heldout-fraction 0 every document is used for "
            "training. Use, e.g., --heldout-fraction 0.05 to measure it.",
        ),
        "no_heldout_few": (
            "Fertilidad sin medir: ninguno de los {docs:documento|documentos} cayó en la fracción reservada "
            "(--heldout-fraction {fraction}), así que todos se usaron para entrenar. Con tan pocos "
            "documentos, sube --heldout-fraction (p. ej. 0.2) o da más texto (con --doc-sep "
            "blankline cada párrafo es un documento).",
            "Fertility not measured: none of the {docs:document|documents} fell in the held-out fraction "
            "(--heldout-fraction {fraction}), so all were used for training. With this few "
            "documents, raise --heldout-fraction (e.g. 0.2) or give more text (with --doc-sep "
            "blankline every paragraph is a document).",
        ),
        "done_nofert": (
            "Tokenizador guardado en {path}: vocabulario {vocab}, {secs:.1f} s.",
            "Tokenizer saved to {path}: vocabulary {vocab}, {secs:.1f} s.",
        ),
        "not_found": (
            "No se encontró el tokenizador '{name}': no es un directorio local con tokenizer.json "
            "ni se pudo descargar de Hugging Face ({err}). Entrena uno con 'aura tokenizer train' "
            "o revisa el nombre.",
            "Tokenizer '{name}' not found: it is not a local directory with tokenizer.json and it "
            "could not be downloaded from Hugging Face ({err}). Train one with 'aura tokenizer "
            "train' or check the name.",
        ),
        "missing_path": (
            "{flag} {name}: el tokenizador no existe (se lee como ruta local). Revisa que esté "
            "bien escrita, entrena uno con 'aura tokenizer train' o indica un nombre de Hugging Face.",
            "{flag} {name}: the tokenizer does not exist (read as a local path). Check the spelling, "
            "train one with 'aura tokenizer train' or give a Hugging Face name.",
        ),
        "bad_tokenizer": (
            "No se pudo cargar el tokenizador de {path}: {err}",
            "Could not load the tokenizer of {path}: {err}",
        ),
        "bad_tokenizer_file": (
            "{path} no es un tokenizador válido ({err}). {fix}",
            "{path} is not a valid tokenizer ({err}). {fix}",
        ),
        "bad_sources": (
            "{path}: 'sources' debe ser una lista de objetos con 'path' (es {value}). Indica los "
            "archivos de texto originales en lugar de la carpeta preparada, o prepárala de nuevo.",
            "{path}: 'sources' must be a list of objects with a 'path' (it is {value}). Give the original "
            "text files instead of the prepared folder, or prepare it again.",
        ),
        "fix_tokenizer": (
            "Vuelve a copiar la carpeta del tokenizador desde su origen o entrénalo de nuevo con "
            "'aura tokenizer train'.",
            "Copy the tokenizer folder again from where it came from, or train it again with 'aura tokenizer train'.",
        ),
        "pad_eos": (
            "El tokenizador no tiene token de relleno: se usa el de fin de texto ({eos}) como relleno.",
            "The tokenizer has no padding token: using the end-of-text token ({eos}) as padding.",
        ),
        "pad_added": (
            "El tokenizador no tiene token de relleno ni de fin de texto: se añade {pad} "
            "(recuerda redimensionar los embeddings del modelo).",
            "The tokenizer has no padding or end-of-text token: adding {pad} (remember to resize "
            "the model's embeddings).",
        ),
        "no_fast": (
            "El tokenizador '{name}' no tiene versión rápida (tokenizer.json); Aura necesita una.",
            "The tokenizer '{name}' has no fast version (tokenizer.json); Aura needs one.",
        ),
    },
)


def backend_json(tok) -> dict:
    """tokenizer.json content of a path, a ``tokenizers.Tokenizer`` or a transformers fast tokenizer."""
    if isinstance(tok, (str, os.PathLike)):
        p = Path(tok)
        p = p / "tokenizer.json" if p.is_dir() else p
        return json.loads(p.read_text(encoding="utf-8"))
    backend = getattr(tok, "backend_tokenizer", None) or getattr(tok, "_tokenizer", None) or tok
    if hasattr(backend, "to_str"):
        return json.loads(backend.to_str())
    raise TypeError("not a fast tokenizer")


def tokenizer_hash(tok) -> str:
    """sha256 of the canonical tokenizer.json content (model vocab+merges, normaliser, pre-tokeniser,
    added tokens): equal for a directory and for a tokenizer loaded from it."""
    try:
        data = backend_json(tok)
        canon = {
            "model": data.get("model"),
            "normalizer": data.get("normalizer"),
            "pre_tokenizer": data.get("pre_tokenizer"),
            "added_tokens": sorted(
                ((t["id"], t["content"], bool(t.get("special"))) for t in data.get("added_tokens") or []),
                key=lambda t: t[0],
            ),
        }
    except TypeError:  # a slow (Python) tokenizer: its vocabulary is its identity
        canon = {"vocab": sorted(tok.get_vocab().items(), key=lambda kv: kv[1])}
    blob = json.dumps(canon, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def load_tokenizer(
    name_or_path: str, *, trust_remote_code: bool = False, flag: str = "--tokenizer", training: bool = True
):
    """Any Hugging Face tokenizer (local directory or hub name), with a padding token. A missing path
    fails at once; an unreachable hub means the local cache only (``aura.core.hub``).

    The padding rule, the one Aura applies everywhere: the tokenizer's own, else Aura's reserved
    ``<|pad|>`` when the vocabulary has it, else the end-of-text token, else (training only: the
    embeddings get resized) a new ``<|pad|>``. Inference and export pass ``training=False``: a trained
    model's vocabulary must not grow, and the choice is not announced (it changes no output).
    """
    from transformers import AutoTokenizer

    from aura.core import hub

    name = str(name_or_path)
    if not Path(os.path.expanduser(name)).exists() and hub.looks_like_path(name):
        raise AuraError(M("missing_path", name=name, flag=flag))
    source = hub.resolve(name, flag=flag)
    try:
        tok = AutoTokenizer.from_pretrained(
            source.name, trust_remote_code=trust_remote_code, local_files_only=source.local_files_only
        )
    except Exception as e:  # OSError, HFValidationError, ValueError from hub/connection problems
        offline = hub.offline_error(source, flag=flag)
        if offline is not None:
            raise offline from None
        err = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        if source.local and any(Path(source.name, f).is_file() for f in ("tokenizer.json", "tokenizer_config.json")):
            check_tokenizer_files(source.name)  # names the damaged file when it is one of them
            raise AuraError(M("bad_tokenizer", path=source.name, err=err)) from None
        raise AuraError(M("not_found", name=name, err=err)) from None
    if tok.pad_token is None:
        if PAD in tok.get_vocab():
            tok.pad_token = PAD
        elif tok.eos_token is not None:
            tok.pad_token = tok.eos_token
            if training:
                console.info(M("pad_eos", eos=tok.eos_token))
        elif training:
            tok.add_special_tokens({"pad_token": PAD})
            console.info(M("pad_added", pad=PAD))
    return tok


def add_aura_chat_template(tok) -> bool:
    """Give a tokenizer that reserves Aura's chat tokens (``<|im_start|>``, ``<|im_end|>``) and has no
    chat template Aura's own, so a model pretrained with it can be fine-tuned on any data and chatted
    with. True when the template was added."""
    if getattr(tok, "chat_template", None):
        return False
    vocab = tok.get_vocab()
    if not all(t in vocab for t in CHAT_TOKENS[:2]):
        return False
    from aura.text.templates import AURA

    tok.chat_template = AURA
    return True


def backend_of(tok, name: str = ""):
    """The Rust ``tokenizers.Tokenizer`` behind a transformers tokenizer (a copy, safe to pickle)."""
    from tokenizers import Tokenizer

    backend = getattr(tok, "backend_tokenizer", None)
    if backend is None:
        raise AuraError(M("no_fast", name=name or getattr(tok, "name_or_path", "?")))
    return Tokenizer.from_str(backend.to_str())


TOKENIZER_JSON = ("tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "tokenizer.json")


def check_tokenizer_files(directory: str | os.PathLike):
    """Refuse a local tokenizer dir whose JSON files are not JSON objects, or whose tokenizer.json the
    ``tokenizers`` library cannot build, naming the file; returns that ``tokenizers.Tokenizer`` (None
    without a tokenizer.json)."""
    from tokenizers import Tokenizer

    d = Path(directory)
    for name in TOKENIZER_JSON:
        if (d / name).is_file():
            read_json_object(d / name, fix=M("fix_tokenizer"))
    if (d / "tokenizer.json").is_file():
        try:
            return Tokenizer.from_file(str(d / "tokenizer.json"))
        except Exception as e:  # noqa: BLE001 - the Rust library's errors share no Python type
            err = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise AuraError(
                M("bad_tokenizer_file", path=d / "tokenizer.json", err=err, fix=M("fix_tokenizer"))
            ) from None
    return None


def local_backend(name_or_path: str):
    """(``tokenizers.Tokenizer``, eos id) of a local directory with tokenizer.json, read without importing
    transformers (and torch: seconds of start-up); None when the directory needs transformers.

    Only a plain tokenizer directory qualifies: for a model directory (config.json) or a tokenizer class
    of its own, transformers may build the tokenizer from the model type with another pre-tokeniser
    (Qwen2 in transformers 5), and the data must be tokenised as training will tokenise it."""
    d = Path(os.path.expanduser(str(name_or_path)))
    if not (d / "tokenizer.json").is_file() or (d / "config.json").is_file():
        return None
    tok = check_tokenizer_files(d)
    config = d / "tokenizer_config.json"
    if config.is_file() and read_json_object(config).get("tokenizer_class") not in (
        None,
        "PreTrainedTokenizerFast",
        "TokenizersBackend",
    ):
        return None
    eos = None
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        f = d / name
        if f.is_file() and eos is None:
            eos = read_json_object(f).get("eos_token")
    eos = eos.get("content") if isinstance(eos, dict) else eos
    eos_id = tok.token_to_id(eos) if isinstance(eos, str) else None
    return None if eos_id is None else (tok, eos_id)
