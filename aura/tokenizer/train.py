"""``aura tokenizer train``: a byte-level BPE tokenizer for Spanish, trained on the user's texts."""

from __future__ import annotations

import hashlib
import math
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from aura import __version__
from aura.core import console
from aura.core.config import arg
from aura.core.errors import AuraError
from aura.core.files import read_json_object
from aura.core.i18n import num
from aura.text.readers import MAX_RECORD_BYTES, ReaderArgs
from aura.tokenizer.loading import (
    BYTE_ALPHABET,
    CHAT_TOKENS,
    EOS,
    META_FILE,
    PAD,
    SPECIAL_TOKENS,
    M,
    add_aura_chat_template,
    tokenizer_hash,
)


def build_bpe_trainer_pair(vocab_size: int, min_frequency: int):
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=SPECIAL_TOKENS,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    return tok, trainer


def _score(seed: int, text: str) -> float:
    """A stable number in [0, 1) from (seed, content): the held-out / validation decision."""
    h = hashlib.blake2b(text.encode("utf-8"), digest_size=8, key=str(seed).encode()).digest()
    return int.from_bytes(h, "little") / 2.0**64


def iter_training_docs(
    inputs: list[str],
    *,
    opts,
    heldout: list[str],
    heldout_fraction: float,
    seed: int,
    stats: Counter,
    max_heldout_chars: int = 5_000_000,
) -> Iterator[str]:
    from aura.text.readers import clean_text, iter_documents

    held_chars = 0
    for source in training_sources(inputs):
        keep_layout = source.kind == "file" and source.fmt == "txt" and opts.doc_sep == "file"
        for raw in iter_documents(source, opts, stats):
            doc = clean_text(raw, keep_layout=keep_layout)
            if not doc:
                continue
            stats["documents"] += 1
            if held_chars < max_heldout_chars and _score(seed, doc) < heldout_fraction:
                heldout.append(doc)
                held_chars += len(doc)
                continue
            yield doc


def training_sources(inputs: list[str]):
    """Sources of the inputs; a prepared data dir stands for the sources it was built from."""
    from aura.text.sources import expand_inputs

    out = []
    for item in inputs:
        meta_file = Path(item) / "meta.json"
        if meta_file.is_file():
            sources = read_json_object(meta_file).get("sources", [])
            if not (
                isinstance(sources, list)
                and all(isinstance(s, dict) and isinstance(s.get("path", ""), str) for s in sources)
            ):
                raise AuraError(M("bad_sources", path=meta_file, value=repr(sources)[:80]))
            out += expand_inputs([s["path"] for s in sources if "path" in s])
        else:
            out += expand_inputs([item])
    return out


def fertility(tok, docs: Iterable[str]) -> tuple[float | None, int]:
    """Tokens per whitespace-separated word over ``docs`` (and how many documents were measured)."""
    docs = list(docs)
    words = sum(len(d.split()) for d in docs)
    if not words:
        return None, 0
    tokens = sum(len(e.ids) for e in tok.encode_batch(docs, add_special_tokens=False))
    return round(tokens / words, 4), len(docs)


def train_bpe(
    *,
    inputs: list[str],
    vocab_size: int,
    output_dir: str | Path,
    min_frequency: int = 2,
    text_field: str = "text",
    doc_sep: str = "line",
    encoding: str = "utf-8",
    errors: str = "strict",
    max_record_bytes: int = MAX_RECORD_BYTES,
    heldout_fraction: float = 0.02,
    seed: int = 0,
    model_max_length: int = 2048,
    force: bool = False,
) -> Path:
    """Train a byte-level BPE on ``inputs`` and save a transformers-loadable directory; returns it."""
    from aura.text.readers import ReaderOptions

    need = BYTE_ALPHABET + len(SPECIAL_TOKENS)
    out = _checked_output(inputs, vocab_size, output_dir, need=need, force=force)
    opts = ReaderOptions(
        text_field=text_field, doc_sep=doc_sep, encoding=encoding, errors=errors, max_record_bytes=max_record_bytes
    )
    sources = training_sources(inputs)  # validates every input before the (long) training starts
    console.info(M("training", vocab=vocab_size, files=len(sources)))
    start = time.perf_counter()
    tok, trainer = build_bpe_trainer_pair(vocab_size, min_frequency)
    heldout: list[str] = []
    stats: Counter = Counter()
    tok.train_from_iterator(
        iter_training_docs(
            inputs, opts=opts, heldout=heldout, seed=seed, heldout_fraction=heldout_fraction, stats=stats
        ),
        trainer=trainer,
    )
    if stats["documents"] == 0:
        raise AuraError(M("no_docs"))
    if tok.get_vocab_size() <= need:
        raise AuraError(M("no_merges", docs=stats["documents"], min_freq=min_frequency))
    fert, fert_docs = fertility(tok, heldout)
    _save(
        out,
        tok,
        model_max_length=model_max_length,
        meta={
            "fertility": {
                "tokens_per_word": fert,
                "heldout_documents": fert_docs,
                "heldout_fraction": heldout_fraction,
            },
            "trained_on": {
                "sources": [s.path for s in sources],
                "documents": stats["documents"],
                "bad_records": stats["bad_records"],
            },
            "sources": [s.path for s in sources],
            "min_frequency": min_frequency,
            "seed": seed,
        },
    )
    _print_done(
        out,
        tok,
        vocab_size,
        stats,
        fert=fert,
        fert_docs=fert_docs,
        min_frequency=min_frequency,
        heldout_fraction=heldout_fraction,
        seconds=time.perf_counter() - start,
    )
    return out


