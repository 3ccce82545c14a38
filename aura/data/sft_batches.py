"""Conversations -> token ids with masked labels -> packed or padded, resumable, rank-aware batches.

``encode`` renders a conversation with the chat template and labels only the assistant turns, each
with the end-of-turn text the template puts after it (so the model learns to stop), unless
``train_on_prompt``. The assistant spans come from rendering the conversation incrementally (prefix up
to each assistant turn with the generation prompt, then including the turn) and mapping those
character positions onto the token offsets of the whole rendering; the template must render a prefix
of a conversation as a prefix of the whole (checked, with a clear error otherwise).

``SFTDataSource`` is what the training loop consumes: per-epoch deterministic shuffle from the seed,
sharding across ranks, ``state_dict()`` / ``load_state_dict()`` for exact resume. With ``packing``,
examples share rows of ``max_length`` tokens and ``position_ids`` restart at 0 for each example;
transformers (>= 4.54, masking_utils) turns restarting position_ids into a block-diagonal causal mask
for every attention backend (eager, sdpa, flash) when no ``attention_mask`` and no KV cache are
passed, so a packed batch carries no attention_mask, and the forward must run with ``use_cache=False``
(the training loop does): with a cache, transformers 5.23 silently falls back to a plain causal mask.
"""

from __future__ import annotations

import bisect
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from aura.core import console
from aura.core.errors import AuraError
from aura.core.i18n import Messages
from aura.data.sft import Conversation
from aura.text.templates import TEXT_MARKERS

IGNORE_INDEX = -100

M = Messages(
    "sft_batches",
    {
        "no_marker": (
            "{count:texto ya formateado no tiene|textos ya formateados no tienen} marcador de respuesta "
            "({markers}); se entrenan completos (p. ej. {examples}).",
            "{count:pre-formatted text has|pre-formatted texts have} no response marker ({markers}); "
            "they are trained whole (e.g. {examples}).",
        ),
        "not_prefix": (
            "La plantilla de chat no renderiza el principio de una conversación como el "
            "principio de la conversación completa ({where}), así que no se puede saber qué "
            "tokens son respuesta. Elige una plantilla con --template ({choices}).",
            "The chat template does not render the start of a conversation as the start of "
            "the whole conversation ({where}), so the response tokens cannot be located. "
            "Choose a template with --template ({choices}).",
        ),
        "template_failed": ("{where}: la plantilla de chat falló: {err}", "{where}: the chat template failed: {err}"),
        "too_long_dropped": (
            "Ejemplos descartados por ser más largos que --max-length {max_length:token|tokens}: {count} "
            "(p. ej. {examples}). Sube --max-length o usa --truncation truncate.",
            "Dropped {count:example|examples} longer than --max-length {max_length:token|tokens} (e.g. "
            "{examples}). Raise --max-length or use --truncation truncate.",
        ),
        "too_long_truncated": (
            "Ejemplos recortados a {max_length:token|tokens} por ser más largos: {count} (p. ej. "
            "{examples}); de ellos, {lost} quedaron sin tokens de respuesta y se descartaron.",
            "Truncated {count:longer example|longer examples} to {max_length:token|tokens} (e.g. {examples}); "
            "{lost} of them kept no response tokens and were dropped.",
        ),
        "all_dropped": (
            "Ningún ejemplo cabe en --max-length {max_length:token|tokens} (el más corto tiene "
            "{shortest}). Sube --max-length o usa --truncation truncate.",
            "No example fits in --max-length {max_length:token|tokens} (the shortest has {shortest}). "
            "Raise --max-length or use --truncation truncate.",
        ),
        "resume_mismatch": (
            "El checkpoint se creó con otros datos ({field}: {saved} frente a {now}); la "
            "posición en los datos no se puede restaurar. Usa los mismos datos, --seed y "
            "--val-fraction que la ejecución original.",
            "The checkpoint was made with other data ({field}: {saved} vs {now}); the data "
            "position cannot be restored. Use the same data, --seed and --val-fraction as "
            "the original run.",
        ),
        # what each saved-state key is to the user
        "k_seed": ("--seed", "--seed"),
        "k_examples": ("número de ejemplos", "number of examples"),
        "k_packing": ("--packing", "--packing"),
    },
)

