"""Issue 36.4-5: a mistyped command or flag gets, in one or two lines, the closest real one (no usage dump),
and a user's mistake (exit 2) is not dressed as a crash ("run with --debug" is for Aura's own failures)."""

from __future__ import annotations

from tests.conftest import run_aura_here


def test_a_mistyped_flag_names_the_real_one_in_two_lines():
    es = run_aura_here("pretrain", "--modelpreset", "tiny", env={"AURA_LANG": "es"})
    assert es.returncode == 2
    lines = es.stderr.strip().splitlines()
    assert lines == [
        "aura pretrain: error: argumentos no reconocidos: --modelpreset tiny. ¿Quisiste decir --model-preset?",
        "Ejecuta 'aura pretrain --help' para ver todas las opciones.",
    ], lines
    en = run_aura_here("finetune", "--learningrate", "1e-4")
    assert "Did you mean --learning-rate?" in en.stderr and len(en.stderr.strip().splitlines()) == 2
    far = run_aura_here("runs", "--zzzz")
    assert "Did you mean" not in far.stderr and "unrecognized arguments: --zzzz" in far.stderr


def test_a_mistyped_command_is_named_alone_with_the_closest_command():
    es = run_aura_here("pretrian", "--data", "x", env={"AURA_LANG": "es"})
    assert es.returncode == 2
    assert es.stderr.strip() == (
        "Comando desconocido: 'pretrian'. ¿Quisiste decir 'pretrain'? Ejecuta 'aura --help' para ver los comandos."
    )
    assert "Did you mean 'data prepare'?" in run_aura_here("data", "prepar", "x").stderr
    assert "Did you mean 'pipeline'?" in run_aura_here("pipelin", "list").stderr  # a group of commands
    assert "Did you mean" not in run_aura_here("zzzz").stderr


def test_user_mistakes_carry_no_crash_hint(tmp_path):
    proc = run_aura_here("runs", tmp_path / "nope", env={"AURA_LANG": "es"})
    assert proc.returncode == 2 and "No existe el directorio" in proc.stderr
    assert "--debug" not in proc.stderr
