"""Shared fixtures: run the real CLI in a subprocess, tiny Spanish text, English messages by default."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESOURCES = ROOT / "aura" / "resources"


@pytest.fixture(autouse=True)
def _english_messages(monkeypatch):
    """Tests read English messages unless they set AURA_LANG themselves."""
    monkeypatch.setenv("AURA_LANG", "en")
    monkeypatch.setenv("AURA_PLAIN", "1")
    from aura.i18n import set_lang

    set_lang(None)
    yield
    set_lang(None)


def run_aura(*args: str, env: dict | None = None, cwd: str | os.PathLike | None = None,
             timeout: float = 600, input: str | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m aura ARGS`` as a user would, returning the completed process (text mode)."""
    full_env = dict(os.environ)
    full_env.setdefault("AURA_LANG", "en")
    full_env["AURA_PLAIN"] = "1"
    full_env["PYTHONUNBUFFERED"] = "1"
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "aura", *map(str, args)], capture_output=True,
                          text=True, env=full_env, cwd=cwd, timeout=timeout, input=input)


@pytest.fixture
def aura():
    return run_aura


@pytest.fixture(scope="session")
def spanish_text() -> str:
    """A few KB of the embedded Spanish corpus (documents separated by blank lines)."""
    files = sorted((RESOURCES / "corpus_es").glob("*.txt"))
    return "\n\n".join(p.read_text(encoding="utf-8").strip() for p in files)
