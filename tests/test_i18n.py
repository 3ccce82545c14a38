"""Every user-facing text exists in Spanish and English with the same content.

Discovers every aura module (so modules added later are checked too), then checks: each Messages
catalogue entry; each literal-key call on a Messages object in the source; each config field's help;
and argparse's own strings in Spanish.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import pkgutil
import re
from pathlib import Path
from typing import Literal

import pytest

import aura
from aura.i18n import REGISTRY, Messages, placeholders

# Identical es/en texts are fine when they contain nothing to translate: placeholders, punctuation,
# numbers, acronyms (all capitals) and these names/terms, which both languages use as they are
# (log field names keep the guides' spelling: docs/architecture.md).
UNTRANSLATED_WORDS = {
    "Python", "PyTorch", "torch", "Loss", "Epoch", "Step", "Sync", "OK", "Temp", "Rank", "Node",
    "Device", "LoRA", "QLoRA", "Llama", "GGUF", "Ollama", "ZeRO", "DeepSpeed", "Triton", "Liger",
    "TensorBoard", "safetensors", "tokens", "batch", "preset", "checkpoint", "bf16", "fp16", "fp32",
    "error", "no", "ms", "s", "it", "Grad", "Mem", "tok", "shards", "tensorboard", "ETA", "MFU", "grad", "norm", "lr", "val", "train", "auto", "aura",
}


def _import_all() -> tuple[list, list[str]]:
    modules, skipped = [], []
    for info in pkgutil.walk_packages(aura.__path__, "aura."):
        try:
            modules.append(importlib.import_module(info.name))
        except ModuleNotFoundError as e:
            # Only an optional third-party dependency may be missing; a missing aura module is a bug.
            if e.name and not e.name.split(".")[0] == "aura":
                skipped.append(f"{info.name} ({e.name})")
                continue
            raise
    return modules, skipped


MODULES, SKIPPED = _import_all()


def _entries():
    return [(ns, key, pair) for ns, table in sorted(REGISTRY.items()) for key, pair in sorted(table.items())]


def _nothing_to_translate(text: str) -> bool:
    bare = re.sub(r"\{[^{}]*\}", " ", text)
    bare = re.sub(r"--[\w-]+", " ", bare)  # command-line flags
    bare = re.sub(r"%\(?\w*\)?[sdrf]", " ", bare)
    for word in re.findall(r"[^\W\d_]+", bare):
        if not (word.isupper() or word in UNTRANSLATED_WORDS):
            return False
    return True


def test_modules_were_imported():
    names = {m.__name__ for m in MODULES}
    assert {"aura.cli", "aura.config", "aura.i18n", "aura.monitor", "aura.doctor", "aura.runs"} <= names
    assert len(REGISTRY) >= 5


@pytest.mark.parametrize("ns,key,pair", _entries(), ids=lambda v: v if isinstance(v, str) else "")
def test_catalogue_entry(ns, key, pair):
    assert isinstance(pair, tuple) and len(pair) == 2, f"{ns}.{key} must be an (es, en) pair"
    es, en = pair
    assert es.strip() and en.strip(), f"{ns}.{key}: empty text"
    assert placeholders(es) == placeholders(en), f"{ns}.{key}: placeholders differ: {es!r} / {en!r}"
    if es == en:
        assert _nothing_to_translate(es), f"{ns}.{key}: the Spanish text is the English one: {es!r}"


def _messages_names(module, tree: ast.AST) -> dict[str, str]:
    """Names bound to Messages objects in a module -> namespace (module globals and `from x import M`)."""
    names = {n: v.namespace for n, v in vars(module).items() if isinstance(v, Messages)}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("aura"):
            try:
                source = importlib.import_module(node.module)
            except ModuleNotFoundError:
                continue
            for alias in node.names:
                obj = getattr(source, alias.name, None)
                if isinstance(obj, Messages):
                    names[alias.asname or alias.name] = obj.namespace
    return names


def _literal_calls():
    calls = []
    for module in MODULES:
        path = Path(module.__file__)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = _messages_names(module, tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            func, first = node.func, node.args[0]
            if isinstance(func, ast.Attribute) and func.attr == "pair" and isinstance(func.value, ast.Name):
                func = func.value  # M.pair("key")
            if (isinstance(func, ast.Name) and func.id in names and isinstance(first, ast.Constant)
                    and isinstance(first.value, str)):
                kwargs = {k.arg for k in node.keywords if k.arg}
                has_star = any(k.arg is None for k in node.keywords)
                calls.append((f"{path.name}:{node.lineno}", names[func.id], first.value, kwargs, has_star))
    return calls


CALLS = _literal_calls()


def test_calls_were_found():
    assert len(CALLS) > 50
    assert any(ns == "monitor" for _, ns, *_ in CALLS) and any(ns == "runs" for _, ns, *_ in CALLS)


@pytest.mark.parametrize("where,ns,key,kwargs,has_star", CALLS, ids=lambda v: v if isinstance(v, str) else "")
def test_message_call_names_an_existing_key_with_its_placeholders(where, ns, key, kwargs, has_star):
    assert key in REGISTRY[ns], f"{where}: no key {key!r} in the {ns!r} catalogue"
    needed = placeholders(REGISTRY[ns][key][1])
    if kwargs or needed:
        if not has_star:
            assert {p.split(".")[0].split("[")[0] for p in needed} == kwargs, (
                f"{where}: {ns}.{key} needs {sorted(needed)}, the call passes {sorted(kwargs)}")


def _config_classes():
    out = []
    for module in MODULES:
        for name, obj in vars(module).items():
            if (isinstance(obj, type) and dataclasses.is_dataclass(obj) and obj.__module__ == module.__name__
                    and any("help" in f.metadata for f in dataclasses.fields(obj))):
                out.append(obj)
    return out


@pytest.mark.parametrize("cls", _config_classes(), ids=lambda c: f"{c.__module__}.{c.__name__}")
def test_every_config_field_has_help_in_both_languages(cls):
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        assert "help" in f.metadata, f"{cls.__name__}.{f.name} is not declared with arg(..., es=, en=)"
        es, en = f.metadata["help"]
        assert es.strip() and en.strip(), f"{cls.__name__}.{f.name}: empty help"
        assert placeholders(es) == placeholders(en), f"{cls.__name__}.{f.name}: placeholders differ"


def test_registered_commands_have_bilingual_descriptions():
    from aura.cli import COMMANDS

    for key, cmd in COMMANDS.items():
        assert cmd.es.strip() and cmd.en.strip() and cmd.es != cmd.en, key


# ---------------------------------------------------------------- argparse

# Messages argparse raises for mistakes in a parser's definition (never seen by a user of aura).
ARGPARSE_PROGRAMMER_ERRORS = {
    "%r is not callable", "'required' is an invalid argument for positionals", ".__call__() not defined",
    'argument "-" with mode %r', "cannot have multiple subparser arguments",
    "cannot merge actions - two groups are named %r", "conflicting subparser alias: %s",
    "conflicting subparser: %s", "dest= is required for options like %r",
    "invalid conflict_resolution value: %r",
    "invalid option string %(option)r: must start with a character %(prefix_chars)r",
    "mutually exclusive arguments must be optional", "unknown parser %(parser_name)r (choices: %(choices)s)",
    "conflicting option string: %s", "conflicting option strings: %s",
}


def _argparse_msgids() -> set[tuple[str, ...]]:
    tree = ast.parse(Path(argparse.__file__).read_text(encoding="utf-8"))
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("_", "ngettext"):
            args = tuple(a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str))
            if args:
                ids.add(args)
    return ids


def test_argparse_user_strings_have_spanish():
    from aura.config import ARGPARSE_ES, ARGPARSE_ES_PLURAL

    missing = []
    for ids in _argparse_msgids():
        if len(ids) == 1 and ids[0] not in ARGPARSE_PROGRAMMER_ERRORS and ids[0] not in ARGPARSE_ES:
            missing.append(ids[0])
        if len(ids) == 2 and set(ids) - ARGPARSE_PROGRAMMER_ERRORS and ids[:2] not in ARGPARSE_ES_PLURAL:
            missing.append(ids)
    assert not missing, f"argparse strings without Spanish: {missing}"
    fmt = re.compile(r"%\(\w+\)[sdr]|%[sdr]")
    for en, es in ARGPARSE_ES.items():
        assert sorted(fmt.findall(en)) == sorted(fmt.findall(es)), en
    for (s, p), (es_s, es_p) in ARGPARSE_ES_PLURAL.items():
        assert fmt.findall(s) == fmt.findall(es_s) and fmt.findall(p) == fmt.findall(es_p)


def test_argparse_speaks_spanish(capsys):
    from aura.config import arg, parse_config
    from aura.i18n import set_lang

    @dataclasses.dataclass
    class Demo:
        inputs: list[str] = arg([], es="Entradas.", en="Inputs.", positional=True)
        mode: Literal["fast", "slow"] = arg("fast", es="Modo.", en="Mode.")

    set_lang("es")
    with pytest.raises(SystemExit) as e:
        parse_config(Demo, ["--help"], prog="aura demo", description="d")
    assert e.value.code == 0
    out = capsys.readouterr().out
    for text in ("uso: aura demo", "argumentos posicionales:", "opciones:", "muestra esta ayuda y termina",
                 "(por defecto: fast)"):
        assert text in out
    with pytest.raises(SystemExit) as e:
        parse_config(Demo, ["--mode", "medium"], prog="aura demo", description="d")
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "opción no válida: 'medium'" in err and "Ejecuta 'aura demo --help'" in err
    set_lang("en")
    with pytest.raises(SystemExit) as e:
        parse_config(Demo, ["--nope"], prog="aura demo", description="d")
    err = capsys.readouterr().err
    assert e.value.code == 2 and "unrecognized arguments: --nope" in err and "Run 'aura demo --help'" in err
