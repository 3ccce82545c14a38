"""The `aura` entry point: overview, per-command help with defaults, version, YAML configs, language.

Commands are discovered from aura.cli.commands.COMMANDS, so commands added later are checked too.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
import subprocess
import sys

import pytest

import aura
from aura.cli import main
from aura.cli.commands import COMMANDS
from aura.core.config import arg, default_of, fields_of, parse_config
from aura.core.errors import AuraError
from tests.conftest import run_aura, run_aura_here
from tests.evidence import check_every


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def _squeeze(text: str) -> str:
    """No whitespace at all: argparse wraps lines anywhere, after hyphens too."""
    return re.sub(r"\s+", "", text)


def test_overview_lists_every_command():
    proc = run_aura("--help")
    assert proc.returncode == 0
    for key, cmd in COMMANDS.items():
        assert re.search(rf"^\s+{re.escape(' '.join(key))}\s+{re.escape(cmd.en)}$", proc.stdout, re.M), key
    es = run_aura("--help", env={"AURA_LANG": "es"})
    assert "Comandos:" in es.stdout and all(cmd.es in es.stdout for cmd in COMMANDS.values())


def test_no_arguments_and_python_dash_m():
    proc = run_aura()  # python -m aura
    assert proc.returncode == 0 and "Commands:" in proc.stdout
    proc = run_aura_here("no-such-command")
    assert proc.returncode == 2 and "Unknown command" in proc.stderr


def test_version():
    proc = run_aura("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"aura {aura.__version__}"


def _command_config(key):
    cmd = COMMANDS[key]
    module = importlib.import_module(cmd.module)  # every registered command must exist
    assert hasattr(module, cmd.config), f"{cmd.module} has no {cmd.config}"
    assert callable(getattr(module, cmd.function, None)), f"{cmd.module} has no {cmd.function}()"
    return getattr(module, cmd.config)


def _shown(default) -> str | None:
    if default is dataclasses.MISSING or default in (None, [], ""):
        return None
    return " ".join(map(str, default)) if isinstance(default, list) else str(default)


def _option_entries(help_text: str) -> dict[str, str]:
    """argparse help -> {"--flag": "its whole entry, whitespace-normalised"} (each alias too)."""
    entries: dict[str, str] = {}
    current: list[str] | None = None
    for line in help_text.splitlines():
        m = re.match(r"^  (-{1,2}[\w-].*)$", line)
        if m:
            current = [m.group(1)]
            head = re.split(r"\s{2,}", m.group(1))[0]
            for flag in re.findall(r"(?:^|, )(-{1,2}[\w-]+)", head):
                entries[flag] = current  # type: ignore[assignment]
        elif current is not None and line.startswith("   "):
            current.append(line.strip())
        else:
            current = None
    return {flag: _norm(" ".join(parts)) for flag, parts in entries.items()}


def _check_command_help(key, capsys):
    capsys.readouterr()  # nothing left over from the previous command
    cls = _command_config(key)
    assert main([*key, "--help"]) == 0
    raw = capsys.readouterr().out
    help_text = _norm(raw)
    assert help_text.startswith(f"usage: aura {' '.join(key)}")
    entries = _option_entries(raw)
    for f, _tp in fields_of(cls):
        meta = f.metadata
        assert "help" in meta, f"{cls.__name__}.{f.name} has no bilingual help"
        if meta.get("hidden"):
            continue
        en_help = _norm(meta["help"][1])
        if meta.get("positional"):
            assert _squeeze(en_help) in _squeeze(help_text), f"{f.name}: help missing"
            continue
        flag = "--" + f.name.replace("_", "-")
        assert flag in entries, f"{flag} is not documented in `aura {' '.join(key)} --help`"
        entry = entries[flag]
        assert _squeeze(en_help) in _squeeze(entry), f"{flag}: its help text is missing: {entry!r}"
        shown = _shown(default_of(f))
        if shown is not None:
            assert _squeeze(f"(default: {shown})") in _squeeze(entry), (
                f"{flag}: default {shown!r} not shown in {entry!r}"
            )


@pytest.mark.catalogue
def test_every_command_help_documents_every_flag_with_its_default(capsys):
    """`aura CMD --help` of every command shows every flag with its help text and default."""
    keys = [(key,) for key in COMMANDS]
    assert check_every(keys, lambda key: _check_command_help(key, capsys), name=lambda key: " ".join(key)) > 10


def test_command_help_in_spanish(capsys):
    from aura.core.i18n import set_lang

    set_lang("es")
    assert main(["runs", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("uso: aura runs") and "opciones:" in out and "(por defecto: False)" in out


@dataclasses.dataclass
class _Demo:
    name: str = arg("a", es="Nombre.", en="Name.")
    steps: int = arg(10, es="Pasos.", en="Steps.")
    rate: float = arg(0.5, es="Tasa.", en="Rate.")
    tags: list[str] = arg(["x"], es="Etiquetas.", en="Tags.")
    fast: bool = arg(False, es="Rápido.", en="Fast.")


def test_yaml_sets_values_and_flags_win(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("name: from-yaml\nsteps: 7\nrate: 1e-3\ntags: [p, q]\nfast: true\n", encoding="utf-8")
    c = parse_config(_Demo, ["--config", str(cfg), "--steps", "3"], prog="aura demo", description="")
    assert (c.name, c.steps, c.rate, c.tags, c.fast) == ("from-yaml", 3, 1e-3, ["p", "q"], True)
    c = parse_config(_Demo, ["--config", str(cfg), "--no-fast", "--tags", "z"], prog="aura demo", description="")
    assert c.fast is False and c.tags == ["z"] and c.steps == 7
    assert parse_config(_Demo, [], prog="aura demo", description="") == _Demo()


def test_yaml_errors_are_clear(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("colour: blue\n", encoding="utf-8")
    with pytest.raises(AuraError, match=r"Unknown key 'colour' in .*bad.yaml. Valid keys: .*steps"):
        parse_config(_Demo, ["--config", str(bad)], prog="aura demo", description="")
    bad.write_text("steps: many\n", encoding="utf-8")
    with pytest.raises(AuraError, match=r"Invalid value for 'steps': 'many' \(expected int\)"):
        parse_config(_Demo, ["--config", str(bad)], prog="aura demo", description="")
    # Through the real CLI: exit 2, no traceback, the file and the valid keys named.
    bad.write_text("colour: blue\n", encoding="utf-8")
    proc = run_aura_here("runs", tmp_path, "--config", bad)
    assert proc.returncode == 2 and "Unknown key 'colour'" in proc.stderr and "json" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = run_aura_here("runs", tmp_path, "--config", tmp_path / "missing.yaml")
    assert proc.returncode == 2 and "missing.yaml" in proc.stderr


def test_yaml_through_the_cli_flags_win(tmp_path):
    cfg = tmp_path / "runs.yaml"
    cfg.write_text("json: true\n", encoding="utf-8")
    assert run_aura("runs", tmp_path, "--config", cfg).stdout.strip() == "[]"
    assert "There are no Aura runs" in run_aura("runs", tmp_path, "--config", cfg, "--no-json").stdout


def test_lang_switches_messages(tmp_path):
    missing = tmp_path / "nope"
    en = run_aura_here("runs", missing)
    assert en.returncode == 2 and "does not exist" in en.stderr and "--debug" not in en.stderr  # no crash hint
    es = run_aura_here("--lang", "es", "runs", missing)
    assert es.returncode == 2 and "No existe el directorio" in es.stderr
    env_es = run_aura_here("runs", missing, env={"AURA_LANG": "es"})
    assert "No existe el directorio" in env_es.stderr
    locale_es = run_aura_here(
        "runs", missing, env={"AURA_LANG": "", "LC_ALL": "", "LC_MESSAGES": "", "LANG": "es_ES.UTF-8"}
    )
    assert "No existe el directorio" in locale_es.stderr
    assert run_aura_here("--lang", "fr", "runs").returncode == 2


def test_usage_errors_exit_2_with_a_hint_in_the_users_language():
    en = run_aura_here("runs", "--bogus")
    assert en.returncode == 2
    assert "aura runs: error: unrecognized arguments: --bogus" in en.stderr
    assert "Run 'aura runs --help' to see every option." in en.stderr
    es = run_aura_here("--lang", "es", "monitor", "--interval")
    assert es.returncode == 2
    assert "uso: aura monitor" not in es.stderr and "se esperaba un valor" in es.stderr  # two lines, no usage
    assert "Ejecuta 'aura monitor --help'" in es.stderr


def test_debug_flag_shows_traceback(tmp_path):
    proc = run_aura_here("--debug", "runs", tmp_path / "nope")
    assert proc.returncode == 2 and "Traceback" in proc.stderr


def test_console_script_entry_point():
    from importlib.metadata import entry_points

    eps = [e for e in entry_points(group="console_scripts") if e.name == "aura"]
    assert eps and eps[0].value == "aura.cli:entry"
    assert sys.modules["aura.cli"].main is main


def test_the_program_exits_with_main_s_code_after_freezing_the_heap():
    """``python -m aura`` (``aura.cli.entry``): main's exit code, and the heap frozen only at the end."""
    code = (
        "import gc, sys; from aura.cli import entry; "
        "code = entry(sys.argv[1:]); print(gc.get_freeze_count() > 0); raise SystemExit(code)"
    )
    ok = subprocess.run([sys.executable, "-c", code, "version"], capture_output=True, text=True)
    bad = subprocess.run([sys.executable, "-c", code, "no-such-command"], capture_output=True, text=True)
    assert ok.returncode == 0 and ok.stdout.splitlines() == [f"aura {aura.__version__}", "True"], ok
    assert bad.returncode == 2 and bad.stdout.splitlines() == ["True"], bad


