"""``aura tokenizer extend BASE TEXTS... --add-tokens N``: teach a BPE tokenizer Spanish words it lacks.

BPE training continues on the texts from the base's own segmentation (``continue_bpe``): the words are
cut as the base cuts them and the most frequent adjacent pair is merged, again and again; the first N
merge results the base lacks are the N new tokens, with ids after every id of the base (a merge whose
result the base already has costs no row and is kept too).

The base's tokenization is never made worse: the new merges go after all of the base's, and BPE applies
merges by rank, so every base merge that can apply does so first and a new merge can only join two tokens
of the base's segmentation. Every word is therefore cut at a subset of the places the base cuts it: never
more tokens, the same tokens where no new one fits, and every base token keeps its id (a model trained
with the base reads them as before; ``aura pretrain --init-from BASE --tokenizer OUT`` grows the
embeddings, ``aura.train.init_from``). The directory loads in ``AutoTokenizer`` and exports to GGUF
(llama.cpp applies merges by rank as well). Fertility (tokens per word) and bytes per token on held-out
texts are reported before and after.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from aura import __version__
from aura.core import console
from aura.core.config import arg
from aura.core.errors import AuraError
from aura.core.i18n import Messages, num
from aura.text.readers import ReaderArgs

META_FILE = "aura_tokenizer.json"

M = Messages(
    "tokenizer_extend",
    {
        "no_base": (
            "Indica el tokenizador base (directorio o nombre del hub) y los textos: "
            "aura tokenizer extend BASE TEXTOS... --add-tokens N --output-dir DIR",
            "Give the base tokenizer (directory or hub name) and the texts: "
            "aura tokenizer extend BASE TEXTS... --add-tokens N --output-dir DIR",
        ),
        "no_inputs": (
            "Faltan los textos en español tras el tokenizador base {base}.",
            "The Spanish texts after the base tokenizer {base} are missing.",
        ),
        "bad_n": (
            "--add-tokens debe ser mayor que 0 (recibido: {n}).",
            "--add-tokens must be greater than 0 (got: {n}).",
        ),
        "bad_heldout": (
            "--heldout-fraction debe estar en (0, 0.5] para medir la fertilidad (recibido: {value}).",
            "--heldout-fraction must be in (0, 0.5] to measure fertility (got: {value}).",
        ),
        "not_bpe": (
            "{base} usa un modelo de tokenización '{model}'; solo se pueden ampliar tokenizadores BPE (GPT-2, "
            "Llama, Mistral, Qwen2...).",
            "{base} uses a '{model}' tokenization model; only BPE tokenizers (GPT-2, Llama, Mistral, "
            "Qwen2...) can be extended.",
        ),
        "too_many": (
            "--add-tokens {n} daría {total:token|tokens}, más de lo que admite el embedding "
            "({limit}: --max-vocab, o el límite de ids de 32 bits de los datos preparados). Pide menos tokens.",
            "--add-tokens {n} would give {total:token|tokens}, more than the embedding can be resized to "
            "({limit}: --max-vocab, or the 32-bit id limit of prepared data). Ask for fewer tokens.",
        ),
        "training": (
            "Aprendiendo fusiones nuevas sobre la segmentación de {base} en {files:fuente|fuentes}...",
            "Learning new merges on top of the segmentation of {base} in {files:source|sources}...",
        ),
        "short": (
            "Solo se encontraron {got:token nuevo|tokens nuevos} útiles; se pidieron {asked}: el texto no "
            "da para más. El tokenizador es válido; da más texto para añadir más.",
            "Only {got:useful new token|useful new tokens} found of the {asked} asked: the text gives no more. "
            "The tokenizer is valid; give more text to add more.",
        ),
        "no_heldout": (
            "Ningún documento cayó en la fracción reservada (--heldout-fraction {fraction}): la fertilidad "
            "no se mide. Sube --heldout-fraction o da más documentos.",
            "No document fell in the held-out fraction (--heldout-fraction {fraction}): fertility is not "
            "measured. Raise --heldout-fraction or give more documents.",
        ),
        "exists": (
            "{path} ya existe. Usa --overwrite para reemplazarlo o elige otro --output-dir.",
            "{path} already exists. Use --overwrite to replace it or choose another --output-dir.",
        ),
        "done": (
            "Tokenizador ampliado guardado en {path}: {base_n} + {added:token nuevo|tokens nuevos} = {total}, "
            "{secs:.1f} s.",
            "Extended tokenizer saved to {path}: {base_n} + {added:new token|new tokens} = {total}, {secs:.1f} s.",
        ),
        "h_measure": (
            "Medida ({docs:documento reservado|documentos reservados})",
            "Measure ({docs:held-out document|held-out documents})",
        ),
        "h_title": ("Texto reservado, antes y después", "Held-out text, before and after"),
        "h_base": ("Tokenizador base", "Base tokenizer"),
        "h_ext": ("Ampliado", "Extended"),
        "r_fert": ("Fertilidad (tokens/palabra)", "Fertility (tokens/word)"),
        "r_bpt": ("Bytes por token", "Bytes per token"),
        "next": (
            "Siguiente paso: aura data prepare TEXTOS --tokenizer {path} --output-dir DATOS; después "
            "aura pretrain --init-from MODELO --tokenizer {path} --data DATOS",
            "Next: aura data prepare TEXTS --tokenizer {path} --output-dir DATA; then "
            "aura pretrain --init-from MODEL --tokenizer {path} --data DATA",
        ),
    },
)

UINT32_IDS = 2**32


@dataclass
class TokenizerExtendConfig(ReaderArgs):
    """``aura tokenizer extend`` flags."""

    base: str | None = arg(
        None,
        positional=True,
        metavar="BASE",
        es="Tokenizador base: directorio (de un modelo o de un tokenizador) o nombre del hub.",
        en="Base tokenizer: a directory (of a model or a tokenizer) or a hub name.",
    )
    inputs: list[str] = arg(
        [],
        positional=True,
        metavar="TEXTS",
        es="Textos en español: archivos, directorios, patrones o un directorio preparado.",
        en="Spanish texts: files, directories, patterns or a prepared directory.",
    )
    add_tokens: int = arg(
        1000,
        es="Tokens nuevos que añadir (los más útiles que la base no tiene).",
        en="New tokens to add (the most useful ones the base lacks).",
    )
    output_dir: str = arg(
        "tokenizer-extended", es="Directorio del tokenizador ampliado.", en="Directory of the extended tokenizer."
    )
    max_vocab: int = arg(
        0,
        es="Tamaño máximo del vocabulario resultante (0 = sin límite propio).",
        en="Largest vocabulary the result may have (0 = no limit of its own).",
    )
    min_frequency: int = arg(
        2, es="Frecuencia mínima de un par para fusionarlo.", en="Minimum pair frequency to merge it."
    )
    heldout_fraction: float = arg(
        0.05,
        es="Fracción de documentos reservada para medir la fertilidad.",
        en="Fraction of documents held out to measure fertility.",
    )
    seed: int = arg(0, es="Semilla de la selección de documentos reservados.", en="Seed of the held-out selection.")
    overwrite: bool = arg(
        False,
        es="Reemplaza un tokenizador de Aura en --output-dir.",
        en="Replace an Aura tokenizer in --output-dir.",
        deprecated=["--force"],
    )

    def __post_init__(self):
        if not self.base:
            raise AuraError(M("no_base"))
        if not self.inputs:
            raise AuraError(M("no_inputs", base=self.base))
        if self.add_tokens <= 0:
            raise AuraError(M("bad_n", n=self.add_tokens))
        if not 0 < self.heldout_fraction <= 0.5:
            raise AuraError(M("bad_heldout", value=self.heldout_fraction))


def extend_tokenizer(cfg: TokenizerExtendConfig) -> Path:
    from aura.core.atomic import atomic_write_json, check_writable
    from aura.core.ownership import check_replaceable
    from aura.core.staging import staged_dir
    from aura.text.readers import ReaderOptions
    from aura.tokenizer.loading import tokenizer_hash
    from aura.tokenizer.train import iter_training_docs, training_sources

    out = Path(cfg.output_dir)
    check_writable(out, flag="--output-dir")
    inputs = [*cfg.inputs, cfg.base] if Path(cfg.base).exists() else list(cfg.inputs)
    if check_replaceable(out, kind="tokenizer", flag="--overwrite", inputs=inputs) == "owned" and not cfg.overwrite:
        raise AuraError(M("exists", path=out))
    base, base_json, top = _load_base(cfg)
    sources = training_sources(cfg.inputs)
    start = time.perf_counter()
    opts = ReaderOptions(
        text_field=cfg.text_field,
        doc_sep=cfg.doc_sep,
        encoding=cfg.encoding,
        errors=cfg.errors,
        max_record_bytes=cfg.max_record_bytes,
    )
    heldout: list[str] = []
    docs = iter_training_docs(
        cfg.inputs, opts=opts, heldout=heldout, heldout_fraction=cfg.heldout_fraction, seed=cfg.seed, stats=Counter()
    )
    console.info(M("training", files=len(sources), base=cfg.base))
    candidates = continue_bpe(base.backend_tokenizer, docs, n=cfg.add_tokens, min_frequency=cfg.min_frequency)
    new_json, added = extend_json(base_json, candidates, n=cfg.add_tokens)
    from tokenizers import Tokenizer

    ext_backend = Tokenizer.from_str(json.dumps(new_json, ensure_ascii=False))
    before = measure(base.backend_tokenizer, heldout)
    after = measure(ext_backend, heldout)
    with staged_dir(out, replace=True, kind="tokenizer") as tmp:
        base.save_pretrained(str(tmp))  # config, special tokens, chat template: the base's
        (tmp / "tokenizer.json").write_text(ext_backend.to_str(), encoding="utf-8")
        atomic_write_json(
            tmp / META_FILE,
            {
                "hash": tokenizer_hash(ext_backend),
                "vocab_size": ext_backend.get_vocab_size(),
                "extends": {
                    "base": cfg.base,
                    "base_hash": tokenizer_hash(base),
                    "base_vocab_size": len(base),
                    "added_tokens": len(added),
                    "first_new_id": top,
                },
                "fertility": {
                    "heldout_documents": len(heldout),
                    "heldout_fraction": cfg.heldout_fraction,
                    "base": before,
                    "extended": after,
                },
                "sources": [s.path for s in sources],
                "min_frequency": cfg.min_frequency,
                "seed": cfg.seed,
                "aura_version": __version__,
            },
        )
    if len(added) < cfg.add_tokens:
        console.warn(M("short", got=len(added), asked=cfg.add_tokens))
    console.success(
        M(
            "done",
            path=out,
            base_n=len(base),
            added=len(added),
            total=len(base) + len(added),
            secs=time.perf_counter() - start,
        )
    )
    _print_fertility(heldout, before, after, fraction=cfg.heldout_fraction)
    console.info(M("next", path=out))
    return out


def _load_base(cfg: TokenizerExtendConfig):
    """(the base tokenizer, its tokenizer.json as a dict, the first free id), or a clear error when the base is
    not BPE or the new tokens would not fit ``--max-vocab`` (or 32-bit ids)."""
    from aura.tokenizer.loading import load_tokenizer

    base = load_tokenizer(cfg.base, flag="BASE", training=False)
    base_json = json.loads(base.backend_tokenizer.to_str())
    model = base_json.get("model") or {}
    if model.get("type") != "BPE":
        raise AuraError(M("not_bpe", base=cfg.base, model=model.get("type")))
    top = max([*model["vocab"].values(), *(t["id"] for t in base_json.get("added_tokens") or [])]) + 1
    limit = min(cfg.max_vocab or UINT32_IDS, UINT32_IDS)
    if top + cfg.add_tokens > limit:
        raise AuraError(M("too_many", n=cfg.add_tokens, total=top + cfg.add_tokens, limit=limit))
    return base, base_json, top


def _print_fertility(heldout: list, before: dict, after: dict, *, fraction: float) -> None:
    """The held-out documents' tokens per word and bytes per token, base against extended."""
    if not heldout:
        console.warn(M("no_heldout", fraction=fraction))
        return
    console.table(
        M("h_title"),
        [M("h_measure", docs=len(heldout)), M("h_base"), M("h_ext")],
        [
            [M("r_fert"), num(before["tokens_per_word"], ".3f"), num(after["tokens_per_word"], ".3f")],
            [M("r_bpt"), num(before["bytes_per_token"], ".3f"), num(after["bytes_per_token"], ".3f")],
        ],
    )