# ---------------------------------------------------------------------------------------------------
# Conversations -> token ids and labels


@dataclass
class Encoded:
    input_ids: list[int]
    labels: list[int]
    where: str = ""
    whole_text: bool = field(default=False, compare=False)  # a text without a response marker


def detect_text_family(texts: Iterable[str]) -> str | None:
    """The template family whose assistant marker appears in pre-formatted texts (most frequent)."""
    counts = Counter(fam for t in texts for fam, (start, _) in TEXT_MARKERS.items() if start in t)
    return counts.most_common(1)[0][0] if counts else None


def rstrip_end(text: str, start: int, end: int) -> int:
    """End of a span without the whitespace a template puts after the end-of-turn token (never generated)."""
    while end > start and text[end - 1] in " \n":
        end -= 1
    return end


def _text_spans(text: str, bos: str | None, eos: str | None) -> list[tuple[int, int]] | None:
    """Character spans of the responses in an already formatted text, or None without a marker."""
    for start_marker, next_marker in TEXT_MARKERS.values():
        if start_marker not in text:
            continue
        spans, pos = [], 0
        while (i := text.find(start_marker, pos)) >= 0:
            s = i + len(start_marker)
            e = text.find(next_marker, s)
            e = len(text) if e < 0 else e
            # a "<s>" opening the next turn is not response (when BOS == EOS, only a second one)
            if (
                bos
                and e < len(text)
                and text[s:e].endswith(bos)
                and (bos != eos or text[s : e - len(bos)].endswith(eos))
            ):
                e -= len(bos)
            pos = e
            spans.append((s, rstrip_end(text, s, e)))
        return spans
    return None


def render_chat(tokenizer, messages, *, generation_prompt: bool, where: str, tools: list[dict] | None = None) -> str:
    """``messages`` in the tokenizer's chat template (``tools``: the JSON schemas of the tools offered)."""
    extra = {"tools": tools} if tools else {}
    try:
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt, **extra)
    except Exception as e:  # jinja TemplateError, raise_exception() inside the template
        raise AuraError(M("template_failed", where=where, err=e)) from None


def _chat_spans(tokenizer, conv: Conversation) -> tuple[str, list[tuple[int, int]]]:
    from aura.text.templates import template_names

    msgs = conv.messages or []
    full = render_chat(tokenizer, msgs, generation_prompt=False, where=conv.where)
    spans = []
    for i, m in enumerate(msgs):
        if m["role"] != "assistant":
            continue
        before = render_chat(tokenizer, msgs[:i], generation_prompt=True, where=conv.where)
        upto = (
            full
            if i == len(msgs) - 1
            else render_chat(tokenizer, msgs[: i + 1], generation_prompt=False, where=conv.where)
        )
        if not (full.startswith(upto) and upto.startswith(before)):
            raise AuraError(M("not_prefix", where=conv.where, choices=template_names()))
        spans.append((len(before), rstrip_end(upto, len(before), len(upto))))
    return full, spans


