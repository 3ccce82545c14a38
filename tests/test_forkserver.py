"""The suite's warm interpreter (tests/forkserver.py): a run forked from it gives what a new interpreter gives (exit
code, stdout, stderr, working directory, stdin), and a run whose environment the preloaded libraries may read at
import starts a new interpreter."""

from __future__ import annotations

import os
import sys

import pytest

from tests.conftest import ROOT
from tests.forkserver import ForkServer

pytestmark = pytest.mark.catalogue  # the test harness itself (README: the suite's counts)


@pytest.fixture(scope="module")
def server():
    env = {**os.environ, "OMP_NUM_THREADS": "1", "AURA_LANG": "en", "AURA_PLAIN": "1", "PYTHONUNBUFFERED": "1"}
    env["MKL_NUM_THREADS"] = env["RAYON_NUM_THREADS"] = "1"
    if sys.platform != "linux":
        pytest.skip("the fork server counts its threads in /proc: Linux only (elsewhere every run starts new)")
    srv = ForkServer(env)
    # with one OpenMP thread the server must serve: a refusal here would silently make the whole suite slow
    assert srv.ready, "the fork server refused to serve: more than one thread after its imports"
    yield srv
    srv.close()


def _new_interpreter(args: list[str], env: dict, cwd, input: str | None = None) -> tuple[int, str, str]:
    import subprocess

    proc = subprocess.run(
        [sys.executable, "-m", "aura", *args], env=env, cwd=cwd, input=input, capture_output=True, text=True
    )
    return proc.returncode, proc.stdout, proc.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["--version"],
        ["pretrain", "--no-such-flag"],  # a user's mistake: exit 2, the message on stderr
        ["runs", "."],  # a relative path: the run's own working directory
        ["data", "prepare", "--data", "missing.txt", "--output-dir", "out"],
    ],
    ids=["version", "bad-flag", "cwd", "missing-file"],
)
def test_a_forked_run_gives_what_a_new_interpreter_gives(server, tmp_path, args):
    env = {**server.env, "AURA_LANG": "es"}  # a runtime variable that differs from the server's
    assert server.serves(env)
    forked = server.run(args, env=env, cwd=tmp_path, input=None, timeout=120)
    fresh = _new_interpreter(args, env, tmp_path)
    assert forked == fresh
    assert forked[0] == (0 if args[0] in ("--version", "runs") else 2), forked


def test_stdin_reaches_the_forked_run(server, tmp_path):
    """`aura chat` reads its questions from stdin: a tiny model answers the same question the same way."""
    from tests.tiny_models import build_llama, train_tokenizer

    model = build_llama(tmp_path / "llama", train_tokenizer(tmp_path / "tok", vocab_size=300), hidden=32, layers=1)
    args = ["chat", "--model", str(model), "--max-new-tokens", "4", "--temperature", "0"]
    forked = server.run(args, env=server.env, cwd=tmp_path, input="Hola\n", timeout=120)
    assert forked == _new_interpreter(args, server.env, tmp_path, input="Hola\n")
    assert forked[0] == 0 and forked[1].strip(), forked


def test_an_import_time_variable_starts_a_new_interpreter(server):
    assert server.serves({**server.env, "AURA_LANG": "es", "LANG": "es_ES.UTF-8", "PYTEST_CURRENT_TEST": "x"})
    assert not server.serves({**server.env, "HF_HOME": "/elsewhere"})  # huggingface_hub reads it at import
    assert not server.serves({**server.env, "PYTHONPATH": str(ROOT / "bench")})
    assert not server.serves({k: v for k, v in server.env.items() if k != "OMP_NUM_THREADS"})
