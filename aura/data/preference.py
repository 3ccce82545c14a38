"""Preference pairs for DPO/ORPO: every format -> (prompt, chosen, rejected) -> token ids -> batches.

Formats (one record each, any file ``aura.data.sft`` reads: CSV/TSV, JSON/JSONL, Parquet, a
``save_to_disk`` directory or a hub dataset):

* ``prompt``, ``chosen``, ``rejected`` as text (optional ``system``): the prompt becomes a user message
  and each answer an assistant message;
* ``prompt`` as a message list and ``chosen``/``rejected`` as lists holding the assistant answer (TRL's
  conversational form with an explicit prompt);
* ``chosen`` and ``rejected`` as whole conversations that share every message but the last (TRL's
  implicit prompt): the shared messages are the prompt, the last assistant messages the answers.

Without ``--data`` the embedded Spanish sample (``aura/resources/preference_es.jsonl``) is used.

Encoding (the same chat template as SFT): the prompt is the template's rendering of the prompt messages
with the generation prompt; an answer is what the whole conversation adds after it, up to its end-of-turn
token (whitespace after it is never generated, so it is left out, as in SFT). Labels are -100 on the
prompt: the loss only sees answer tokens.

Truncation rule (``--max-length``, ``--max-prompt-length``), applied to each of the two sequences:
1. a prompt longer than ``--max-prompt-length`` keeps its *last* tokens (the question's end and the
   template's opening of the answer);
2. a prompt that leaves no room for an answer under ``--max-length`` drops the pair (reported, naming the
   file, line and field);
3. an answer that does not fit keeps its *first* ``--max-length`` minus prompt tokens.

Pairs whose chosen and rejected answers are identical teach nothing: they are counted and skipped, and
refused when they are more than ``IDENTICAL_LIMIT`` of the data (usually swapped or repeated columns).

``PairSource`` is the loop's resumable, rank-aware ``BatchSource`` (``SFTDataSource``'s order, sharding
and state): a batch of B pairs is ``input_ids``/``labels``/``attention_mask`` of shape (2B, T), the B
chosen sequences then the B rejected ones, plus ``ref_logps`` (2B,) when reference log-probabilities were
precomputed. With ``shared`` a pair is one row, ``[prompt | chosen | rejected]``, so its prompt runs once,
and a row holds several pairs where they fit in the batch's width (``collate_pairs``; the objective decides
whether the model allows it).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from aura.core import console
from aura.core.errors import AuraError
from aura.core.files import loads_json
from aura.core.i18n import Messages
from aura.data.sft import check_messages, iter_records
from aura.data.sft_batches import (
    IGNORE_INDEX,
    Encoded,
    SFTDataSource,
    batch_grouping,
    collate,
    collate_padding_free,
    spread,
)

DEFAULT_PAIRS = Path(__file__).resolve().parents[1] / "resources" / "preference_es.jsonl"
IDENTICAL_LIMIT = 0.1  # identical pairs above this fraction of the data are refused

M = Messages(
    "preference",
    {
        "no_columns": (
            "{where}: faltan las columnas de preferencia: se esperaba 'chosen' y 'rejected' (y "
            "'prompt', salvo que 'chosen' y 'rejected' sean conversaciones completas). Columnas "
            "encontradas: {found}.",
            "{where}: the preference columns are missing: expected 'chosen' and 'rejected' (and "
            "'prompt', unless 'chosen' and 'rejected' are whole conversations). Columns found: {found}.",
        ),
        "bad_field": (
            "{where}, campo '{field}': se esperaba texto o una lista de mensajes con 'role' y 'content' (es {kind}).",
            "{where}, field '{field}': expected text or a list of messages with 'role' and 'content' (it is {kind}).",
        ),
        "bad_margin": (
            "{where}, campo 'margin': se esperaba un número (el margen del par para --objective reward), no {value}.",
            "{where}, field 'margin': expected a number (the pair's margin for --objective reward), not {value}.",
        ),
        "prefix_differs": (
            "{where}: 'chosen' y 'rejected' son conversaciones completas pero no comparten los "
            "mensajes anteriores a la respuesta; el prompt debe ser el mismo. Pon el prompt en una "
            "columna 'prompt' o iguala esos mensajes.",
            "{where}: 'chosen' and 'rejected' are whole conversations but do not share the messages "
            "before the answer; the prompt must be the same. Put the prompt in a 'prompt' column or "
            "make those messages equal.",
        ),
        "empty_answers": (
            "{count:par tiene|pares tienen} una respuesta vacía (p. ej. {examples}). Corrígelos o usa "
            "--empty-responses skip para saltarlos.",
            "{count:pair has|pairs have} an empty answer (e.g. {examples}). Fix them or use "
            "--empty-responses skip to skip them.",
        ),
        "skipped_empty": (
            "Pares saltados por tener una respuesta vacía: {count} (p. ej. {examples}).",
            "Skipped {count:pair|pairs} with an empty answer (e.g. {examples}).",
        ),
        "identical": (
            "Pares saltados por tener la respuesta elegida ('chosen') igual a la rechazada ('rejected'), "
            "que no enseñan nada: {count} (p. ej. {examples}).",
            "Skipped {count:pair|pairs} whose chosen answer equals the rejected one (they teach nothing; "
            "e.g. {examples}).",
        ),
        "too_identical": (
            "{count} de {total:par|pares} tienen 'chosen' igual a 'rejected' (p. ej. {examples}): más del "
            "{limit:.0%} de los datos, lo que suele indicar columnas repetidas o mal asignadas. Revisa "
            "el archivo.",
            "{count} of {total:pair|pairs} have 'chosen' equal to 'rejected' (e.g. {examples}): more than "
            "{limit:.0%} of the data, which usually means repeated or swapped columns. Check the file.",
        ),
        "no_pairs": (
            "{path} no contiene ningún par de preferencia utilizable.",
            "{path} holds no usable preference pair.",
        ),
        "loaded": (
            "Cargando pares de preferencia: {path} -> {count:par|pares}.",
            "Loading preference pairs: {path} -> {count:pair|pairs}.",
        ),
        "prompt_too_long": (
            "Pares descartados porque el prompt no deja sitio a la respuesta en --max-length "
            "{max_length:token|tokens}: {count} (p. ej. {examples}). Sube --max-length o pon "
            "--max-prompt-length por debajo de --max-length.",
            "Dropped {count:pair|pairs} whose prompt leaves no room for the answer under --max-length "
            "{max_length:token|tokens} (e.g. {examples}). Raise --max-length or set "
            "--max-prompt-length below --max-length.",
        ),
        "all_too_long": (
            "Ningún par cabe en --max-length {max_length:token|tokens}: el prompt más corto tiene "
            "{shortest:token|tokens} (p. ej. {example}). Sube --max-length o usa --max-prompt-length.",
            "No pair fits in --max-length {max_length:token|tokens}: the shortest prompt has "
            "{shortest:token|tokens} (e.g. {example}). Raise --max-length or use --max-prompt-length.",
        ),
        "truncated": (
            "Secuencias recortadas por la regla de --max-length / --max-prompt-length: {prompts} con el "
            "prompt recortado por el principio, {answers} con la respuesta recortada por el final.",
            "Sequences truncated by the --max-length / --max-prompt-length rule: {prompts} with the prompt "
            "cut at its start, {answers} with the answer cut at its end.",
        ),
        "where_field": (
            "{where}, campo '{field}' ({tokens:token|tokens})",
            "{where}, field '{field}' ({tokens:token|tokens})",
        ),
    },
)


@dataclass
class PreferencePair:
    """One pair: the prompt messages and the two assistant answers."""

    prompt: list[dict[str, str]]
    chosen: dict[str, str]
    rejected: dict[str, str]
    where: str = ""
    margin: float | None = None  # the optional ``margin`` column (TRL's; the reward model's loss)


@dataclass
class EncodedPair:
    """Both sequences of a pair (prompt + answer, labels -100 on the prompt) and the reference log-probs."""

    chosen: Encoded
    rejected: Encoded
    where: str = ""
    ref_logps: tuple[float, float] | None = None  # (chosen, rejected), with --precompute-ref
    margin: float | None = None  # PreferencePair.margin

    @property
    def input_ids(self) -> list[int]:  # what SFTDataSource measures
        return self.chosen.input_ids + self.rejected.input_ids

    @property
    def labels(self) -> list[int]:
        return self.chosen.labels + self.rejected.labels


# ---------------------------------------------------------------------------------------------------
# Records -> pairs


def _header_check(path: str, header: list[str]) -> None:
    if not {"chosen", "rejected"} <= set(header):
        raise AuraError(M("no_columns", where=path, found=", ".join(header) or "-"))


def field_messages(value, where: str, field: str):
    """Text stays text; a list of messages (or a JSON string of one, from a CSV cell) becomes a list."""
    if isinstance(value, str) and value.lstrip().startswith("[") and value.rstrip().endswith("]"):
        try:
            value = loads_json(value)
        except ValueError:
            return value
    if value is None:
        return ""
    if isinstance(value, (str, list)):
        return value
    if hasattr(value, "tolist"):  # numpy arrays from Parquet
        return value.tolist()
    raise AuraError(M("bad_field", where=where, field=field, kind=type(value).__name__))


def answer_message(value, where: str, field: str):
    """The last message of an answer given as text or as a list of messages."""
    if isinstance(value, str):
        return {"role": "assistant", "content": value}
    if not value or not all(isinstance(m, dict) for m in value):
        raise AuraError(M("bad_field", where=where, field=field, kind=type(value).__name__))
    return value[-1]


def record_to_pair(record, where: str) -> PreferencePair:
    """One record of any supported schema -> a PreferencePair (raises AuraError naming ``where``)."""
    if not isinstance(record, dict):
        raise AuraError(M("no_columns", where=where, found=type(record).__name__))
    rec = {k.strip().lower() if isinstance(k, str) else k: v for k, v in record.items()}
    if "chosen" not in rec or "rejected" not in rec:
        raise AuraError(M("no_columns", where=where, found=", ".join(map(str, record)) or "-"))
    chosen, rejected = (
        field_messages(rec["chosen"], where, "chosen"),
        field_messages(rec["rejected"], where, "rejected"),
    )
    prompt = field_messages(rec.get("prompt"), where, "prompt") if "prompt" in rec else None
    if prompt is None:  # implicit prompt: whole conversations sharing all but their last message
        if not (isinstance(chosen, list) and isinstance(rejected, list)):
            raise AuraError(M("no_columns", where=where, found=", ".join(map(str, record))))
        for field, value in (("chosen", chosen), ("rejected", rejected)):
            if not value or not all(isinstance(m, dict) for m in value):  # e.g. a list of answers
                inner = next((type(m).__name__ for m in value if not isinstance(m, dict)), "")
                raise AuraError(M("bad_field", where=where, field=field, kind=f"list[{inner}]"))
        if [dict(m) for m in chosen[:-1]] != [dict(m) for m in rejected[:-1]]:
            raise AuraError(M("prefix_differs", where=where))
        prompt, chosen, rejected = list(chosen[:-1]), chosen[-1:], rejected[-1:]
    if isinstance(prompt, str):
        prompt = [{"role": "user", "content": prompt}]
        system = rec.get("system")
        if isinstance(system, str) and system.strip():
            prompt.insert(0, {"role": "system", "content": system})
    if not all(isinstance(m, dict) for m in prompt):
        raise AuraError(M("bad_field", where=where, field="prompt", kind=type(prompt).__name__))
    # the same checks as SFT conversations (roles, alternation, text contents), naming the field
    msgs = {
        field: check_messages(list(prompt) + [answer_message(value, where, field)], f"{where}, '{field}'")
        for field, value in (("chosen", chosen), ("rejected", rejected))
    }
    return PreferencePair(
        prompt=msgs["chosen"][:-1],
        chosen=msgs["chosen"][-1],
        rejected=msgs["rejected"][-1],
        where=where,
        margin=_margin(rec.get("margin"), where),
    )


def _margin(value, where: str) -> float | None:
    """The ``margin`` column's value (None when absent or empty), a finite number."""
    if value is None or value == "":
        return None
    try:
        margin = float(value)
    except (TypeError, ValueError):
        margin = math.nan
    if isinstance(value, bool) or not math.isfinite(margin):
        raise AuraError(M("bad_margin", where=where, value=repr(value)))
    return margin