def encode(conv: Conversation, tokenizer, *, train_on_prompt: bool = False) -> Encoded:
    """Token ids and labels (IGNORE_INDEX outside the trained spans) of one conversation."""
    spans: list[tuple[int, int]] | None
    if conv.messages is not None:
        text, spans = _chat_spans(tokenizer, conv)
    else:
        text = conv.text or ""
        eos = tokenizer.eos_token
        if eos and not text.rstrip().endswith(eos):
            text = text + eos  # so the model learns where a text ends
        spans = _text_spans(text, tokenizer.bos_token, tokenizer.eos_token)
    whole = spans is None
    if whole:
        spans = [(0, len(text))]
    if train_on_prompt:
        ids = tokenizer.encode(text, add_special_tokens=False)
        labels = list(ids)
    elif getattr(tokenizer, "is_fast", True):
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        ids = list(enc["input_ids"])
        # a token belongs to a response when its first character lies inside a response span
        labels = [IGNORE_INDEX] * len(ids)
        k = 0
        for j, (start, end) in enumerate(enc["offset_mapping"]):
            while k < len(spans) and start >= spans[k][1]:
                k += 1
            if k < len(spans) and spans[k][0] <= start < spans[k][1] and end > start:
                labels[j] = ids[j]
    else:  # a slow (Python) tokenizer has no offsets: token counts of the rendered prefixes
        ids = tokenizer.encode(text, add_special_tokens=False)
        labels = [IGNORE_INDEX] * len(ids)
        for s, e in spans:
            a = len(tokenizer.encode(text[:s], add_special_tokens=False))
            b = len(tokenizer.encode(text[:e], add_special_tokens=False))
            labels[a:b] = ids[a:b]
    if labels:
        # the first token is never predicted: masking it also keeps packed examples independent
        labels[0] = IGNORE_INDEX
    return Encoded(ids, labels, conv.where, whole_text=whole)


def encode_all(
    convs: list[Conversation], tokenizer, *, max_length: int, truncation: str = "drop", train_on_prompt: bool = False
) -> list[Encoded]:
    """Encode every conversation; examples over ``max_length`` are dropped or truncated, and reported."""
    out, long_, lost, whole = [], [], 0, []
    for conv in convs:
        ex = encode(conv, tokenizer, train_on_prompt=train_on_prompt)
        if ex.whole_text:
            whole.append(ex.where)
        if len(ex.input_ids) > max_length:
            long_.append(ex)
            if truncation != "truncate":
                continue
            ex = Encoded(ex.input_ids[:max_length], ex.labels[:max_length], ex.where, ex.whole_text)
            if all(t == IGNORE_INDEX for t in ex.labels):
                lost += 1
                continue
        out.append(ex)
    if whole:
        markers = ", ".join(repr(m[0]) for m in TEXT_MARKERS.values())
        console.warn(M("no_marker", count=len(whole), markers=markers, examples="; ".join(whole[:3])))
    if long_:
        examples = "; ".join(e.where for e in long_[:3])
        if truncation == "truncate":
            console.warn(M("too_long_truncated", count=len(long_), max_length=max_length, examples=examples, lost=lost))
        else:
            console.warn(M("too_long_dropped", count=len(long_), max_length=max_length, examples=examples))
    if not out and convs:
        raise AuraError(
            M("all_dropped", max_length=max_length, shortest=min(len(e.input_ids) for e in long_) if long_ else 0)
        )
    return out


# ---------------------------------------------------------------------------------------------------
# Packing, collation, the data source


def pack(lengths: list[int], max_length: int) -> list[list[int]]:
    """Best-fit-decreasing: example indices grouped into rows of at most ``max_length`` tokens.

    Deterministic (ties broken by index) and independent of the epoch, so the number of rows, hence
    of steps per epoch, is fixed for the whole run; the rows are shuffled per epoch instead.
    """
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    rows: list[list[int]] = []
    free: list[tuple[int, int]] = []  # (free tokens, row id), sorted
    for i in order:
        n = lengths[i]
        k = bisect.bisect_left(free, (n, -1))
        if k < len(free):
            space, row = free.pop(k)
            rows[row].append(i)
            if space - n > 0:
                bisect.insort(free, (space - n, row))
        else:
            rows.append([i])
            if max_length - n > 0:
                bisect.insort(free, (max_length - n, len(rows) - 1))
    for r in rows:
        r.sort()  # keep the data order inside a row
    return rows