def test_unknown_yaml_key_suggests_the_closest(tmp_path):
    cfg = tmp_path / "tok.yaml"
    cfg.write_text("vocab_sise: 8000\n", encoding="utf-8")
    proc = run_aura_here("tokenizer", "train", tmp_path, "--config", cfg)
    assert proc.returncode == 2 and "Unknown key 'vocab_sise'" in proc.stderr
    assert "Did you mean 'vocab_size'?" in proc.stderr and "Traceback" not in proc.stderr
    es = run_aura_here("tokenizer", "train", tmp_path, "--config", cfg, env={"AURA_LANG": "es"})
    assert "¿Querías decir 'vocab_size'?" in es.stderr
    cfg.write_text("zzz: 1\n", encoding="utf-8")  # nothing close: no guess
    assert "Did you mean" not in run_aura_here("tokenizer", "train", tmp_path, "--config", cfg).stderr


@pytest.mark.parametrize(
    "key, flag, alias, value, field",
    [
        (("pretrain",), "--val-fraction", "--validation-split", "0.2", "val_fraction"),
        (("pretrain",), "--model-preset", "--preset", "tiny", "model_preset"),
        (("finetune",), "--lora-preset", "--preset", "frida", "lora_preset"),
    ],
    ids=["val-fraction", "model-preset", "lora-preset"],
)
def test_one_spelling_per_flag_and_the_old_one_still_parses(key, flag, alias, value, field, tmp_path, capsys):
    cls = _command_config(key)
    prog = "aura " + " ".join(key)
    by_flag = parse_config(cls, [flag, value], prog=prog, description="")
    by_alias = parse_config(cls, [alias, value], prog=prog, description="")
    expected = float(value) if field == "val_fraction" else value
    assert getattr(by_flag, field) == getattr(by_alias, field) == expected
    yaml_file = tmp_path / "old.yaml"  # a config file written with the old spelling still loads
    yaml_file.write_text(f"{alias.lstrip('-').replace('-', '_')}: {value}\n", encoding="utf-8")
    assert getattr(parse_config(cls, ["--config", str(yaml_file)], prog=prog, description=""), field) == getattr(
        by_flag, field
    )
    assert main([*key, "--help"]) == 0
    entries = _option_entries(capsys.readouterr().out)
    assert entries[flag] == entries[alias], f"{alias} is not shown with {flag} in `{prog} --help`"


def test_old_flag_spellings_reach_the_commands():
    """Through the real CLI: each old spelling lands on the field whose message names the new flag."""
    r = run_aura_here("pretrain", "--validation-split", "0.7")
    assert r.returncode == 2 and "--val-fraction must be in [0, 0.5) (got: 0.7)" in r.stderr, r.stderr
    r = run_aura_here("finetune", "--method", "full", "--preset", "frida")
    assert r.returncode == 2 and "--lora-preset only applies to --method lora or qlora" in r.stderr, r.stderr