def load_pairs(
    data: str | os.PathLike | None = None, *, empty_responses: str = "fail", split: str = "train"
) -> list[PreferencePair]:
    """Every usable pair of ``data`` (None: the embedded sample). Empty answers fail or are skipped
    (``empty_responses``); identical answers are skipped, or refused above ``IDENTICAL_LIMIT``."""
    pairs, empty, identical = [], [], []
    for where, record in iter_records(data, split=split, default=DEFAULT_PAIRS, header_check=_header_check):
        pair = record_to_pair(record, where)
        if not pair.chosen["content"] or not pair.rejected["content"]:
            field = "chosen" if not pair.chosen["content"] else "rejected"
            empty.append(f"{where}, '{field}'")
        elif pair.chosen["content"] == pair.rejected["content"]:
            identical.append(where)
        else:
            pairs.append(pair)
    name = data or DEFAULT_PAIRS
    if empty:
        examples = "; ".join(empty[:3])
        if empty_responses == "fail":
            raise AuraError(M("empty_answers", count=len(empty), examples=examples))
        console.warn(M("skipped_empty", count=len(empty), examples=examples))
    if identical:
        total = len(pairs) + len(identical) + len(empty)
        if len(identical) > IDENTICAL_LIMIT * total:
            raise AuraError(
                M(
                    "too_identical",
                    count=len(identical),
                    total=total,
                    examples="; ".join(identical[:3]),
                    limit=IDENTICAL_LIMIT,
                )
            )
        console.warn(M("identical", count=len(identical), examples="; ".join(identical[:3])))
    if not pairs:
        raise AuraError(M("no_pairs", path=name))
    console.info(M("loaded", path=name, count=len(pairs)))
    return pairs


