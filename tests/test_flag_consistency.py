"""Flags that mean one thing are named one way, flags that would do nothing are refused, and a missing optional
tool is named with how to install it (issue 36.8). All through the real CLI entry point."""

from __future__ import annotations

import sys

import pytest

from tests.conftest import run_aura_here

# Every command that replaces an existing output of its own: `--overwrite` (runs already used it), `--force`
# kept as the old name. Each refusal names --overwrite; the old name still works and says the new one.
REPLACERS = [
    ("merge",),
    ("export", "gguf"),
    ("data", "prepare"),
    ("data", "curate"),
    ("tokenizer", "train"),
    ("tokenizer", "extend"),
]


@pytest.mark.parametrize("command", REPLACERS, ids=" ".join)
def test_one_overwrite_flag_everywhere_and_force_still_parses_with_a_warning(command):
    import importlib

    from aura.core.commands import COMMANDS

    entry = COMMANDS[command]
    fields = getattr(importlib.import_module(entry.module), entry.config).__dataclass_fields__
    assert "overwrite" in fields and "force" not in fields, sorted(fields)
    r = run_aura_here(*command, "--help")
    assert "--overwrite" in r.stdout and "--force" not in r.stdout.replace("--force-", ""), r.stdout
    # the old name parses (the warning comes before the command's own checks refuse the missing inputs)
    r = run_aura_here(*command, "--force")
    assert "--force is the old name of --overwrite" in r.stderr, r.stderr
    assert "unrecognized" not in r.stderr and "no reconocidos" not in r.stderr, r.stderr


def test_force_still_works_for_export_gguf_and_the_refusal_names_overwrite(tiny_zoo, tmp_path):
    out = tmp_path / "m.gguf"
    common = ("export", "gguf", "--model", tiny_zoo["llama"], "--outfile", out, "--quant", "f16", "--no-verify")
    assert run_aura_here(*common).returncode == 0
    again = run_aura_here(*common)
    assert again.returncode == 2 and "use --overwrite to overwrite it" in again.stderr, again.stderr
    old = run_aura_here(*common, "--force", env={"AURA_LANG": "es"})
    assert old.returncode == 0, old.stdout + old.stderr
    assert "--force es el nombre antiguo de --overwrite" in old.stderr, old.stderr
    assert run_aura_here(*common, "--overwrite").returncode == 0


def test_export_gguf_without_llama_cpp_says_how_to_install_the_verifier(tiny_zoo, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # `import llama_cpp` fails as when it is not installed
    r = run_aura_here(
        "export", "gguf", "--model", tiny_zoo["llama"], "--outfile", tmp_path / "m.gguf", "--quant", "f16"
    )
    assert r.returncode == 0, r.stdout + r.stderr
    said = r.stdout + r.stderr
    assert "will not be verified" in said and 'pip install -e ".[llamacpp]"' in said, said
    assert "29 minutes on a busy 2-core machine, 16 CPU-minutes" in said and "--no-verify" in said, said
    r = run_aura_here(
        "export",
        "gguf",
        "--model",
        tiny_zoo["llama"],
        "--outfile",
        tmp_path / "v.gguf",
        "--quant",
        "f16",
        "--verify",
        env={"AURA_LANG": "es"},
    )
    assert r.returncode == 2 and 'pip install -e ".[llamacpp]"' in r.stderr and "29 minutos" in r.stderr, r.stderr


@pytest.mark.parametrize(
    "flags,flag,needs",
    [
        (["--suite", "aura-es", "--include-path", "{tasks}"], "--include-path", "--tasks"),
        (["--suite", "aura-es", "--trust-task-code"], "--trust-task-code", "--tasks"),
        (["--data", "{text}", "--limit", "5"], "--limit", "--suite or --tasks"),
        (["--suite", "aura-es", "--seq-len", "64"], "--seq-len", "--data"),
        (["--suite", "aura-es", "--max-tokens", "100"], "--max-tokens", "--data"),
        (["--suite", "aura-es", "--split", "train"], "--split", "--data"),
        (["--suite", "aura-es", "--suite-data", "{tasks}"], "--suite-data", "--suite es-estandar[-rapida]"),
    ],
)
def test_eval_refuses_a_flag_the_others_make_pointless(tiny_zoo, tmp_path, flags, flag, needs):
    tasks = tmp_path / "tareas"  # defines a task named like a shipped one: still never read with --suite
    tasks.mkdir()
    (tasks / "aura_es.yaml").write_text("task: aura_es_comprension\ndataset_path: json\n", encoding="utf-8")
    text = tmp_path / "texto.txt"
    text.write_text("Hola, mundo.\n", encoding="utf-8")
    args = [a.format(tasks=tasks, text=text) for a in flags]
    r = run_aura_here("eval", "--model", tiny_zoo["llama"], *args)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"{flag} only applies with {needs}, which was not given: it would have no effect" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    es = run_aura_here("eval", "--model", tiny_zoo["llama"], *args, env={"AURA_LANG": "es"})
    assert es.returncode == 2 and f"{flag} solo se aplica con" in es.stderr, es.stderr


def test_the_rename_redoes_no_finished_pipeline_stage(tmp_path):
    """A stage's fingerprint keeps the old key of a renamed field (the options it hashes are those it hashed
    before --force became --overwrite), so a finished demo is skipped afterwards rather than made again from
    its tokenizer on; pipeline.json shows today's name."""
    from aura.pipeline.spec import config_fields, fingerprint_fields, load, resolve

    pipeline = resolve(load("demo-cpu"), tmp_path / "demo")
    for command in ("tokenizer train", "data prepare", "export gguf"):
        stage = next(s for s in pipeline.stages if s.command == command)
        shown, hashed = config_fields(stage.cfg), fingerprint_fields(stage.cfg)
        assert "overwrite" in shown and "force" not in shown, command
        assert hashed == {**{k: v for k, v in shown.items() if k != "overwrite"}, "force": shown["overwrite"]}
    stage = next(s for s in pipeline.stages if s.command == "pretrain")  # never renamed: hashed as it is
    assert fingerprint_fields(stage.cfg) == config_fields(stage.cfg)
