"""The SQuAD answer metrics some lm-evaluation-harness tasks import from ``transformers.data.metrics.squad_metrics``,
a module transformers 5 removed: ``xquad_es`` (in ``spanish_bench``), ``coqa``, ``record``, ``norquad``, the
Galician and Catalan benches. ``aura.evaluation.harness.legacy_metrics_module`` registers this module under that
name when transformers lacks it, so those tasks load and score.

The definitions are the official SQuAD 2.0 evaluation's (Rajpurkar et al., 2018), which transformers' module
followed: an answer is normalised (lower case, ASCII punctuation removed, the English articles a/an/the removed,
whitespace collapsed); exact match is equality of the normalised strings; F1 is the harmonic mean of token
precision and recall over the normalised tokens' multiset overlap, and when either side has no token it is 1
if both are empty, else 0.
"""

from __future__ import annotations

import collections
import re
import string

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower case, no ASCII punctuation, no English articles, single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def get_tokens(text: str) -> list[str]:
    return normalize_answer(text).split() if text else []


def compute_exact(gold: str, prediction: str) -> int:
    return int(normalize_answer(gold) == normalize_answer(prediction))


def compute_f1(gold: str, prediction: str) -> float:
    gold_tokens, pred_tokens = get_tokens(gold), get_tokens(prediction)
    if not gold_tokens or not pred_tokens:  # a "no answer" on either side: right only if both say so
        return float(gold_tokens == pred_tokens)
    common = collections.Counter(gold_tokens) & collections.Counter(pred_tokens)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_tokens), same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)