# ---------------------------------------------------------------------------------------------------
# Pairs -> token ids


def encode_side(tokenizer, prompt: list[dict], answer: dict, where: str) -> tuple[list[int], int]:
    """(token ids of prompt + answer, how many of them are prompt)."""
    from aura.data.sft_batches import M as BM, render_chat, rstrip_end
    from aura.text.templates import template_names

    before = render_chat(tokenizer, prompt, generation_prompt=True, where=where)
    full = render_chat(tokenizer, prompt + [answer], generation_prompt=False, where=where)
    if not full.startswith(before):
        raise AuraError(BM("not_prefix", where=where, choices=template_names()))
    text = full[: rstrip_end(full, len(before), len(full))]
    if getattr(tokenizer, "is_fast", True):
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        ids = list(enc["input_ids"])
        # a token belongs to the answer when its first character lies after the prompt
        n_prompt = sum(1 for start, _ in enc["offset_mapping"] if start < len(before))
    else:
        ids = tokenizer.encode(text, add_special_tokens=False)
        n_prompt = len(tokenizer.encode(before, add_special_tokens=False))
    return ids, n_prompt


def encode_pairs(
    pairs: list[PreferencePair], tokenizer, *, max_length: int, max_prompt_length: int | None = None
) -> list[EncodedPair]:
    """Encode every pair with the truncation rule of the module docstring; dropped pairs are reported."""
    out, too_long, cut_prompts, cut_answers = [], [], 0, 0
    for pair in pairs:
        sides, fits = [], True
        for field, answer in (("chosen", pair.chosen), ("rejected", pair.rejected)):
            ids, n_prompt = encode_side(tokenizer, pair.prompt, answer, pair.where)
            if max_prompt_length and n_prompt > max_prompt_length:
                ids, n_prompt = ids[n_prompt - max_prompt_length :], max_prompt_length
                cut_prompts += 1
            if n_prompt >= max_length:
                too_long.append((n_prompt, M("where_field", where=pair.where, field="prompt", tokens=n_prompt)))
                fits = False
                break
            if len(ids) > max_length:
                ids = ids[:max_length]
                cut_answers += 1
            labels = [IGNORE_INDEX] * n_prompt + ids[n_prompt:]
            labels[0] = IGNORE_INDEX  # the first token is never predicted
            sides.append(Encoded(ids, labels, f"{pair.where}, '{field}'"))
        if fits:
            out.append(EncodedPair(sides[0], sides[1], pair.where, margin=pair.margin))
    if too_long:
        examples = "; ".join(w for _, w in too_long[:3])
        if not out:
            n, example = min(too_long)
            raise AuraError(M("all_too_long", max_length=max_length, shortest=n, example=example))
        console.warn(M("prompt_too_long", count=len(too_long), max_length=max_length, examples=examples))
    if cut_prompts or cut_answers:
        console.warn(M("truncated", prompts=cut_prompts, answers=cut_answers))
    return out