def pack_batch(lengths: list[int], fit, *, limit: int | None = None) -> list[list[int]]:
    """One micro-batch's sequences (``lengths``) in as few tokens as a dense attention mask allows: rows of the
    longest one's width (``pack``; ``fit`` rounds a width to the batch's shapes), where short sequences beside a
    long one share its row; then wider rows (the longest plus another, or k times the longest) only where they
    compute fewer tokens (rows x width) *and* no more attention (rows x width^2) than the layout kept so far. So
    packing never adds compute of either kind to one sequence per row. ``limit``: the widest row it may make."""
    if not lengths:
        return []
    longest = max(lengths)
    widths = sorted({longest * k for k in range(1, len(lengths) + 1)} | {longest + n for n in lengths})
    best, best_cost = None, None
    for capacity in widths:
        rows = pack(lengths, capacity)
        width = fit(max(sum(lengths[i] for i in row) for row in rows))
        if best is not None and limit is not None and width > limit:
            break
        cost = (len(rows) * width, len(rows) * width**2)  # (tokens, attention)
        if best_cost is None or (cost[0] < best_cost[0] and cost[1] <= best_cost[1]):
            best, best_cost = rows, cost
        if len(rows) == 1:
            break
    return best


def padded_width(width: int, *, pad_to_multiple_of: int = 1, buckets: tuple[int, ...] = ()) -> int:
    """The width ``collate`` gives a batch whose longest row holds ``width`` tokens: rounded up to a multiple of
    ``pad_to_multiple_of``, then to the smallest bucket that holds it (the width itself when none does)."""
    if pad_to_multiple_of > 1:
        width = -(-width // pad_to_multiple_of) * pad_to_multiple_of
    return next((b for b in buckets if b >= width), width)


def batch_grouping(
    lengths: list[int], *, pad_to_multiple_of: int = 1, buckets: tuple[int, ...] = ()
) -> list[list[int]]:
    """``pack_batch`` with the widths ``collate`` gives (``padded_width``): the rows of a micro-batch's sequences
    where they pack padding-free (``collate_padding_free``, and a pair's shared-prompt rows)."""
    shapes = {"pad_to_multiple_of": pad_to_multiple_of, "buckets": buckets}
    return pack_batch(lengths, lambda width: padded_width(width, **shapes), limit=max(buckets, default=None))


def batch_cost(lengths: list[int], *, packs: bool, pad_to_multiple_of: int = 1, buckets: tuple[int, ...] = ()):
    """(tokens, attention) the collated micro-batch of sequences of ``lengths`` computes: rows x width and
    rows x width^2, one sequence per row, or as ``batch_grouping`` groups them (``packs``)."""
    shapes = {"pad_to_multiple_of": pad_to_multiple_of, "buckets": buckets}
    if packs:
        lengths = [sum(lengths[i] for i in row) for row in batch_grouping(lengths, **shapes)]
    width = padded_width(max(lengths), **shapes)
    return len(lengths) * width, len(lengths) * width**2


def length_buckets(max_length: int, *, smallest: int = 64) -> tuple[int, ...]:
    """The few padded lengths a compiled model sees (powers of two, then ``max_length``): variable-length
    batches padded to one of them compile a handful of graphs instead of one per length."""
    out, b = [], smallest
    while b < max_length:
        out.append(b)
        b *= 2
    return (*out, max_length)


def spread(values: list[int], sizes: list[int], shape):
    """One value per stretch of tokens (``values[i]`` repeated ``sizes[i]`` times, in order) as a long tensor of
    ``shape``: how the collates lay out per-example columns in one numpy call instead of a slice per example."""
    import numpy as np
    import torch

    return torch.from_numpy(np.repeat(np.array(values, dtype=np.int64), sizes)).view(shape)


def collate(
    rows: list[list[Encoded]],
    *,
    pad_id: int,
    packing: bool = False,
    pad_to_multiple_of: int = 1,
    buckets: tuple[int, ...] = (),
) -> dict:
    """Rows of examples -> tensors. Labels are IGNORE_INDEX on padding.

    Padded: input_ids, labels, attention_mask (B, T). Packed: input_ids, labels, position_ids (B, T)
    with positions restarting at 0 per example (and per padding tail), and no attention_mask, which is
    what makes transformers build the block-diagonal causal mask; ``input_tokens`` (a 0-d tensor) counts the
    rows' real tokens.
    """
    import numpy as np
    import torch

    lengths = [sum(len(e.input_ids) for e in row) for row in rows]
    T = padded_width(max(lengths), pad_to_multiple_of=pad_to_multiple_of, buckets=buckets)
    B = len(rows)
    # one flat list per tensor and one conversion: torch.tensor per example costs ~8x more per token
    ids: list[int] = []
    labels: list[int] = []
    segments: list[int] = []  # the length of each example and of each row's padding tail, in order
    for row, length in zip(rows, lengths):
        for ex in row:
            ids += ex.input_ids
            labels += ex.labels
            segments.append(len(ex.input_ids))
        ids += [pad_id] * (T - length)
        labels += [IGNORE_INDEX] * (T - length)
        segments.append(T - length)
    input_ids = torch.from_numpy(np.fromiter(ids, dtype=np.int64, count=B * T)).view(B, T)  # (B, T)
    label_ids = torch.from_numpy(np.fromiter(labels, dtype=np.int64, count=B * T)).view(B, T)  # (B, T)
    if packing:  # no attention_mask (see the module docstring); ``input_tokens``: the real ones, for throughput
        sizes = np.array(segments, dtype=np.int64)
        starts = np.cumsum(sizes) - sizes
        positions = np.arange(B * T, dtype=np.int64) - np.repeat(starts, sizes)  # restarting at each segment
        position_ids = torch.from_numpy(positions).view(B, T)  # (B, T)
        tokens = torch.tensor(sum(lengths))
        return {"input_ids": input_ids, "labels": label_ids, "position_ids": position_ids, "input_tokens": tokens}
    attention_mask = (torch.arange(T) < torch.tensor(lengths)[:, None]).long()  # (B, T)
    return {"input_ids": input_ids, "labels": label_ids, "attention_mask": attention_mask}


def collate_padding_free(
    sequences: list[Encoded],
    *,
    pad_id: int,
    pad_to_multiple_of: int = 1,
    buckets: tuple[int, ...] = (),
    owners: bool = False,
) -> dict:
    """``sequences`` (one example each) in as few rows as ``pack_batch`` allows: ``collate``'s packed rows where
    that computes less, else its padded rows (one per sequence). ``owners``: packed rows also carry ``sequence``
    (R, T), the index of the sequence each token belongs to (-1 on padding), and ``sequence_row`` (N,), the row of
    each sequence, from which an objective sums per sequence (``aura.train.objectives.preference.sequence_logps``)."""
    import torch

    shapes = {"pad_to_multiple_of": pad_to_multiple_of, "buckets": buckets}
    grouping = batch_grouping([len(s.input_ids) for s in sequences], **shapes)
    if len(grouping) >= len(sequences):
        return collate([[s] for s in sequences], pad_id=pad_id, **shapes)
    batch = collate([[sequences[i] for i in group] for group in grouping], pad_id=pad_id, packing=True, **shapes)
    if owners:
        width = batch["input_ids"].shape[1]
        owner, sizes = [], []  # per stretch of a row (each sequence, then the padding tail): its owner, its length
        sequence_row = torch.zeros(len(sequences), dtype=torch.long)  # (N,)
        for r, group in enumerate(grouping):
            for i in group:
                owner.append(i)
                sizes.append(len(sequences[i].input_ids))
                sequence_row[i] = r
            owner.append(-1)
            sizes.append(width - sum(len(sequences[i].input_ids) for i in group))
        sequence = spread(owner, sizes, (-1, width))  # (R, T)
        batch.update(sequence=sequence, sequence_row=sequence_row)
    return batch


class SFTDataSource:
    """Resumable, rank-aware batches of encoded examples: the loop's ``BatchSource`` for fine-tuning.

    ``next_batch()`` returns the next micro-batch of the current epoch on this rank, or None once the
    epoch is exhausted; ``start_epoch(e)`` begins epoch ``e``. An epoch's order depends only on ``seed``
    and the epoch number; rows are split across ranks round-robin after padding the row list (by
    repeating its start, like DistributedSampler), so every rank runs the same number of steps.
    ``iter(source)`` yields every batch of the current epoch without moving the position (validation).

    ``padding_free`` (without ``packing``): a micro-batch's examples go in fewer rows, packed as ``packing``
    packs them, where that computes fewer tokens and no more attention (``pack_batch``); the micro-batch holds
    the same examples, so the loss, the order and resume are those of the padded rows.

    ``window`` (the loop's gradient accumulation): the micro-batches of one optimizer step hold their rows
    longest first (``_sorted_window``) where that computes fewer tokens and no more attention, or no more tokens
    and less attention, than the data order; the step sums the same examples' losses over the same global count,
    so only the summation order changes, and a batch stays a pure function of (seed, epoch, index, rank).
    """

    def __init__(
        self,
        examples: list[Encoded],
        *,
        batch_size: int,
        pad_id: int,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        packing: bool = False,
        max_length: int = 2048,
        shuffle: bool = True,
        pad_to_multiple_of: int = 1,
        buckets: tuple[int, ...] = (),
        padding_free: bool = False,
        window: int = 1,
    ):
        if not examples:
            raise ValueError("SFTDataSource needs at least one example")
        self.padding_free = padding_free and not packing
        self.examples = examples
        self.batch_size = batch_size
        self.pad_id = pad_id
        self.seed = seed
        self.rank, self.world_size = rank, world_size
        self.packing = packing
        self.shuffle = shuffle
        self.pad_to_multiple_of = pad_to_multiple_of
        self.buckets = buckets
        lengths = [len(e.input_ids) for e in examples]
        self.rows = pack(lengths, max_length) if packing else [[i] for i in range(len(examples))]
        self.rows_per_rank = -(-len(self.rows) // world_size)
        self.batches_per_epoch = -(-self.rows_per_rank // batch_size)  # equal on every rank
        self.epoch = 0
        self.position = 0  # batches of the current epoch already returned on this rank
        self._order: tuple[int, list[int]] | None = None  # (epoch, this rank's rows) cache
        self.window = max(1, window)
        self._window: tuple[tuple[int, int], list[list[int]]] | None = None  # ((epoch, window), its batches' rows)

    def __len__(self) -> int:
        return self.batches_per_epoch

    @property
    def num_label_tokens(self) -> int:
        return sum(sum(t != IGNORE_INDEX for t in e.labels[1:]) for e in self.examples)

    def _rank_rows(self, epoch: int) -> list[int]:
        if self._order is not None and self._order[0] == epoch:
            return self._order[1]
        order = list(range(len(self.rows)))
        if self.shuffle:
            random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
        total = self.rows_per_rank * self.world_size
        order = (order * (-(-total // len(order))))[:total]
        mine = order[self.rank :: self.world_size]
        self._order = (epoch, mine)
        return mine

    def batch(self, epoch: int, index: int) -> dict:
        """Batch ``index`` of ``epoch`` on this rank (a pure function of seed, epoch, index, rank, window)."""
        return self.collate_rows(self.batch_rows(epoch, index))

    def collate_rows(self, rows: list[int]) -> dict:
        """The micro-batch of the data's ``rows``."""
        examples = [[self.examples[i] for i in self.rows[r]] for r in rows]
        shapes = {"pad_id": self.pad_id, "pad_to_multiple_of": self.pad_to_multiple_of, "buckets": self.buckets}
        if self.padding_free:  # the micro-batch's examples in fewer rows where that computes less
            return collate_padding_free([row[0] for row in examples], **shapes)
        return collate(examples, packing=self.packing, **shapes)

    def sequences(self, row: int) -> list[int]:
        """The lengths of the sequences the data's ``row`` puts in a micro-batch: ``collate_rows`` lays them
        out one per row, or packs them (``packs_sequences``)."""
        lengths = [len(self.examples[i].input_ids) for i in self.rows[row]]
        return lengths if self.padding_free else [sum(lengths)]

    @property
    def packs_sequences(self) -> bool:
        return self.padding_free

    def batch_rows(self, epoch: int, index: int) -> list[int]:
        """The data's rows in batch ``index`` of ``epoch`` on this rank."""
        if self.window == 1:
            return self._rank_rows(epoch)[index * self.batch_size : (index + 1) * self.batch_size]
        key = (epoch, index // self.window)
        if self._window is None or self._window[0] != key:
            self._window = (key, self._sorted_window(*key))
        return self._window[1][index % self.window]

    def _sorted_window(self, epoch: int, window: int) -> list[list[int]]:
        """The rows of each micro-batch of ``window`` (of ``epoch``): the window's rows longest first, in
        micro-batches of the sizes the data order gives them, where that costs less (see the class docstring);
        else the data order. Equal lengths keep the data order."""
        mine, size, first = self._rank_rows(epoch), self.batch_size, window * self.window
        given = [
            mine[i * size : (i + 1) * size] for i in range(first, min(first + self.window, self.batches_per_epoch))
        ]
        sequences = {r: self.sequences(r) for rows in given for r in rows}
        # packed, a row costs its sequences' sum; else a micro-batch is as wide as its longest sequence
        length = {r: sum(n) if self.packs_sequences else max(n) for r, n in sequences.items()}
        ranked = iter(sorted((r for rows in given for r in rows), key=lambda r: -length[r]))
        tidy = [[next(ranked) for _ in rows] for rows in given]
        (t_tokens, t_attention), (g_tokens, g_attention) = self._cost(tidy, sequences), self._cost(given, sequences)
        cheaper = (t_tokens, t_attention) != (g_tokens, g_attention)
        return tidy if cheaper and t_tokens <= g_tokens and t_attention <= g_attention else given

    def _cost(self, batches: list[list[int]], sequences: dict[int, list[int]] | None = None) -> tuple[int, int]:
        """(tokens, attention) the collated ``batches`` compute (``batch_cost``); ``sequences``: each row's, if
        known (``sequences``)."""
        shapes = {"pad_to_multiple_of": self.pad_to_multiple_of, "buckets": self.buckets}
        lengths = sequences if sequences is not None else {r: self.sequences(r) for rows in batches for r in rows}
        costs = [
            batch_cost([n for r in rows for n in lengths[r]], packs=self.packs_sequences, **shapes) for rows in batches
        ]
        return sum(c[0] for c in costs), sum(c[1] for c in costs)

    def next_batch(self) -> dict | None:
        if self.position >= self.batches_per_epoch:
            return None
        batch = self.batch(self.epoch, self.position)
        self.position += 1
        return batch

    def start_epoch(self, epoch: int) -> None:
        self.epoch, self.position = epoch, 0

    def __iter__(self) -> Iterator[dict]:
        for i in range(self.batches_per_epoch):
            yield self.batch(self.epoch, i)

    def state_dict(self) -> dict:
        return {
            "epoch": self.epoch,
            "position": self.position,
            "seed": self.seed,
            "examples": len(self.examples),
            "rows": len(self.rows),
            "batch_size": self.batch_size,
            "world_size": self.world_size,
            "packing": self.packing,
        }

    def load_state_dict(self, state: dict) -> None:
        for key, now in (("seed", self.seed), ("examples", len(self.examples)), ("packing", self.packing)):
            if state.get(key, now) != now:
                raise AuraError(M("resume_mismatch", field=M("k_" + key), saved=state.get(key), now=now))
        self.epoch = int(state["epoch"])
        position = int(state["position"])
        if (
            state.get("world_size", self.world_size) != self.world_size
            or state.get("batch_size", self.batch_size) != self.batch_size
        ):
            # another layout: resume at the same number of rows consumed over all ranks
            rows_done = position * int(state["batch_size"]) * int(state["world_size"])
            position = rows_done // (self.batch_size * self.world_size)
            if position < self.batches_per_epoch:  # at a step's start, as the loop resumes
                position -= position % self.window
        self.position = min(position, self.batches_per_epoch)
