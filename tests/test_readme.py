"""Every command shown in the READMES is real: it parses against the real CLI, both READMES show the
same commands, and the CPU-runnable workflow is run for real with tiny settings (test_workflow.py)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from aura.cli import resolve
from aura.cli.commands import COMMANDS
from aura.core.config import build_parser
from aura.core.i18n import num
from tests.evidence import check_every

ROOT = Path(__file__).resolve().parents[1]
READMES = [ROOT / "README.md", ROOT / "README.en.md"]


def shell_commands(path: Path) -> list[str]:
    """Logical command lines of the ```bash blocks (continuations joined, comments stripped)."""
    text = path.read_text(encoding="utf-8")
    lines: list[str] = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        joined = block.replace("\\\n", " ")
        for line in joined.splitlines():
            line = line.split(" #", 1)[0].strip()
            if line and not line.startswith("#"):
                lines.append(" ".join(line.split()))
    return lines


def aura_argv(line: str) -> list[str] | None:
    """The aura argv of a shell line (``aura ...``, ``torchrun ... -m aura ...``, ``docker compose run
    ... trainer ...``), with leading VAR=value assignments removed; None if it is not an Aura command."""
    words = shlex.split(line)
    while words and re.match(r"^[A-Z_]+=", words[0]):
        words.pop(0)
    if not words:
        return None
    if words[0] == "aura":
        return words[1:]
    if words[0] == "torchrun" and "-m" in words:
        i = words.index("-m")
        return words[i + 2 :] if words[i + 1] == "aura" else None
    if words[:3] == ["docker", "compose", "run"] and "trainer" in words:
        return words[words.index("trainer") + 1 :]
    return None


def all_aura_commands() -> list[tuple[str, list[str]]]:
    out = []
    for readme in READMES:
        for line in shell_commands(readme):
            argv = aura_argv(line)
            if argv is not None:
                out.append((readme.name, argv))
    return out


@pytest.mark.catalogue
def test_readmes_show_the_same_commands():
    es = [aura_argv(line) for line in shell_commands(READMES[0])]
    en = [aura_argv(line) for line in shell_commands(READMES[1])]

    # Paths in examples may be translated (mis_textos/ vs my_texts/); commands and flags may not.
    def flags(cmds):
        return [[w for w in c if w.startswith("-") or w in {"aura"}] for c in cmds if c]

    assert flags(es) == flags(en)


@pytest.mark.catalogue
def test_readme_has_the_two_setup_commands():
    for readme in READMES:
        lines = shell_commands(readme)
        assert "bash scripts/demo.sh" in lines and "bash scripts/test.sh" in lines
        ci = (ROOT / ".ci" / "run").read_text()
        assert "scripts/test.sh" in ci


def _check_readme_command(source, argv):
    """The command exists and every flag and value shown is accepted by its real parser."""
    if argv[0] == "launch":  # `aura launch CMD ...`: check launch's own flags, then the inner command
        inner = [a for a in argv[1:]]
        argv = inner if inner else argv
    key, rest = resolve(argv)
    assert key is not None, f"{source}: unknown command {argv[:2]}"
    import importlib

    cmd = COMMANDS[key]
    cls = getattr(importlib.import_module(cmd.module), cmd.config)
    parser = build_parser(cls, prog="aura " + " ".join(key), description="")
    parser.exit_on_error = False
    try:
        parser.parse_args(rest)
    except SystemExit as e:  # argparse reports unknown flags/choices this way
        pytest.fail(f"{source}: 'aura {' '.join(argv)}' does not parse (exit {e.code})")


@pytest.mark.catalogue
def test_every_readme_command_parses():
    """Every Aura command line of both READMEs parses against its real parser (all failures listed)."""
    assert (
        check_every(
            all_aura_commands(), _check_readme_command, name=lambda source, argv: f"{source}: aura {' '.join(argv)}"
        )
        > 40
    )


def section_commands(path: Path, heading_prefix: str) -> list[str]:
    """Command lines of the ```bash blocks under the first heading that starts with heading_prefix."""
    text = path.read_text(encoding="utf-8")
    start = next(i for i, line in enumerate(text.splitlines()) if line.startswith(heading_prefix))
    rest = text.splitlines()[start + 1 :]
    end = next((i for i, line in enumerate(rest) if line.startswith("#")), len(rest))
    tmp = path.parent / ".section.tmp.md"
    try:
        tmp.write_text("\n".join(rest[:end]), encoding="utf-8")
        return shell_commands(tmp)
    finally:
        tmp.unlink()


# Appended to a README command to make it tiny (argparse keeps the last value of a repeated flag).
TINY_OVERRIDES = {
    ("tokenizer", "train"): ["--vocab-size", "1000"],
    ("pretrain",): [
        "--max-steps",
        "4",
        "--batch-size",
        "4",
        "--seq-length",
        "64",
        "--log-interval",
        "2",
        "--precision",
        "fp32",
    ],
    ("generate",): ["--max-new-tokens", "6"],
    ("monitor",): ["--once"],
    ("eval",): ["--max-tokens", "2000"],
}


@pytest.mark.slow
def test_readme_laptop_and_monitoring_commands_run(tmp_path):
    """Section 1 (laptop) then 'Vigilar y comparar', run as written in README.md from a scratch dir whose
    mis_textos/ holds the embedded corpus; runs/a and runs/b are the run section 1 trained."""
    import shutil

    from tests.conftest import RESOURCES, run_aura

    shutil.copytree(RESOURCES / "corpus_es", tmp_path / "mis_textos")
    lines = section_commands(READMES[0], "### 1.") + section_commands(READMES[0], "### Vigilar")
    ran = []
    for line in lines:
        argv = aura_argv(line)
        if argv is None:
            continue  # tensorboard: not an Aura command
        argv = [a.replace("runs/a", "runs/mi-modelo").replace("runs/b", "runs/mi-modelo") for a in argv]
        key, _ = resolve(argv)
        proc = run_aura(*argv, *TINY_OVERRIDES.get(key, []), cwd=tmp_path)
        assert proc.returncode == 0, f"{line}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        assert "Traceback" not in proc.stderr
        ran.append(" ".join(key))
    assert {
        "tokenizer train",
        "data prepare",
        "pretrain",
        "generate",
        "monitor",
        "runs",
        "plot",
        "eval",
        "doctor",
    } <= set(ran)
    assert (tmp_path / "perdida.png").stat().st_size > 1000
    assert (tmp_path / "runs" / "mi-modelo" / "final" / "model.safetensors").is_file()


# ---------------------------------------------------------------- quoted values come from a real run


def _examples_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("readme_examples", ROOT / "scripts" / "readme_examples.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_example_values_are_those_the_script_measured():
    """Section 1's paragraph in both READMES is what scripts/readme_examples.py rendered from the run it
    recorded (scripts/readme_examples.json), and that run ran the commands the READMES show now (issue 25,
    item 13: "vocab 8000 on a 6,298-word corpus", "val loss 6.11 where a run gives 6.15")."""
    script = _examples_script()
    results = json.loads((ROOT / "scripts" / "readme_examples.json").read_text(encoding="utf-8"))
    assert results["commands"] == script.section_commands(READMES[0]), (
        "README.md's section 1 changed since its values were measured: run python scripts/readme_examples.py"
    )
    for lang, readme in zip(("es", "en"), READMES):
        text = readme.read_text(encoding="utf-8")
        assert script.rendered(text, results, lang) == text, (
            f"{readme.name}: the example's values differ from {results}: run scripts/readme_examples.py"
        )
        marked = text.split(script.START, 1)[1].split(script.END, 1)[0]
        loss = num(results["best_val_loss"], ".2f", lang=lang)
        assert f"({loss})" in marked and f"{results['steps_per_epoch']} " in marked, marked
    # the vocabulary asked for is the one the corpus gives (no "6298 tokens and not the 8000 requested")
    asked = re.search(r"--vocab-size (\d+)", " ".join(results["commands"])).group(1)
    assert int(asked) == results["vocab_size"], results