# ---------------------------------------------------------------------------------------------------
# Batches


# Segments of a shared-prompt row (``collate_pairs(shared=True)``)
SHARED, CHOSEN, REJECTED, PADDING = 0, 1, 2, 3


def shared_length(pair: EncodedPair) -> int:
    """How many leading tokens the two sequences of ``pair`` can share in one row: their common prefix,
    but at most up to the token before the first answer label of either (the last shared position's
    logits can predict only one next token, and it must be an unlabelled one)."""
    c, r = pair.chosen, pair.rejected
    first = min(next((i for i, t in enumerate(seq.labels) if t != IGNORE_INDEX), len(seq.labels)) for seq in (c, r))
    limit, n = min(len(c.input_ids), len(r.input_ids), first - 1), 0
    while n < limit and c.input_ids[n] == r.input_ids[n]:
        n += 1
    return n


def _collate_shared(
    pairs: list[EncodedPair], *, pad_id: int, pad_to_multiple_of: int, buckets: tuple[int, ...]
) -> dict:
    """B pairs -> rows of ``[prompt | chosen answer | rejected answer]`` (R, T), several pairs in a row where
    that saves tokens without adding attention (``batch_grouping``: padding-free as far as a dense mask allows).
    The packed rows of ``collate`` (padding, buckets), with position_ids restarting at each pair and, within a
    pair, at the prompt's length for the rejected part; ``segments`` (R, T) telling the parts apart (SHARED,
    CHOSEN, REJECTED, PADDING), ``pair`` (R, T) the pair each token belongs to (-1 on padding) and ``pair_row``
    (B,) the row of each pair, from which the objective builds the attention mask
    (``aura.train.objectives.preference``)."""
    import torch

    pieces = []
    for p in pairs:
        s = shared_length(p)
        pieces.append(
            (
                Encoded(p.chosen.input_ids[:s], p.chosen.labels[:s]),
                Encoded(p.chosen.input_ids[s:], p.chosen.labels[s:]),
                Encoded(p.rejected.input_ids[s:], p.rejected.labels[s:]),
            )
        )
    lengths = [sum(len(e.input_ids) for e in piece) for piece in pieces]
    shapes = {"pad_to_multiple_of": pad_to_multiple_of, "buckets": buckets}
    rows = batch_grouping(lengths, **shapes)
    batch = collate(
        [[e for i in row for e in pieces[i]] for row in rows],
        pad_id=pad_id,
        packing=True,
        pad_to_multiple_of=pad_to_multiple_of,
        buckets=buckets,
    )
    # per stretch of a row (a pair's three parts, then the padding tail): its length, part, pair and how far its
    # positions go on (each answer from its prompt's end); ``spread`` lays them over the tokens
    shape = batch["input_ids"].shape
    sizes, parts, owner, shift = [], [], [], []
    pair_row = torch.zeros(len(pairs), dtype=torch.long)  # (B,)
    for r, row in enumerate(rows):
        for i in row:
            shared, chosen, rejected = (len(e.input_ids) for e in pieces[i])
            sizes += (shared, chosen, rejected)
            parts += (SHARED, CHOSEN, REJECTED)
            owner += (i, i, i)
            shift += (0, shared, shared)
            pair_row[i] = r
        sizes.append(shape[1] - sum(lengths[i] for i in row))
        parts.append(PADDING)
        owner.append(-1)
        shift.append(0)
    segments = spread(parts, sizes, shape)  # (R, T)
    pair = spread(owner, sizes, shape)  # (R, T)
    batch["position_ids"] += spread(shift, sizes, shape)
    attention = (segments != PADDING).long()  # (R, T): 1 on real tokens (what throughput counts)
    batch.update(segments=segments, pair=pair, pair_row=pair_row, attention_mask=attention)
    return batch


