"""Contamination: which eval items share a long n-gram with training text.

The method is datatrove's n-gram decontamination (``datatrove.pipeline.decont``) and the field's (GPT-3,
Llama 2, FineWeb's decontamination): text is normalised (lowercase, punctuation and symbols turned into
spaces, whitespace collapsed, Unicode NFC), split into words, and every ``n``-gram of words (13 by default)
of an eval item is indexed; a training document that contains one of them has seen that item. Two choices
differ from datatrove's defaults and are said here: accents are kept (Spanish ``él``/``el``, ``sí``/``si``,
``está``/``esta`` are different words; datatrove strips diacritics) and numbers are kept as written (a math
item's numbers are what makes it that item; datatrove turns every number into 0). An item is indexed as a
whole (its query followed by its right answer: datatrove's ``find_query_ngrams`` plus its overlap and
label n-grams). An item shorter than ``n`` words is indexed as one n-gram of its own length when it has at
least ``min_words`` words; shorter ones cannot be told from common phrases and are counted as not
checkable. An n-gram shared by many items of one task (``template_share``) is the task's template (an
instruction every prompt ends with), not an item, and is left out.

``eval_items`` reads the eval sets Aura ships (the aura-es suite's tasks and its math task's test split)
from their files, so ``aura data curate --decontaminate aura-es`` needs nothing from ``aura.evaluation``.
"""

from __future__ import annotations

import json
import unicodedata
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from aura.core.errors import AuraError
from aura.core.i18n import Messages

M = Messages(
    "contamination",
    {
        "unknown_set": (
            "'{name}' no es un conjunto de evaluación que Aura conozca; los que hay: {valid}.",
            "'{name}' is not an eval set Aura knows; the ones there are: {valid}.",
        ),
    },
)

N_GRAMS = 13  # the field's default (GPT-3's 13-gram overlap; datatrove's examples)
MIN_WORDS = 8  # an item shorter than this is not checkable: its words are a common phrase
TEMPLATE_SHARE = 0.5  # an n-gram in more than this share of a task's items (and in 3 or more) is its template

RESOURCES = Path(__file__).resolve().parents[1] / "resources"
AURA_ES_DIR = RESOURCES / "eval" / "aura-es"
MATH_TEST = RESOURCES / "math_es" / "test.jsonl"
MATH_TASK = "aura_es_matematicas"
_SPACE = " "


class _Spaces(dict):
    """``str.translate``'s table, filled as characters are met: punctuation, symbols, separators and controls
    become a space, format characters (soft hyphen, zero-width joiner) nothing, the rest stay."""

    def __missing__(self, code: int):
        cat = unicodedata.category(chr(code))
        self[code] = "" if cat == "Cf" else _SPACE if cat[0] in "PSZC" else chr(code)
        return self[code]


_TABLE = _Spaces()


def words(text: str) -> list[str]:
    """The normalised words of ``text``: NFC, lowercase, every punctuation mark and symbol (Unicode
    categories P and S: ``¿¡«»`` too) a space, split on whitespace. Accents and digits are kept."""
    return unicodedata.normalize("NFC", text).lower().translate(_TABLE).split()


@dataclass(frozen=True)
class EvalItem:
    task: str
    id: str
    text: str  # what the model is shown and the right answer, as one text


def _jsonl(path: Path) -> Iterator[dict]:
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            yield json.loads(line)


def aura_es_items(limit: int = 0) -> list[EvalItem]:
    """The aura-es suite's items (each task's first ``limit`` when given, as ``aura eval --limit`` scores):
    the multiple-choice tasks' query and right choice, the math task's problem and its answer (the worked solution is
    not shown to the model)."""
    out = []
    for path in sorted(AURA_ES_DIR.glob("aura_es_*.jsonl")):
        rows = list(_jsonl(path))
        for row in rows[:limit] if limit else rows:
            out.append(EvalItem(path.stem, str(row["id"]), f"{row['query']} {row['choices'][row['gold']]}"))
    rows = list(_jsonl(MATH_TEST))
    for row in rows[:limit] if limit else rows:
        out.append(EvalItem(MATH_TASK, str(row["id"]), f"{row['prompt']} {row['answer']}"))
    return out


EVAL_SETS = {"aura-es": aura_es_items}


def eval_items(name: str, *, limit: int = 0) -> list[EvalItem]:
    if name not in EVAL_SETS:
        raise AuraError(M("unknown_set", name=name, valid=", ".join(EVAL_SETS)))
    return EVAL_SETS[name](limit)