_SPM_WORD = re.compile("(?=\u2581)")  # before every "▁"


def continue_bpe(backend, docs, *, n: int, min_frequency: int, max_words: int = 200_000) -> list[tuple[str, str]]:
    """BPE training continued from the base's own segmentation: the words of ``docs`` (the base's
    normaliser and pre-tokeniser) are cut as the base cuts them, and the most frequent adjacent pair is
    merged, again and again. Each merge saves as many tokens as its pair count, so the order is the
    usefulness order, and every merge fires on the text it was learnt from exactly as the extended
    tokenizer will apply it (after all of the base's merges)."""
    from collections import defaultdict

    words: Counter = Counter()
    for doc in docs:
        text = backend.normalizer.normalize_str(doc) if backend.normalizer is not None else doc
        if backend.pre_tokenizer is not None:
            words.update(p for p, _ in backend.pre_tokenizer.pre_tokenize_str(text))
        else:  # SentencePiece layout (Llama 2, Mistral 7B): words start at "▁", as its pieces do; no new
            # token may join a word's end to the next word ("que▁se▁"), which the base's pieces never do
            words.update(w for w in _SPM_WORD.split(text) if w)
    segs, freqs = [], []
    for word, f in words.most_common(max_words):
        toks = [t.value for t in backend.model.tokenize(word)]
        if len(toks) > 1:
            segs.append(toks)
            freqs.append(f)
    counts: Counter = Counter()
    where: dict = defaultdict(set)
    for i, toks in enumerate(segs):
        for pair in zip(toks, toks[1:]):
            counts[pair] += freqs[i]
            where[pair].add(i)
    merges: list[tuple[str, str]] = []
    known, new_tokens = set(backend.get_vocab()), 0
    while new_tokens < n and counts:
        pair, c = max(counts.items(), key=lambda kv: (kv[1], kv[0]))
        if c < min_frequency:
            break
        merges.append(pair)
        a, b = pair
        new_tokens += (a + b) not in known
        known.add(a + b)
        for i in where.pop(pair, ()):
            toks, f = segs[i], freqs[i]
            for p in zip(toks, toks[1:]):
                counts[p] -= f
                if counts[p] <= 0:
                    del counts[p]
            new, j = [], 0
            while j < len(toks):
                if j + 1 < len(toks) and toks[j] == a and toks[j + 1] == b:
                    new.append(a + b)
                    j += 2
                else:
                    new.append(toks[j])
                    j += 1
            segs[i] = new
            for p in zip(new, new[1:]):
                counts[p] += f
                where[p].add(i)
        counts.pop(pair, None)
    return merges


