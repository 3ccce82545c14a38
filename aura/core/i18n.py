"""User-facing messages in Spanish and English.

Every module that talks to the user owns a small catalogue::

    M = Messages("data", {
        "empty_file": ("El archivo {path} está vacío.", "The file {path} is empty."),
    })
    raise AuraError(M("empty_file", path=p))

Each entry is an ``(es, en)`` pair with the same placeholders; ``tests/test_i18n.py`` checks every
catalogue and every ``M("key")`` call in the source. The language comes from ``--lang``, then
``AURA_LANG``, then the locale (``LC_ALL``, ``LC_MESSAGES``, ``LANG``): Spanish when it starts with
``es``, English otherwise.

Two things a message's format spec does beyond ``str.format`` (docs/architecture.md, "Messages"):

* numbers: ``{tokens:,}`` groups digits as the language writes them: ``6,372,608`` in English,
  ``6 372 608`` in Spanish (a no-break space, only from five digits on: ``1024``, ``12 345``; the RAE's
  rule, also the original guides' spelling). The decimal sign is the point in both languages (the RAE's
  recommendation; values stay copyable into flags and comparable with the CSV). ``num()`` does the same
  for numbers formatted outside a catalogue;
* plurals: ``{n:paso|pasos}`` prints the number (grouped as above) and the singular or plural word:
  ``1 paso``, ``20 pasos``. A count followed by a noun always uses it (the catalogue test checks).
"""

from __future__ import annotations

import numbers
import os
import string

LANGS = ("es", "en")
_forced_lang: str | None = None
REGISTRY: dict[str, dict[str, tuple[str, str]]] = {}


def set_lang(lang: str | None) -> None:
    """Force the language (``--lang``); ``None`` goes back to the environment."""
    global _forced_lang
    if lang is not None and lang not in LANGS:
        raise ValueError(f"lang must be one of {LANGS}, got {lang!r}")
    _forced_lang = lang


def current_lang() -> str:
    if _forced_lang:
        return _forced_lang
    env = os.environ.get("AURA_LANG", "").strip().lower()
    if env:
        return "es" if env.startswith("es") else "en"
    for var in ("LC_ALL", "LC_MESSAGES", "LANG"):
        value = os.environ.get(var, "")
        if value:
            return "es" if value.lower().startswith("es") else "en"
    return "en"


def placeholders(text: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(text) if name}


# Spanish groups digits with a no-break space (a number never splits across lines), from five digits on.
ES_GROUP = "\u00a0"


def _is_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def num(value, spec: str = ",", *, lang: str | None = None) -> str:
    """``format(value, spec)`` with the digit grouping of the language (``num(6372608)``:
    ``6 372 608`` in Spanish, ``6,372,608`` in English). Anything but a number is formatted as is."""
    if not _is_number(value) or "," not in spec or (lang or current_lang()) != "es":
        return format(value, spec)
    if abs(value) < 10_000:  # "1024 tokens", not "1 024 tokens"
        return format(value, spec.replace(",", "", 1))
    return format(value, spec).replace(",", ES_GROUP)


def plural(n, one: str, other: str, *, lang: str | None = None) -> str:
    """``plural(1, "paso", "pasos")`` -> ``1 paso``; any other count takes the plural (``0 pasos``)."""
    return f"{num(n, ',', lang=lang)} {one if n == 1 else other}"


class _Formatter(string.Formatter):
    def __init__(self, lang: str):
        self.lang = lang

    def format_field(self, value, format_spec: str) -> str:
        if "|" in format_spec:
            one, _, other = format_spec.partition("|")
            if isinstance(value, str) and value.replace(",", "").isdigit():
                value = int(value.replace(",", ""))  # a count someone formatted before passing it
            if not _is_number(value):
                return f"{value} {other}"  # never fail a user-facing message over its wording
            return plural(value, one, other, lang=self.lang)
        if "," in format_spec and _is_number(value):
            return num(value, format_spec, lang=self.lang)
        return format(value, format_spec)


class Messages:
    """A namespace of (es, en) message pairs; calling it formats one in the current language."""

    def __init__(self, namespace: str, table: dict[str, tuple[str, str]]):
        if namespace in REGISTRY and REGISTRY[namespace] is not table:
            REGISTRY[namespace].update(table)
            table = REGISTRY[namespace]
        self.namespace = namespace
        self.table = table
        REGISTRY[namespace] = table

    def __call__(self, key: str, /, **kwargs) -> str:  # "/": a message may have a {key} placeholder
        es, en = self.table[key]
        lang = current_lang()
        text = es if lang == "es" else en
        return _Formatter(lang).vformat(text, (), kwargs) if kwargs else text

    def pair(self, key: str) -> tuple[str, str]:
        return self.table[key]


def bi(es: str, en: str) -> str:
    """Pick one of two inline texts (for help strings defined next to a flag)."""
    return es if current_lang() == "es" else en
