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
import string
from pathlib import Path
from typing import Literal

import pytest

import aura
from aura.core.i18n import REGISTRY, Messages, placeholders
from tests.evidence import check_every

# Identical es/en texts are fine when they contain nothing to translate: placeholders, punctuation,
# numbers, acronyms (all capitals) and these names/terms, which both languages use as they are
# (log field names users grep keep the guides' spelling: docs/architecture.md).
UNTRANSLATED_WORDS = {
    "Python",
    "PyTorch",
    "torch",
    "Loss",
    "Sync",
    "OK",
    "Temp",
    "Rank",
    "Node",
    "Device",
    "LoRA",
    "QLoRA",
    "Llama",
    "GGUF",
    "Ollama",
    "ZeRO",
    "DeepSpeed",
    "Triton",
    "Liger",
    "TensorBoard",
    "safetensors",
    "tokens",
    "batch",
    "preset",
    "checkpoint",
    "bf16",
    "fp16",
    "fp32",
    "error",
    "no",
    "ms",
    "s",
    "it",
    "Grad",
    "Mem",
    "tok",
    "shards",
    "tensorboard",
    "ETA",
    "MFU",
    "grad",
    "norm",
    "lr",
    "val",
    "train",
    "auto",
    "aura",
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


@pytest.mark.catalogue
def test_modules_were_imported():
    names = {m.__name__ for m in MODULES}
    assert {
        "aura.cli",
        "aura.core.config",
        "aura.core.i18n",
        "aura.watch.monitor",
        "aura.watch.doctor",
        "aura.watch.runs",
    } <= names
    assert len(REGISTRY) >= 5


# Spanish prose must read as written in Spanish (docs/architecture.md, "Messages"). These English words
# must not appear in it; what stays as is: the `KEY=VALUE` tokens scripts grep (Sync=OK, Backend=gloo),
# flags and their values, quoted file contents ('running' in run.json), and the terms Spanish ML writing
# uses as they are (checkpoint, token, preset, dataset, shard, LoRA...). tests/test_spanish_commands.py
# checks every command's real output against the same list.
ENGLISH_IN_SPANISH = {
    "epoch",
    "epochs",
    "step",
    "steps",
    "finished",
    "running",
    "interrupted",
    "failed",
    "stale",
    "none",
    "unknown",
    "done",
    "saved",
    "skipped",
    "resumed",
    "training",
    "validation",
    "warning",
    "batch",
    "batches",
    "examples",
    "parameters",
    "seconds",
    "on",
    "off",
    "yes",
    "true",
    "false",
    "the",
    "and",
    "loss",
    "fertility",
    "host",
    "perplexity",
    "accuracy",
    "warnings",
    "deprecated",
    "please",
    "downloading",
    "loading",
    "using",
    "will",
    "not",
    "is",
    "are",
    "of",
    "to",
    "with",
    "for",
    "from",
    "this",
    "that",
    "you",
    "your",
    "should",
    "could",
    "installed",
    "found",
    "file",
    "model",
    "version",
}
# Words that may follow a placeholder without being a counted noun (verbs, adjectives after a size).
NOT_A_COUNTED_NOUN = {
    "es": {
        "es",
        "libres",
        "pedidas",
        "antes",
        "los",
        "las",
        "más",
        "s",
        "ms",
        "seguidos",
        "sigue",
        "tiene",
        "tienen",
        "pasa",
    },
    "en": {
        "is",
        "has",
        "does",
        "was",
        "holds",
        "contains",
        "exceeds",
        "needs",
        "names",
        "defines",
        "trades",
        "vs",
        "s",
        "ms",
        "free",
        "requested",
        "gives",
        "goes",
        "wins",
        "matches",
        "keeps",
        "uses",
        "its",
        "this",
        "takes",
        "applies",
        "reads",
        "writes",
        "remains",
        "lists",
        "knows",
        "changes",
        "sets",
        "as",
    },
}
# Placeholders that never hold a count.
NOT_A_COUNT = {"path", "adapter", "encoding", "id", "eos", "name", "model", "file", "flag"}
_PLACEHOLDER_WORD = re.compile(r"\{(\w+)(?:![rsa])?(:[^{}]*)?\}\)?\s+([^\W\d_]+)(\(e?s\))?")


def _prose(text: str) -> str:
    """The words of a message a reader reads as language: no placeholders, flags, quoted values,
    KEY=VALUE tokens, paths, commands or code."""
    text = re.sub(r"\{[^{}]*\}", " ", text)
    text = re.sub(r"""'[^']*'|"[^"]*"|`[^`]*`""", " ", text)
    text = re.sub(r"--[\w-]+(\s+(auto|none|ddp|fsdp|latest|lora|qlora|full|\S*[\d/.]\S*))?", " ", text)
    text = re.sub(r"\S*[=/_.@]\S*", " ", text)  # Sync=OK, tokens/s, file.json, snake_case, module.attr
    return text


def _spanish_texts():
    return [(f"{ns}.{key}", pair[0]) for ns, key, pair in _entries()]


@pytest.mark.catalogue
def test_spanish_catalogues_have_no_english_words():
    found = []
    for where, es in _spanish_texts():
        words = {w.lower() for w in re.findall(r"[^\W\d_]+", _prose(es))}
        if words & ENGLISH_IN_SPANISH:
            found.append(f"{where}: {sorted(words & ENGLISH_IN_SPANISH)} in {es!r}")
    assert not found, "English words in Spanish messages:\n" + "\n".join(found)


@pytest.mark.catalogue
def test_counts_use_the_plural_form():
    """``{n} pasos`` reads "1 pasos" when n is 1 and ``proceso(s)`` is not how Spanish is written: a count
    followed by a noun is written ``{n:paso|pasos}`` (aura.core.i18n)."""
    found = []
    for ns, key, (es, en) in _entries():
        for lang, text in (("es", es), ("en", en)):
            if re.search(r"\w\((e?s)\)", text):
                found.append(f"{ns}.{key} ({lang}): '(s)' instead of a plural form: {text!r}")
            for m in _PLACEHOLDER_WORD.finditer(text):
                spec, word = m.group(2) or "", m.group(3)
                if "|" in spec or m.group(1) in NOT_A_COUNT or word.istitle():  # istitle: a new sentence
                    continue
                follows = text[m.end() : m.end() + 1]
                if word.endswith("s") and word.lower() not in NOT_A_COUNTED_NOUN[lang] and follows != "/":
                    found.append(f"{ns}.{key} ({lang}): {m.group(0)!r} needs {{{m.group(1)}:ONE|OTHER}}")
    assert not found, "Counts without the plural form:\n" + "\n".join(found)


def test_number_and_plural_formatting():
    """Spanish numbers as a Spanish reader reads them (issue 25, item 10): decimal comma, a narrow no-break
    space between thousands from five digits on; English keeps its own; values after a flag stay as typed."""
    from aura.core.i18n import count, localize, num, plural, set_lang

    m = Messages(
        "test_i18n_numbers",
        {
            "k": (
                "{params:,} parámetros, {n:paso|pasos}, {loss:.2f}, {x:,.1f}, {v}",
                "{params:,} parameters, {n:step|steps}, {loss:.2f}, {x:,.1f}, {v}",
            ),
            "hint": (
                "Usa --lr {lr} --val-fraction={f} ({lr!s}); tasa {lr}; --{flag} {f}",
                "Use --lr {lr} --val-fraction={f} ({lr!s}); rate {lr}; --{flag} {f}",
            ),
        },
    )
    nb = "\u202f"
    set_lang("es")
    assert m("k", params=6372608, n=1, loss=2.5, x=12345.67, v=6.11) == (
        f"6{nb}372{nb}608 parámetros, 1 paso, 2,50, 12{nb}345,7, 6,11"
    )
    assert m("k", params=1024, n=0, loss=2.5, x=1.25, v=7) == "1024 parámetros, 0 pasos, 2,50, 1,2, 7"
    assert m("hint", lr=3e-4, f=0.05, flag="x") == "Usa --lr 0.0003 --val-fraction=0.05 (0.0003); tasa 0,0003; --x 0.05"
    assert num(20000) == f"20{nb}000" and num(4172032) == f"4{nb}172{nb}032" and num(6.11, ".2f") == "6,11"
    assert num(2e-3, ".2e") == "2,00e-03" and plural(2, "época", "épocas") == "2 épocas"
    assert count(4096.0) == "4096" and count(40960.0) == f"40{nb}960" and count(5.73124) == "5,7312"
    assert localize("1,234.5") == f"1{nb}234,5"
    set_lang("en")
    assert m("k", params=6372608, n=1, loss=2.5, x=12345.67, v=6.11) == (
        "6,372,608 parameters, 1 step, 2.50, 12,345.7, 6.11"
    )
    assert m("k", params=1024, n=3, loss=2.5, x=1.25, v=7) == "1,024 parameters, 3 steps, 2.50, 1.2, 7"
    assert m("hint", lr=3e-4, f=0.05, flag="x") == "Use --lr 0.0003 --val-fraction=0.05 (0.0003); rate 0.0003; --x 0.05"
    assert count(4096.0) == "4,096" and num(6.11, ".2f") == "6.11" and localize("1,234.5") == "1,234.5"
    del REGISTRY["test_i18n_numbers"]


def _check_catalogue_entry(ns, key, pair):
    assert isinstance(pair, tuple) and len(pair) == 2, f"{ns}.{key} must be an (es, en) pair"
    es, en = pair
    assert es.strip() and en.strip(), f"{ns}.{key}: empty text"
    assert placeholders(es) == placeholders(en), f"{ns}.{key}: placeholders differ: {es!r} / {en!r}"
    if es == en:
        assert _nothing_to_translate(es), f"{ns}.{key}: the Spanish text is the English one: {es!r}"


@pytest.mark.catalogue
def test_every_catalogue_entry():
    """Every (es, en) entry of every message catalogue: both texts, the same placeholders, translated."""
    assert check_every(_entries(), _check_catalogue_entry, name=lambda ns, key, pair: f"{ns}.{key}") > 500


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
            if (
                isinstance(func, ast.Name)
                and func.id in names
                and isinstance(first, ast.Constant)
                and isinstance(first.value, str)
            ):
                kwargs = {k.arg for k in node.keywords if k.arg}
                has_star = any(k.arg is None for k in node.keywords)
                calls.append((f"{path.name}:{node.lineno}", names[func.id], first.value, kwargs, has_star))
    return calls


CALLS = _literal_calls()


@pytest.mark.catalogue
def test_calls_were_found():
    assert len(CALLS) > 50
    assert any(ns == "monitor" for _, ns, *_ in CALLS) and any(ns == "runs" for _, ns, *_ in CALLS)


def _check_message_call(where, ns, key, kwargs, has_star):
    assert key in REGISTRY[ns], f"{where}: no key {key!r} in the {ns!r} catalogue"
    needed = placeholders(REGISTRY[ns][key][1])
    if kwargs or needed:
        if not has_star:
            assert {p.split(".")[0].split("[")[0] for p in needed} == kwargs, (
                f"{where}: {ns}.{key} needs {sorted(needed)}, the call passes {sorted(kwargs)}"
            )


@pytest.mark.catalogue
def test_every_message_call_names_an_existing_key_with_its_placeholders():
    """Every literal M("key", ...) call in aura/ names a key of its catalogue and passes its placeholders."""
    assert check_every(CALLS, _check_message_call, name=lambda where, ns, key, *_: f"{where} {ns}.{key}") == len(CALLS)


def _config_classes():
    out = []
    for module in MODULES:
        for name, obj in vars(module).items():
            if (
                isinstance(obj, type)
                and dataclasses.is_dataclass(obj)
                and obj.__module__ == module.__name__
                and any("help" in f.metadata for f in dataclasses.fields(obj))
            ):
                out.append(obj)
    return out


def _check_config_help(cls, f):
    assert "help" in f.metadata, f"{cls.__name__}.{f.name} is not declared with arg(..., es=, en=)"
    es, en = f.metadata["help"]
    assert es.strip() and en.strip(), f"{cls.__name__}.{f.name}: empty help"
    assert placeholders(es) == placeholders(en), f"{cls.__name__}.{f.name}: placeholders differ"


@pytest.mark.catalogue
def test_every_config_field_has_help_in_both_languages():
    classes = _config_classes()
    assert len(classes) > 10
    fields = [(cls, f) for cls in classes for f in dataclasses.fields(cls) if f.init]
    assert check_every(fields, _check_config_help, name=lambda c, f: f"{c.__module__}.{c.__name__}.{f.name}") > 100


@pytest.mark.catalogue
def test_registered_commands_have_bilingual_descriptions():
    from aura.cli.commands import COMMANDS

    for key, cmd in COMMANDS.items():
        assert cmd.es.strip() and cmd.en.strip() and cmd.es != cmd.en, key


# ---------------------------------------------------------------- argparse

# Messages argparse raises for mistakes in a parser's definition (never seen by a user of aura).
ARGPARSE_PROGRAMMER_ERRORS = {
    "%r is not callable",
    "'required' is an invalid argument for positionals",
    ".__call__() not defined",
    'argument "-" with mode %r',
    "cannot have multiple subparser arguments",
    "cannot merge actions - two groups are named %r",
    "conflicting subparser alias: %s",
    "conflicting subparser: %s",
    "dest= is required for options like %r",
    "invalid conflict_resolution value: %r",
    "invalid option string %(option)r: must start with a character %(prefix_chars)r",
    "mutually exclusive arguments must be optional",
    "unknown parser %(parser_name)r (choices: %(choices)s)",
    "conflicting option string: %s",
    "conflicting option strings: %s",
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


@pytest.mark.catalogue
def test_argparse_user_strings_have_spanish():
    from aura.core.config import ARGPARSE_ES, ARGPARSE_ES_PLURAL

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
    from aura.core.config import arg, parse_config
    from aura.core.i18n import set_lang

    @dataclasses.dataclass
    class Demo:
        inputs: list[str] = arg([], es="Entradas.", en="Inputs.", positional=True)
        mode: Literal["fast", "slow"] = arg("fast", es="Modo.", en="Mode.")

    set_lang("es")
    with pytest.raises(SystemExit) as e:
        parse_config(Demo, ["--help"], prog="aura demo", description="d")
    assert e.value.code == 0
    out = capsys.readouterr().out
    for text in (
        "uso: aura demo",
        "argumentos posicionales:",
        "opciones:",
        "muestra esta ayuda y termina",
        "(por defecto: fast)",
    ):
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


@pytest.mark.catalogue
@pytest.mark.parametrize("lang", ["es", "en"])
def test_every_message_formats_with_counts(lang):
    """Every format spec in the catalogues (grouping, decimals, plural forms) works on a count of 1 and of
    12345, and a plural form agrees with its count."""
    from aura.core.i18n import _Formatter

    fmt = _Formatter(lang)
    for ns, key, pair in _entries():
        text = pair[0 if lang == "es" else 1]
        for n in (1, 12345):
            values = {name.split(".")[0].split("[")[0]: n for name in placeholders(text)}
            out = fmt.vformat(text, (), values)
            assert "{" not in out or "{" in text.replace("{{", ""), f"{ns}.{key}: {out!r}"
        for _, name, spec, _ in string.Formatter().parse(text):
            if spec and "|" in spec:
                one, other = spec.split("|")
                assert one and other and "|" not in other, f"{ns}.{key}: bad plural form {spec!r}"
                assert fmt.format_field(1, spec) == f"1 {one}" and fmt.format_field(2, spec) == f"2 {other}"


# ---------------------------------------------------------------- Spanish output of a real run

# Prose words that were English in Spanish output (log labels, status and strategy values, "(s)" plurals).
_ENGLISH_OUTPUT = re.compile(r"\b(Epoch|Step|epoch|finished|running|interrupted|failed|none)\b|\w\((e?s)\)")


def test_spanish_training_output_reads_as_spanish(prepared_corpus, tmp_path):
    """A short pretrain, `aura runs` and a refused second run, in Spanish: no English word in prose, no
    "1 pasos", large numbers grouped the Spanish way, the flag (not the field) named in an error."""
    from tests.conftest import run_aura, run_aura_here

    data = prepared_corpus
    run = tmp_path / "runs" / "es"
    es = {"AURA_LANG": "es"}
    flags = [
        "--model-preset",
        "manual",
        "--embed-size",
        "64",
        "--num-layers",
        "2",
        "--num-heads",
        "4",
        "--seq-length",
        "32",
        "--intermediate-size",
        "256",
        "--batch-size",
        "4",
        "--log-interval",
        "1",
        "--sample-tokens",
        "0",
        "--warmup-steps",
        "1",
        "--eval-interval",
        "2",
        "--max-steps",
        "2",
    ]
    r = run_aura("pretrain", "--data", data, "--output-dir", run, *flags, env=es)
    assert r.returncode == 0, r.stderr + r.stdout
    out = r.stdout + r.stderr
    lines = out.splitlines()
    assert [ln for ln in lines if _ENGLISH_OUTPUT.search(ln)] == []
    assert "Estrategia de paralelismo: ninguna" in out
    step = next(ln for ln in lines if ln.startswith("Época 1 | Paso 2/2 | "))
    assert re.search(r"\| Pérdida: \d+,\d{4} \| LR \d,\d\de-\d\d \| Grad \d+,\d{3} \|", step), step  # issue 25
    plan = next(ln for ln in lines if ln.startswith("Plan: "))
    assert "calentamiento 1 paso." in plan and "(1 época," in plan, plan
    model = next(ln for ln in lines if ln.startswith("Modelo: "))
    assert re.search(r"\b\d{2,3}\u202f\d{3} parámetros", model), model  # e.g. 122 624, never 122,624
    assert "x 1 proceso)" in model, model

    listing = run_aura("runs", tmp_path / "runs", env=es)
    assert listing.returncode == 0 and "terminada" in listing.stdout and "finished" not in listing.stdout

    again = run_aura_here("pretrain", "--data", data, "--output-dir", run, *flags, env=es)
    assert again.returncode == 2 and "(estado: terminada, paso 2)" in again.stderr, again.stderr

    bad = run_aura_here("pretrain", "--data", data, "--output-dir", tmp_path / "x", "--max-steps", "muchos", env=es)
    assert bad.returncode == 2 and "--max-steps" in bad.stderr and "max_steps" not in bad.stderr
    assert "un entero" in bad.stderr, bad.stderr
