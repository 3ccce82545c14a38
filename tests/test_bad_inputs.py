"""The bad-input suite (``tests/bad_inputs``): every malformed or hostile input of every command gets a
clear refusal (exit 2, no traceback, the offending file or field named, nothing left that a later command
takes as complete). Each case runs in-process through ``aura.cli.main`` (``run_aura_here``); the same
cases give ``bench/bench_bad_inputs.py``'s ``N/M clear``. Also here: what the refusals must not refuse
(a diverged run still plots; ``aura runs`` still shows the runs it can read)."""

from __future__ import annotations

import json

import pytest

from tests.bad_inputs import CASES, COMPLETE, Fixtures, build_run, run_case
from tests.bad_inputs.hostile import GOOD_LOG, run_dir_with
from tests.conftest import run_aura_here, shared_dir


@pytest.fixture(scope="session")
def fixtures(tiny_zoo, tiny_adapter, prepared_corpus, tmp_path_factory) -> Fixtures:
    run = shared_dir(tmp_path_factory, "bad-inputs-run", lambda d: build_run(d, prepared_corpus))
    return Fixtures(
        tokenizer=tiny_zoo["tokenizer"],
        llama=tiny_zoo["llama"],
        gpt2=tiny_zoo["gpt2"],
        adapter=tiny_adapter,
        data=prepared_corpus,
        run=run,
    )


def test_the_suite_covers_every_command_with_80_cases():
    from aura.cli.commands import COMMANDS

    commands = {" ".join(k) for k in COMMANDS}
    covered = {c.command for c in CASES.values()}
    assert covered <= commands, covered - commands
    missing = commands - covered
    assert not missing, f"commands without a bad-input case: {sorted(missing)}"
    assert len(CASES) >= 80 and set(COMPLETE) <= commands


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if c.slow else n for n, c in CASES.items()])
def test_bad_input_is_refused_clearly(name, fixtures, tmp_path):
    problems, output = run_case(name, fixtures, tmp_path / "case", run_aura_here)
    assert not problems, f"{name}: {'; '.join(problems)}\n{output[-3000:]}"


def test_a_diverged_run_still_plots(tmp_path):
    """inf/nan losses are what a diverged run logs: drawn as gaps, not refused (counters must be finite)."""
    run = run_dir_with(
        tmp_path,
        GOOD_LOG
        + "2026-01-01T00:00:01,step,0,2,256,inf,,0.0003,,5000,,0.1\n"
        + "2026-01-01T00:00:02,step,0,3,384,nan,,0.0003,,5000,,0.1\n",
    )
    r = run_aura_here("plot", run, "--output-dir", tmp_path / "out")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out" / "loss.png").stat().st_size > 1000


def test_runs_shows_what_it_can_read_and_exits_2(tmp_path):
    run_dir_with(tmp_path, GOOD_LOG)  # runs/r1: fine
    bad = tmp_path / "runs" / "r2"
    bad.mkdir()
    (bad / "run.json").write_text(json.dumps({"status": "finished", "last_step": "dos"}), encoding="utf-8")
    (bad / "training_log.csv").write_bytes(GOOD_LOG.encode() + b"\xff\n")
    r = run_aura_here("runs", tmp_path / "runs")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "r1" in r.stdout and "r2" in r.stdout  # the table still lists both
    assert "last_step" in r.stderr and "not UTF-8" in r.stderr and "line 3" in r.stderr
    r = run_aura_here("runs", tmp_path / "runs", "--json")
    assert r.returncode == 2 and len(json.loads(r.stdout)) == 2  # still valid JSON