@dataclass
class EvalIndex:
    """Every indexed n-gram of a set of eval items -> the items that hold it."""

    items: list[EvalItem]
    whole: list[EvalItem] | None = None  # every item of the set, when ``items`` is its first N per task
    n: int = N_GRAMS
    min_words: int = MIN_WORDS
    grams: dict[str, set[int]] = field(default_factory=dict)  # "w1 w2 ... wn" -> item positions
    lengths: set[int] = field(default_factory=set)  # the n-gram lengths indexed (n, and short items')
    first_pairs: set[tuple[str, str]] = field(default_factory=set)  # each n-gram's first two words: a cheap test
    unchecked: Counter = field(default_factory=Counter)  # task -> items too short to check
    templates: Counter = field(default_factory=Counter)  # task -> template n-grams left out

    def __post_init__(self):
        per_item: list[tuple[list[str], int]] = []  # (words, n-gram length) of each checkable item
        shared: dict[str, Counter] = {}  # task -> n-gram -> items holding it
        for item in self.items:
            w = words(item.text)
            k = min(self.n, len(w))
            per_item.append((w, k))
            if len(w) < self.min_words:
                self.unchecked[item.task] += 1
        for item in self.whole or self.items:  # a template is found on every item of the task, not a --limit's few
            w = words(item.text)
            k = min(self.n, len(w))
            if len(w) >= self.min_words:
                shared.setdefault(item.task, Counter()).update({" ".join(w[j : j + k]) for j in range(len(w) - k + 1)})
        sizes = Counter(item.task for item in self.whole or self.items)
        template = {
            task: {g for g, c in grams.items() if c >= 3 and c > TEMPLATE_SHARE * sizes[task]}
            for task, grams in shared.items()
        }
        for i, (item, (w, k)) in enumerate(zip(self.items, per_item)):
            if len(w) < self.min_words:
                continue
            grams = [" ".join(w[j : j + k]) for j in range(len(w) - k + 1)]
            mine = template.get(item.task, set())
            covered = set()  # word positions inside the task's template: no n-gram touching them is the item's
            for j, g in enumerate(grams):
                if g in mine:
                    covered.update(range(j, j + k))
            self.templates[item.task] += sum(g in mine for g in grams)
            for j, g in enumerate(grams):
                if covered.isdisjoint(range(j, j + k)):
                    self.grams.setdefault(g, set()).add(i)
                    self.lengths.add(k)
                    self.first_pairs.add((w[j], w[j + 1]))

    def hits(self, text: str) -> Iterator[tuple[int, str]]:
        """(item position, the shared n-gram) for every indexed n-gram ``text`` contains."""
        w = words(text)
        pairs = self.first_pairs
        for j in range(len(w) - 1):
            if (w[j], w[j + 1]) not in pairs:
                continue
            for k in self.lengths:
                if j + k <= len(w):
                    owners = self.grams.get(" ".join(w[j : j + k]))
                    if owners:
                        for i in owners:
                            yield i, " ".join(w[j : j + k])

    def first_hit(self, text: str) -> tuple[EvalItem, str] | None:
        """The first eval item ``text`` shares an n-gram with, and the n-gram; None when clean."""
        for i, gram in self.hits(text):
            return self.items[i], gram
        return None


def scan(index: EvalIndex, texts: Iterable[tuple[str, str]], *, examples: int = 3) -> dict:
    """Training text (``(where, text)`` pairs: a file and line, a shard and document) against ``index``:
    per task, how many of its items share an n-gram with it, which, and up to ``examples`` of them with the
    n-gram and where it was seen. JSON-ready."""
    seen: dict[int, tuple[str, str]] = {}
    documents = 0
    for where, text in texts:
        documents += 1
        for i, gram in index.hits(text):
            seen.setdefault(i, (gram, where))
    sizes = Counter(item.task for item in index.items)
    tasks = {}
    for task in sorted(sizes):
        mine = sorted((i for i in seen if index.items[i].task == task), key=lambda i: index.items[i].id)
        tasks[task] = {
            "items": sizes[task],
            "seen": len(mine),
            "not_checkable": index.unchecked[task],
            "template_ngrams": index.templates[task],
            "seen_ids": [index.items[i].id for i in mine],
            "examples": [{"id": index.items[i].id, "ngram": seen[i][0], "where": seen[i][1]} for i in mine[:examples]],
        }
    return {
        "method": {
            "ngrams": index.n,
            "min_words": index.min_words,
            "normalisation": "NFC, lowercase, punctuation and symbols removed, accents and digits kept",
        },
        "documents": documents,
        "items": len(index.items),
        "seen": len(seen),
        "tasks": tasks,
    }
