"""Every flag Aura suggests exists: each ``--flag`` written in a message catalogue (both languages), in a
config field's help, or in ``aura doctor``'s report is a flag of some ``aura`` command, or one of the
other tools' flags listed below (torchrun, pip, lm-eval, llama.cpp...), each with where it belongs."""

from __future__ import annotations

import importlib
import json
import pkgutil
import re

import pytest

import aura
from aura.cli.commands import COMMANDS
from aura.core.config import build_parser, fields_of
from aura.core.i18n import REGISTRY
from tests.conftest import run_aura_here

# Flags of other programs that Aura's messages tell users to pass to those programs.
OTHER_TOOLS = {
    "--nproc_per_node": "torchrun",
    "--index-url": "pip",
    "--logdir": "tensorboard",
    "--version": "aura (global)",
    "--lang": "aura (global)",
    "--debug": "aura (global)",
}
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9_-]*[a-z0-9]")


def _aura_flags() -> set[str]:
    flags = set()
    for key, cmd in COMMANDS.items():
        cls = getattr(importlib.import_module(cmd.module), cmd.config)
        parser = build_parser(cls, prog="aura " + " ".join(key), description="")
        for action in parser._actions:
            flags.update(s for s in action.option_strings if s.startswith("--"))
    return flags


def _texts() -> list[tuple[str, str]]:
    """(where, text) of every catalogue entry (both languages) and every config field's help."""
    for info in pkgutil.walk_packages(aura.__path__, "aura."):
        try:
            importlib.import_module(info.name)
        except ModuleNotFoundError as e:  # an optional dependency: test_i18n reports it
            if (e.name or "").split(".")[0] == "aura":
                raise
    out = [(f"{ns}.{key}", text) for ns, table in REGISTRY.items() for key, pair in table.items() for text in pair]
    for key, cmd in COMMANDS.items():
        for f, _ in fields_of(getattr(importlib.import_module(cmd.module), cmd.config)):
            out += [(f"aura {' '.join(key)}: {f.name}'s help", text) for text in f.metadata.get("help", ())]
    return out


def unknown_flags(texts: list[tuple[str, str]], known: set[str]) -> list[tuple[str, str]]:
    return sorted({(flag, where) for where, text in texts for flag in FLAG.findall(text) if flag not in known})


@pytest.mark.catalogue
def test_every_suggested_flag_exists():
    unknown = unknown_flags(_texts(), _aura_flags() | set(OTHER_TOOLS))
    assert not unknown, "flags that no aura command (nor OTHER_TOOLS) has:\n" + "\n".join(
        f"  {flag}  ({where})" for flag, where in unknown
    )


def test_doctor_suggests_only_existing_flags():
    known = _aura_flags() | set(OTHER_TOOLS)
    r = run_aura_here("doctor")
    # The reference: the same checks as JSON. doctor exits 1 exactly when they found an error, else 0 (never
    # 2: a usage error), and the text report shows every issue the JSON lists.
    report = json.loads(run_aura_here("doctor", "--json").stdout)
    errors = [i for i in report["issues"] if i["level"] == "error"]
    assert r.returncode == (1 if errors else 0), (r.returncode, errors, r.stdout + r.stderr)
    assert report["ok"] is (not errors)
    text = " ".join((r.stdout + r.stderr).split())
    for issue in report["issues"]:
        assert " ".join(issue["message"].split()) in text, (issue, r.stdout + r.stderr)
    unknown = sorted(set(FLAG.findall(r.stdout + r.stderr)) - known)
    assert not unknown, f"aura doctor suggests flags that do not exist: {unknown}\n{r.stdout}"


def test_the_walk_reads_catalogues_and_help_and_catches_a_missing_flag():
    texts = _texts()
    assert sum(1 for where, t in texts if FLAG.search(t) and "help" not in where) > 100
    assert sum(1 for where, t in texts if FLAG.search(t) and where.endswith("'s help")) > 20
    known = _aura_flags() | set(OTHER_TOOLS)
    # what `aura doctor` suggested before (Hugging Face Trainer's name, not Aura's)
    old = [("doctor.disk_fix", "Free some space, use another --output-dir or a lower --save-total-limit.")]
    assert unknown_flags(old, known) == [("--save-total-limit", "doctor.disk_fix")]
    assert "--keep-last" in known