def _checked_output(inputs: list[str], vocab_size: int, output_dir, *, need: int, force: bool) -> Path:
    """The output folder, once the request is sound: a vocabulary above the byte alphabet and special tokens,
    some inputs, a writable folder that is no input and, if it exists, an Aura tokenizer replaced only with
    --overwrite."""
    from aura.core.atomic import check_writable
    from aura.core.ownership import check_replaceable

    if vocab_size < need + 16:
        raise AuraError(M("vocab_too_small", size=vocab_size, need=need + 16, special=len(SPECIAL_TOKENS)))
    if not inputs:
        raise AuraError(M("no_inputs"))
    out = Path(output_dir)
    check_writable(out, flag="--output-dir")
    # Only an Aura tokenizer directory is ever replaced (and only with --overwrite); inputs are never outputs.
    if check_replaceable(out, kind="tokenizer", flag="--overwrite", inputs=inputs) == "owned" and not force:
        raise AuraError(M("exists", path=out))
    return out


def _print_done(
    out: Path,
    tok,
    vocab_size: int,
    stats: Counter,
    *,
    fert,
    fert_docs: int,
    min_frequency: int,
    heldout_fraction: float,
    seconds: float,
) -> None:
    """The vocabulary reached (a warning when short of the one asked for) and the held-out fertility."""
    got = tok.get_vocab_size()
    if got < vocab_size:
        console.warn(M("vocab_short", got=got, asked=vocab_size, docs=stats["documents"], min_freq=min_frequency))
    if fert is None:
        console.success(M("done_nofert", path=out, vocab=got, secs=seconds))
        console.warn(
            M("no_heldout_zero")
            if heldout_fraction == 0
            else M("no_heldout_few", docs=stats["documents"], fraction=heldout_fraction)
        )
    else:
        console.success(M("done", path=out, vocab=got, fertility=num(fert, ".3f"), docs=fert_docs, secs=seconds))


def _save(out: Path, tok, *, model_max_length: int, meta: dict) -> None:
    """``tok`` as a transformers tokenizer (Aura's special tokens and chat template) with its ``META_FILE``
    (hash, vocabulary, special tokens, then ``meta``), replacing ``out`` in one rename."""
    from transformers import PreTrainedTokenizerFast

    from aura.core.atomic import atomic_write_json
    from aura.core.staging import staged_dir

    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=EOS,
        eos_token=EOS,
        pad_token=PAD,
        additional_special_tokens=CHAT_TOKENS,
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
    )
    add_aura_chat_template(fast)  # models pretrained with it carry a chat template into final/
    with staged_dir(out, replace=True, kind="tokenizer") as tmp:
        fast.save_pretrained(str(tmp))
        atomic_write_json(
            tmp / META_FILE,
            {
                "hash": tokenizer_hash(tok),
                "vocab_size": tok.get_vocab_size(),
                "special_tokens": {t: tok.token_to_id(t) for t in SPECIAL_TOKENS},
                "eos_token": EOS,
                "pad_token": PAD,
                "bos_token": EOS,
                **meta,
                "aura_version": __version__,
            },
        )


@dataclass
class TokenizerTrainConfig(ReaderArgs):
    inputs: list[str] = arg(
        [],
        positional=True,
        es="Textos de entrenamiento: archivos, directorios, patrones o un directorio preparado (se usan sus fuentes).",
        en="Training texts: files, directories, patterns or a prepared directory (its sources are used).",
    )
    output_dir: str = arg(
        "tokenizer", es="Directorio donde guardar el tokenizador.", en="Directory to save the tokenizer in."
    )
    vocab_size: int = arg(32000, es="Tamaño del vocabulario.", en="Vocabulary size.")
    min_frequency: int = arg(
        2, es="Frecuencia mínima de un par para fusionarlo.", en="Minimum pair frequency to merge it."
    )
    heldout_fraction: float = arg(
        0.02,
        es="Fracción de documentos reservada para medir la fertilidad.",
        en="Fraction of documents held out to measure fertility.",
    )
    model_max_length: int = arg(
        2048,
        es="Longitud máxima de contexto anotada en el tokenizador.",
        en="Maximum context length recorded in the tokenizer.",
    )
    seed: int = arg(
        0, es="Semilla de la selección de documentos reservados.", en="Seed of the held-out document selection."
    )
    overwrite: bool = arg(
        False,
        es="Reemplaza un tokenizador existente en --output-dir.",
        en="Replace an existing tokenizer in --output-dir.",
        deprecated=["--force"],
    )

    def __post_init__(self):
        if not self.inputs:
            raise AuraError(M("no_inputs"))
        need = BYTE_ALPHABET + len(SPECIAL_TOKENS)
        if self.vocab_size < need + 16:
            raise AuraError(M("vocab_too_small", size=self.vocab_size, need=need + 16, special=len(SPECIAL_TOKENS)))
        if self.min_frequency < 1:
            raise AuraError(M("bad_min_freq"))
        if not 0 <= self.heldout_fraction <= 0.5 or math.isnan(self.heldout_fraction):
            raise AuraError(M("bad_heldout"))


def train_tokenizer(cfg: TokenizerTrainConfig) -> Path:
    return train_bpe(
        inputs=cfg.inputs,
        vocab_size=cfg.vocab_size,
        output_dir=cfg.output_dir,
        min_frequency=cfg.min_frequency,
        text_field=cfg.text_field,
        doc_sep=cfg.doc_sep,
        encoding=cfg.encoding,
        errors=cfg.errors,
        max_record_bytes=cfg.max_record_bytes,
        heldout_fraction=cfg.heldout_fraction,
        seed=cfg.seed,
        model_max_length=cfg.model_max_length,
        force=cfg.overwrite,
    )
