"""Unpaired feedback for KTO: every format -> (prompt, completion, label) -> token ids -> batches.

Formats (one record each, any file ``aura.data.sft`` reads: CSV/TSV, JSON/JSONL, Parquet, a ``save_to_disk``
directory or a hub dataset), TRL's unpaired preference format:

* ``prompt`` and ``completion`` as text (optional ``system``) and a boolean ``label`` (true: a good answer,
  a thumbs-up; false: a bad one): the prompt becomes a user message, the completion an assistant message;
* ``prompt`` as a message list and ``completion`` as a list holding the assistant answer (conversational).

The label column is ``label`` unless ``--label-column`` names another (``me_gusta``); its values may be
booleans, 1/0, or the words true/false, sí/no, yes/no, verdadero/falso (any case). Anything else, an empty
completion, or labels that are all one value (KTO learns from both kinds) is refused, naming the file,
line and field.

Encoding and truncation are those of the preference pairs (``aura.data.preference``): the prompt with the
template's generation prompt, the completion up to its end-of-turn token; a prompt longer than
``--max-prompt-length`` keeps its last tokens, one that leaves no room under ``--max-length`` drops the
example, a long completion keeps its first tokens.

The KL estimate (KTO's reference point) needs *mismatched* sequences: the prompt of example ``i`` followed
by the completion of example ``i - 1`` (cyclically, in the order of the training examples), TRL's rotation
by one. The partner is fixed per example (it does not depend on the batch, the shuffle, the accumulation
or the number of ranks), so any split of the same examples sees the same KL pairs and ``--precompute-ref``
can store the reference's log-probabilities of both sequences.

``UnpairedSource`` is the loop's resumable, rank-aware ``BatchSource`` (``SFTDataSource``'s order, sharding
and state): a batch of B examples is ``input_ids``/``labels``/``attention_mask`` (B, T), the mismatched
``kl_input_ids``/``kl_labels``/``kl_attention_mask`` (B, T'), ``label`` (B,) and, when precomputed,
``ref_logps``/``ref_kl_logps`` (B,). With ``shared`` (and no precomputed reference) it also holds both
sequences of each example in one row, the prompt once, for the reference's forward pass: the ``ref_pair_``
keys, ``aura.data.preference.collate_pairs(shared=True)`` of (sequence, KL sequence). With ``padding_free``
(where the model keeps packed sequences apart) the answers go several to a row where that computes less
(``aura.data.sft_batches.collate_padding_free``), and so do the KL answers, in rows of their own: packed rows
carry ``position_ids``, ``sequence`` and ``sequence_row`` instead of ``attention_mask`` (``kl_`` likewise).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from aura.core import console
from aura.core.errors import AuraError
from aura.core.i18n import Messages
from aura.data.preference import EncodedPair, PairSource, answer_message, collate_pairs, encode_side, field_messages
from aura.data.sft import check_messages, iter_records
from aura.data.sft_batches import IGNORE_INDEX, Encoded, collate, collate_padding_free

DEFAULT_FEEDBACK = Path(__file__).resolve().parents[1] / "resources" / "kto_es.jsonl"
TRUE_WORDS = frozenset({"true", "1", "sí", "si", "yes", "verdadero", "bueno"})
FALSE_WORDS = frozenset({"false", "0", "no", "falso", "malo"})

M = Messages(
    "kto_data",
    {
        "no_columns": (
            "{where}: faltan columnas para KTO: se esperaba 'prompt', 'completion' y '{label}' (la "
            "valoración: verdadero si la respuesta es buena, falso si es mala; otra columna con "
            "--label-column). Columnas encontradas: {found}.",
            "{where}: columns missing for KTO: expected 'prompt', 'completion' and '{label}' (the verdict: "
            "true when the answer is good, false when it is bad; another column with --label-column). "
            "Columns found: {found}.",
        ),
        "bad_label": (
            "{where}, campo '{field}': se esperaba un valor booleano (true/false, 1/0, sí/no) y es {value!r}. "
            "Corrige esa línea o quítala.",
            "{where}, field '{field}': expected a boolean (true/false, 1/0, yes/no) and it is {value!r}. Fix "
            "that line or remove it.",
        ),
        "empty": (
            "{where}, campo 'completion': la respuesta está vacía; KTO valora respuestas escritas. Escríbela "
            "o quita esa línea.",
            "{where}, field 'completion': the answer is empty; KTO learns from written answers. Write it or "
            "remove that line.",
        ),
        "one_label": (
            "{path}: todas las valoraciones del campo '{field}' ({count}) son {value}; KTO aprende del "
            "contraste entre respuestas buenas y malas. Añade ejemplos con valoración {other} o usa otro "
            "objetivo (sft si solo tienes respuestas buenas).",
            "{path}: all the verdicts of field '{field}' ({count}) are {value}; KTO learns from the contrast "
            "between good and bad answers. Add examples rated {other} or use another objective (sft when you "
            "only have good answers).",
        ),
        "true": ("verdaderas (buenas)", "true (good)"),
        "false": ("falsas (malas)", "false (bad)"),
        "loaded": (
            "Cargando respuestas valoradas: {path} -> {good:buena|buenas}, {bad:mala|malas}.",
            "Loading rated answers: {path} -> {good:good one|good ones}, {bad:bad one|bad ones}.",
        ),
        "dropped": (
            "Ejemplos descartados porque el prompt no deja sitio a la respuesta en --max-length "
            "{max_length:token|tokens}: {count} (p. ej. {examples}). Sube --max-length o usa --max-prompt-length.",
            "Dropped {count:example|examples} whose prompt leaves no room for the answer under --max-length "
            "{max_length:token|tokens} (e.g. {examples}). Raise --max-length or use --max-prompt-length.",
        ),
        "none_fit": (
            "Ningún ejemplo cabe en --max-length {max_length:token|tokens} (p. ej. {example}). Sube "
            "--max-length o usa --max-prompt-length.",
            "No example fits in --max-length {max_length:token|tokens} (e.g. {example}). Raise --max-length "
            "or use --max-prompt-length.",
        ),
    },
)


@dataclass
class UnpairedExample:
    """One rated answer: the prompt messages, the assistant answer and whether it is desirable."""

    prompt: list[dict[str, str]]
    completion: dict[str, str]
    label: bool
    where: str = ""


@dataclass
class EncodedUnpaired:
    """The sequence (prompt + completion, labels -100 on the prompt), its mismatched KL sequence (this prompt +
    the partner's completion), the label and, with --precompute-ref, the reference's log-probs of both."""

    seq: Encoded
    kl: Encoded
    label: bool
    where: str = ""
    ref_logps: tuple[float, float] | None = None  # (sequence, KL sequence)

    @property
    def input_ids(self) -> list[int]:  # what SFTDataSource measures
        return self.seq.input_ids

    @property
    def labels(self) -> list[int]:
        return self.seq.labels


def parse_label(value, where: str, field: str) -> bool:
    """A verdict as a bool: booleans, 1/0, and the words of ``TRUE_WORDS``/``FALSE_WORDS`` (any case)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        word = value.strip().lower()
        if word in TRUE_WORDS:
            return True
        if word in FALSE_WORDS:
            return False
    raise AuraError(M("bad_label", where=where, field=field, value=value))


def record_to_example(record, where: str, *, label_column: str = "label") -> UnpairedExample:
    """One record -> an UnpairedExample (raises AuraError naming ``where`` and the field)."""
    label_column = label_column.strip().lower()
    if not isinstance(record, dict):
        raise AuraError(M("no_columns", where=where, label=label_column, found=type(record).__name__))
    rec = {k.strip().lower() if isinstance(k, str) else k: v for k, v in record.items()}
    if not {"prompt", "completion", label_column} <= set(rec):
        raise AuraError(M("no_columns", where=where, label=label_column, found=", ".join(map(str, record)) or "-"))
    label = parse_label(rec[label_column], where, label_column)
    prompt = field_messages(rec["prompt"], where, "prompt")
    completion = field_messages(rec["completion"], where, "completion")
    if isinstance(prompt, str):
        prompt = [{"role": "user", "content": prompt}]
        system = rec.get("system")
        if isinstance(system, str) and system.strip():
            prompt.insert(0, {"role": "system", "content": system})
    answer = answer_message(completion, where, "completion")
    msgs = check_messages(list(prompt) + [answer], f"{where}, 'completion'")
    if not str(msgs[-1]["content"]).strip():
        raise AuraError(M("empty", where=where))
    return UnpairedExample(prompt=msgs[:-1], completion=msgs[-1], label=label, where=where)


def load_unpaired(
    data: str | os.PathLike | None = None, *, label_column: str = "label", split: str = "train"
) -> list[UnpairedExample]:
    """Every rated answer of ``data`` (None: the embedded sample); refused when all labels are one value."""
    examples = [
        record_to_example(record, where, label_column=label_column)
        for where, record in iter_records(
            data, split=split, default=DEFAULT_FEEDBACK, header_check=lambda path, header: None
        )
    ]
    name = data or DEFAULT_FEEDBACK
    good = sum(e.label for e in examples)
    if good in (0, len(examples)):
        value = bool(good)
        raise AuraError(
            M(
                "one_label",
                path=name,
                count=len(examples),
                field=label_column.strip().lower(),
                value=M("true" if value else "false"),
                other=M("false" if value else "true"),
            )
        )
    console.info(M("loaded", path=name, good=good, bad=len(examples) - good))
    return examples


def encode_unpaired(
    examples: list[UnpairedExample], tokenizer, *, max_length: int, max_prompt_length: int | None = None
) -> list[EncodedUnpaired]:
    """Encode every example (the truncation rule of the module docstring), then build each one's KL sequence
    from its partner, the previous kept example (cyclically)."""
    kept, dropped = [], []
    for ex in examples:
        ids, n_prompt = encode_side(tokenizer, ex.prompt, ex.completion, ex.where)
        if max_prompt_length and n_prompt > max_prompt_length:
            ids, n_prompt = ids[n_prompt - max_prompt_length :], max_prompt_length
        if n_prompt >= max_length:
            dropped.append(ex.where)
            continue
        kept.append((ex, ids[:n_prompt], ids[n_prompt:]))
    if dropped:
        if not kept:
            raise AuraError(M("none_fit", max_length=max_length, example=dropped[0]))
        console.warn(M("dropped", count=len(dropped), max_length=max_length, examples="; ".join(dropped[:3])))

    def sequence(prompt: list[int], completion: list[int], where: str) -> Encoded:
        ids = (prompt + completion)[:max_length]
        labels = [IGNORE_INDEX] * len(prompt) + ids[len(prompt) :]
        labels[0] = IGNORE_INDEX  # the first token is never predicted
        return Encoded(ids, labels, where)

    out = []
    for i, (ex, prompt, completion) in enumerate(kept):
        partner = kept[i - 1][2]  # i = 0 takes the last one: TRL's rotation by one
        out.append(
            EncodedUnpaired(
                seq=sequence(prompt, completion, ex.where),
                kl=sequence(prompt, partner, f"{ex.where} (KL)"),
                label=ex.label,
                where=ex.where,
            )
        )
    return out


def collate_unpaired(
    examples: list[EncodedUnpaired],
    *,
    pad_id: int,
    pad_to_multiple_of: int = 1,
    buckets: tuple[int, ...] = (),
    shared: bool = False,
    padding_free: bool = False,
) -> dict:
    """B examples -> the batch of the module docstring (``shared``: with the ``ref_pair_`` rows; ``padding_free``:
    the answers, and apart from them the KL answers, several in a row where that computes less)."""
    import torch

    shapes = {"pad_id": pad_id, "pad_to_multiple_of": pad_to_multiple_of, "buckets": buckets}

    def layout(sequences: list[Encoded]) -> dict:
        if padding_free:
            return collate_padding_free(sequences, **shapes, owners=True)
        return collate([[s] for s in sequences], **shapes)

    batch = layout([e.seq for e in examples])
    kl = layout([e.kl for e in examples])
    batch.update({f"kl_{k}": v for k, v in kl.items()})
    batch["label"] = torch.tensor([e.label for e in examples], dtype=torch.bool)  # (B,)
    if examples and all(e.ref_logps is not None for e in examples):
        batch["ref_logps"] = torch.tensor([e.ref_logps[0] for e in examples], dtype=torch.float64)  # (B,)
        batch["ref_kl_logps"] = torch.tensor([e.ref_logps[1] for e in examples], dtype=torch.float64)  # (B,)
    elif shared:  # the reference runs both sequences without gradients: one row each, the prompt once
        pairs = collate_pairs(
            [EncodedPair(e.seq, e.kl) for e in examples],
            pad_id=pad_id,
            pad_to_multiple_of=pad_to_multiple_of,
            buckets=buckets,
            shared=True,
        )
        batch.update({f"ref_pair_{k}": v for k, v in pairs.items()})
    return batch


class UnpairedSource(PairSource):
    """``PairSource`` over rated answers: the same order, sharding and resumable state; a batch holds
    ``batch_size`` answers (each with its mismatched KL answer, in one row with ``shared``)."""

    collate = staticmethod(collate_unpaired)