def extend_json(base_json: dict, merges: list, *, n: int) -> tuple[dict, list[str]]:
    """The base's tokenizer.json with up to ``n`` of ``merges`` appended (their results as new tokens, ids
    after every id of the base); (new json, the new tokens in order)."""
    model = dict(base_json["model"])
    vocab = dict(model["vocab"])
    added_ids = [t["id"] for t in base_json.get("added_tokens") or []]
    next_id = max([*vocab.values(), *added_ids]) + 1
    specials = {t["content"] for t in base_json.get("added_tokens") or []}
    base_merges = list(model["merges"])
    as_strings = bool(base_merges) and isinstance(base_merges[0], str)
    new_merges, added = [], []
    for a, b in merges:
        token = a + b
        if token in specials or a not in vocab or b not in vocab:
            continue
        if token not in vocab:  # a token the base already has needs no new row: its merge is free
            if len(added) >= n:
                break
            vocab[token] = next_id
            next_id += 1
            added.append(token)
        new_merges.append(f"{a} {b}" if as_strings else [a, b])
    model["vocab"], model["merges"] = vocab, base_merges + new_merges
    return {**base_json, "model": model}, added


def measure(backend, docs: list[str]) -> dict:
    """Tokens per whitespace word and UTF-8 bytes per token of ``docs`` (a ``tokenizers.Tokenizer``)."""
    words = sum(len(d.split()) for d in docs)
    size = sum(len(d.encode("utf-8")) for d in docs)
    tokens = sum(len(e.ids) for e in backend.encode_batch(docs, add_special_tokens=False)) if docs else 0
    return {
        "tokens_per_word": round(tokens / words, 4) if words else None,
        "bytes_per_token": round(size / tokens, 4) if tokens else None,
        "tokens": tokens,
        "words": words,
        "bytes": size,
    }