def collate_pairs(
    pairs: list[EncodedPair],
    *,
    pad_id: int,
    pad_to_multiple_of: int = 1,
    buckets: tuple[int, ...] = (),
    shared: bool = False,
    padding_free: bool = False,
) -> dict:
    """B pairs -> input_ids, labels, attention_mask (2B, T): the chosen sequences, then the rejected ones;
    ``ref_logps`` (2B,) in the same order when every pair has precomputed reference log-probs; ``margin`` (B,)
    when every pair has one.

    ``shared``: a pair in one row instead, the prompt once, several pairs in a row where they fit
    (``_collate_shared``): input_ids, labels, position_ids, segments, pair, attention_mask (R, T), pair_row (B,)
    and ``ref_logps`` (2B,) as above. ``padding_free`` (without ``shared``: a model that does not take the pair's
    mask, as flash-attention or a sliding window): the 2B sequences several to a row where that computes less
    (``collate_padding_free(owners=True)``), in the same order."""
    import torch

    shapes = {"pad_id": pad_id, "pad_to_multiple_of": pad_to_multiple_of, "buckets": buckets}
    if shared:
        batch = _collate_shared(pairs, **shapes)
    elif padding_free:
        batch = collate_padding_free([p.chosen for p in pairs] + [p.rejected for p in pairs], **shapes, owners=True)
    else:
        batch = collate([[p.chosen] for p in pairs] + [[p.rejected] for p in pairs], **shapes)
    if pairs and all(p.margin is not None for p in pairs):
        batch["margin"] = torch.tensor([p.margin for p in pairs], dtype=torch.float32)  # (B,)
    if pairs and all(p.ref_logps is not None for p in pairs):
        batch["ref_logps"] = torch.tensor(
            [p.ref_logps[0] for p in pairs] + [p.ref_logps[1] for p in pairs], dtype=torch.float64
        )  # (2B,)
    return batch


