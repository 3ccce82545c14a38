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

* numbers: written as the language writes them. English: ``6,372,608`` and ``6.11``. Spanish: a decimal
  comma (``6,11``, ``2,00e-03``) and ``{tokens:,}`` grouped with a narrow no-break space, only from five
  digits on (``1024``, ``12 345``, ``4 172 032``: the RAE's and ISO's rule). Integers are never given
  decimals by the language. A value that follows a flag (``--lr {lr}``, ``--val-fraction={f}``) or asks
  for it with ``!s``/``!r`` keeps Python's spelling (``0.0003``, ``0.01``), so it can be pasted into a command.
  ``num()`` does the same for numbers formatted outside a catalogue (table cells, log lines);
  machine-readable outputs (CSV, JSON, TensorBoard) never go through it;
* plurals: ``{n:paso|pasos}`` prints the number (grouped as above) and the singular or plural word:
  ``1 paso``, ``20 pasos``. A count followed by a noun always uses it (the catalogue test checks).
"""

from __future__ import annotations

import numbers
import os
import re
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


# Spanish groups digits with a narrow no-break space (a number never splits across lines), from five digits
# on, and writes a decimal comma.
ES_GROUP = "\u202f"
_ES_SIGNS = str.maketrans({",": ES_GROUP, ".": ","})
# A placeholder right after a flag holds a value the user may copy into a command: it stays as typed.
_AFTER_FLAG = re.compile(r"--[\w-]+[ =]$")


def _is_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def localize(text: str, *, lang: str | None = None) -> str:
    """A number already written the English way (``12,345.5``, ``2.5e-03``: a formatter's output, such as a
    plot's tick label) in the language's signs."""
    return text.translate(_ES_SIGNS) if (lang or current_lang()) == "es" else text


def num(value, spec: str = ",", *, lang: str | None = None) -> str:
    """``format(value, spec)`` with the digit grouping and decimal sign of the language (``num(6372608)``:
    ``6 372 608`` in Spanish, ``6,372,608`` in English; ``num(6.11, ".2f")``: ``6,11`` / ``6.11``).
    Anything but a number is formatted as is."""
    if not _is_number(value) or (lang or current_lang()) != "es":
        return format(value, spec)
    if "," in spec and abs(value) < 10_000:  # "1024 tokens", not "1 024 tokens"
        spec = spec.replace(",", "", 1)
    return format(value, spec).translate(_ES_SIGNS)


def count(value, *, lang: str | None = None) -> str:
    """A count that arrives as a float (a statistic summed over units: ``tokens_es``) as an integer when it
    is one (``4096``, not ``4096.0000``); other values with four decimals. Grouped as ``num``."""
    if _is_number(value) and float(value).is_integer():
        return num(int(value), ",", lang=lang)
    return num(value, ".4f", lang=lang)


def plural(n, one: str, other: str, *, lang: str | None = None) -> str:
    """``plural(1, "paso", "pasos")`` -> ``1 paso``; any other count takes the plural (``0 pasos``)."""
    return f"{num(n, ',', lang=lang)} {one if n == 1 else other}"


class _Formatter(string.Formatter):
    def __init__(self, lang: str):
        self.lang = lang

    def vformat(self, format_string, args, kwargs):
        """``str.format`` (no positional fields), where a value after a flag or with a conversion (``!s``,
        ``!r``) keeps its machine spelling and every other number is written the language's way."""
        out: list[str] = []
        for literal, field, spec, conversion in self.parse(format_string):
            out.append(literal)
            if field is None:
                continue
            value, _ = self.get_field(field, args, kwargs)
            value = self.convert_field(value, conversion)
            if spec and "{" in spec:
                spec = self.vformat(spec, args, kwargs)
            if "|" not in (spec or "") and (conversion or _AFTER_FLAG.search("".join(out))):  # --{flag} {v} too
                out.append(format(value, (spec or "").replace(",", "")))  # argparse reads 12345, not 12,345
            else:
                out.append(self.format_field(value, spec or ""))
        return "".join(out)

    def format_field(self, value, format_spec: str) -> str:
        if "|" in format_spec:
            one, _, other = format_spec.partition("|")
            digits = value.translate({ord(c): None for c in ",\u00a0" + ES_GROUP}) if isinstance(value, str) else ""
            if digits.isdigit():
                value = int(digits)  # a count someone formatted before passing it
            if not _is_number(value):
                return f"{value} {other}"  # never fail a user-facing message over its wording
            return plural(value, one, other, lang=self.lang)
        if _is_number(value):
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

    def in_lang(self, lang: str, key: str, /, **kwargs) -> str:
        """One message in the given language whatever the user's (a document written in both, such as
        ``aura push``'s model card), numbers written that language's way."""
        text = self.table[key][0 if lang == "es" else 1]
        return _Formatter(lang).vformat(text, (), kwargs) if kwargs else text


def bi(es: str, en: str) -> str:
    """Pick one of two inline texts (for help strings defined next to a flag)."""
    return es if current_lang() == "es" else en
