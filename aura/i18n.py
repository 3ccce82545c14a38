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
"""

from __future__ import annotations

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
        text = es if current_lang() == "es" else en
        return text.format(**kwargs) if kwargs else text

    def pair(self, key: str) -> tuple[str, str]:
        return self.table[key]


def bi(es: str, en: str) -> str:
    """Pick one of two inline texts (for help strings defined next to a flag)."""
    return es if current_lang() == "es" else en