class PairSource(SFTDataSource):
    """``SFTDataSource`` over pairs (no packing): the same order, sharding and resumable state; a batch
    holds ``batch_size`` pairs (2 x batch_size sequences, or one row per pair with ``shared``)."""

    def __init__(self, pairs: list[EncodedPair], *, shared: bool = False, **kwargs):
        kwargs.pop("packing", None)
        super().__init__(pairs, packing=False, **kwargs)
        self.shared = shared

    collate = staticmethod(collate_pairs)  # KTO's source (aura.data.kto) collates rated answers instead

    def collate_options(self) -> dict:
        return {
            "pad_id": self.pad_id,
            "pad_to_multiple_of": self.pad_to_multiple_of,
            "buckets": self.buckets,
            "shared": self.shared,
            "padding_free": self.padding_free,
        }

    def collate_rows(self, rows: list[int]) -> dict:
        return self.collate([self.examples[self.rows[r][0]] for r in rows], **self.collate_options())

    def sequences(self, row: int) -> list[int]:
        pair = self.examples[self.rows[row][0]]
        chosen, rejected = len(pair.chosen.input_ids), len(pair.rejected.input_ids)
        return [chosen + rejected - shared_length(pair)] if self.shared else [chosen, rejected]

    @property
    def packs_sequences(self) -> bool:
        return self.shared or self.padding_free

    @property
    def num_label_tokens(self) -> int:
        return sum(sum(t != IGNORE_INDEX for t in e.labels) for e in self.examples)
