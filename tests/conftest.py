"""Shared fixtures: run the real CLI in a subprocess (forked from a warm interpreter: tests/forkserver.py),
tiny Spanish text, English messages by default, and tiny models / prepared data built once per session (also
across pytest-xdist workers)."""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESOURCES = ROOT / "aura" / "resources"


def pytest_configure(config):
    """Under pytest-xdist (scripts/test.sh runs one worker per core) every worker, and every process it
    starts, uses one thread: N workers x N torch/rayon threads on N cores only thrash. Set before any
    test module imports torch (torch reads OMP_NUM_THREADS when it is imported)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "RAYON_NUM_THREADS"):
            os.environ.setdefault(var, "1")
    # pytest-xdist >= 3.7 hands out `--dist loadfile`'s files by their number of tests, most first, unless
    # told not to: that put the many quick parametrised files first and the long single-test files last,
    # where one of them could run alone at the end. Keep the order pytest_collection_modifyitems sets.
    if getattr(config.option, "loadscopereorder", None) is not None:
        config.option.loadscopereorder = False
    # A shell ignores SIGINT in the background jobs it starts (`bash scripts/test.sh &`), and an ignored
    # signal stays ignored in every child: the tests that press Ctrl+C in `aura chat`/`pretrain` would hang.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # AURA_REQUIRE (tests/evidence.py): a typo must stop the run, not silently require nothing.
    from tests.evidence import required

    try:
        required()
    except ValueError as e:
        raise pytest.UsageError(str(e)) from None


def pytest_unconfigure(config):
    _close_fork_servers()


def pytest_report_header(config):
    """The capabilities this run requires (a test that would skip for want of one fails instead)."""
    from tests.evidence import required

    need = sorted(required())
    return f"AURA_REQUIRE: {', '.join(need) if need else '(none: tests skip where something is missing)'}"


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Files holding `slow` tests first, then those holding `dist` ones, then the rest (each file's tests
    in their own order): pytest-xdist hands out whole files in this order, so the long ones do not end
    up last on one worker while the other idles."""
    rank: dict[str, int] = {}
    for item in items:
        here = 0 if item.get_closest_marker("slow") else 1 if item.get_closest_marker("dist") else 2
        rank[item.path] = min(rank.get(item.path, 2), here)
    items.sort(key=lambda item: rank[item.path])  # stable: files and tests keep their order


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A skip raised by tests/evidence.py's helpers is reported at the test that skipped (the skip list at
    the end of a run names each test, not evidence.py once for all of them)."""
    from tests.evidence import required_import_skip

    outcome = yield
    report = outcome.get_result()
    longrepr = report.longrepr
    if report.skipped and isinstance(longrepr, tuple) and len(longrepr) == 3:
        capability = required_import_skip(str(longrepr[2]))
        if capability:  # a plain pytest.importorskip of a module CI provides
            report.outcome = "failed"
            report.longrepr = f"required capability {capability!r} (AURA_REQUIRE) is missing: {longrepr[2]}"
        elif str(longrepr[0]).endswith("evidence.py"):
            path, line, _name = item.location
            report.longrepr = (path, (line or 0) + 1, f"{longrepr[2]} ({item.nodeid})")


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """A module skipped at import by a plain pytest.importorskip of a required capability fails to collect."""
    from tests.evidence import required_import_skip

    outcome = yield
    report = outcome.get_result()
    longrepr = report.longrepr
    if report.skipped and isinstance(longrepr, tuple) and len(longrepr) == 3:
        capability = required_import_skip(str(longrepr[2]))
        if capability:
            report.outcome = "failed"
            report.longrepr = f"required capability {capability!r} (AURA_REQUIRE) is missing: {longrepr[2]}"


@pytest.fixture(autouse=True)
def _english_messages(monkeypatch):
    """Tests read English messages unless they set AURA_LANG themselves."""
    monkeypatch.setenv("AURA_LANG", "en")
    monkeypatch.setenv("AURA_PLAIN", "1")
    from aura.core.i18n import set_lang

    set_lang(None)
    yield
    set_lang(None)


_SERVERS: dict = {}


def _fork_server(env: dict[str, str]):
    """A warm interpreter of this worker (tests/forkserver.py) for ``env``'s command, else ``None`` (a new one).
    One server per environment as the libraries see it when imported (``import_key``): the suite's usual one,
    and those a test sets for several runs (``HF_HUB_OFFLINE=1``...); an environment gets its server at its
    second run, so a one-off (a test's own ``HF_HOME``) starts no server. At most 3 per worker, the oldest
    closed first."""
    if os.environ.get("AURA_TEST_FORK", "1") == "0":
        return None
    from tests.forkserver import ForkServer, import_key

    key = import_key(env)
    servers, seen = _SERVERS.setdefault("servers", {}), _SERVERS.setdefault("seen", {})
    server = servers.get(key)
    if server is None or server.proc.poll() is not None:
        seen[key] = seen.get(key, 0) + 1
        if seen[key] < 2:
            return None
        if len(servers) >= 3:
            servers.pop(next(iter(servers))).close()
        server = servers[key] = ForkServer(env)
    return server if server.serves(env) else None


def _close_fork_servers() -> None:
    for server in _SERVERS.get("servers", {}).values():
        server.close()


def run_aura(
    *args: str,
    env: dict | None = None,
    cwd: str | os.PathLike | None = None,
    timeout: float = 600,
    input: str | None = None,
    fresh: bool = False,
) -> subprocess.CompletedProcess:
    """Run ``python -m aura ARGS`` as a user would, returning the completed process (text mode). One that runs
    past ``timeout`` fails the test with every thread's stack (faulthandler, on SIGABRT) and what it printed, so a
    rare hang in CI says where it waited. The process is forked from this worker's warm interpreter
    (tests/forkserver.py: torch, transformers and peft already imported, nothing of aura) when the environment
    allows it, else started new; ``AURA_TEST_FORK=0`` starts every one new. ``fresh=True`` starts it new whatever
    the environment: for a run whose behaviour depends on its parent process, which a forked run does not share
    with the test (a job's identity across torchrun's restarts is its launcher's pid: ``guard._agent``)."""
    full_env = dict(os.environ)
    full_env.setdefault("AURA_LANG", "en")
    full_env["AURA_PLAIN"] = "1"
    full_env["PYTHONUNBUFFERED"] = "1"
    full_env.update(env or {})
    command = [sys.executable, "-X", "faulthandler", "-m", "aura", *map(str, args)]
    server = None if fresh else _fork_server(full_env)
    if server is not None:
        code, out, err = server.run(list(map(str, args)), env=full_env, cwd=cwd, input=input, timeout=timeout)
        if code is None:
            raise AssertionError(
                f"aura {' '.join(map(str, args))} ran past {timeout} s; its output, then its stacks:\n"
                f"{out[-5000:]}\n{err[-20000:]}"
            )
        return subprocess.CompletedProcess(command, code, out, err)
    with subprocess.Popen(
        command,
        stdin=subprocess.PIPE if input is not None else None,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=full_env,
        cwd=cwd,
    ) as proc:
        try:
            out, err = proc.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)  # faulthandler writes every thread's stack to stderr, then it ends
            try:
                out, err = proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
            raise AssertionError(
                f"aura {' '.join(map(str, args))} ran past {timeout} s; its output, then its stacks:\n"
                f"{out[-5000:]}\n{err[-20000:]}"
            ) from None
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


def run_aura_terminated(*args: str, run: Path, at: str, timeout: float = 300) -> tuple[str, int]:
    """Start ``python -m aura ARGS``, send it SIGTERM once it prints ``at`` (a step of its log), and check that
    it stops as a stop asked for does (exit code 3) leaving one ``interrupt-step-N`` checkpoint in ``run``:
    (what it printed, N)."""
    env = dict(os.environ, AURA_PLAIN="1", PYTHONUNBUFFERED="1")
    env.setdefault("AURA_LANG", "en")
    proc = subprocess.Popen(
        [sys.executable, "-m", "aura", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    lines = []
    with proc.stdout:
        for line in proc.stdout:  # wait until training is under way
            lines.append(line)
            if at in line:
                proc.send_signal(signal.SIGTERM)
                break
        out = "".join(lines) + proc.stdout.read()
    assert proc.wait(timeout=timeout) == 3, out  # stopped by a signal, checkpoint saved
    interrupts = sorted(run.glob("interrupt-step-*"))
    assert len(interrupts) == 1, out
    return out, int(interrupts[0].name.rsplit("-", 1)[1])


def run_aura_killed(*args: str, saved_in: Path, timeout: float = 300) -> str:
    """Start ``python -m aura ARGS`` and kill -9 its whole process group as soon as a ``checkpoint-*`` directory
    appears in ``saved_in`` that was not there before (the step's or, at an epoch's end, the epoch's): no handler
    runs, as after a power cut or the OOM killer. Fails if the command ended before (the kill came too late to
    prove anything); returns what it printed."""
    import tempfile
    import time

    before = {p.name for p in saved_in.glob("checkpoint-*")}

    def saved() -> bool:
        return any(p.name not in before for p in saved_in.glob("checkpoint-*"))

    env = dict(os.environ, AURA_PLAIN="1", PYTHONUNBUFFERED="1")
    env.setdefault("AURA_LANG", "en")
    with tempfile.TemporaryFile() as log:  # a file, not a pipe: a full pipe would stall the command
        proc = subprocess.Popen(
            [sys.executable, "-m", "aura", *map(str, args)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while not saved() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:  # it had already ended
            pass
        proc.wait()
        log.seek(0)
        out = log.read().decode("utf-8", "replace")
    assert proc.returncode == -signal.SIGKILL and saved(), out
    return out


def run_aura_here(
    *args: str, env: dict | None = None, cwd: str | os.PathLike | None = None
) -> subprocess.CompletedProcess:
    """``aura ARGS`` through the same entry point (``aura.cli.main``) in this process, for calls that stop
    before training (refusals of bad input): the same parsing, checks, messages and exit code as
    ``run_aura`` without the seconds a new interpreter spends importing torch and transformers. Anything
    that trains, reads stdin, handles signals or depends on a fresh interpreter (PYTHONPATH, imports)
    goes through ``run_aura``."""
    import contextlib
    import io

    from aura.cli import main
    from aura.core import console
    from aura.core.i18n import set_lang

    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    out, err = io.StringIO(), io.StringIO()
    os.environ.setdefault("AURA_LANG", "en")
    os.environ.update({"AURA_PLAIN": "1", **{k: str(v) for k, v in (env or {}).items()}})
    set_lang(None)
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main([str(a) for a in args])
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        set_lang(None)
        console.set_prefix("")
        console.set_quiet(False)
    return subprocess.CompletedProcess(["aura", *map(str, args)], code, out.getvalue(), err.getvalue())


@pytest.fixture
def aura():
    return run_aura


@pytest.fixture(scope="session")
def spanish_text() -> str:
    """A few KB of the embedded Spanish corpus (documents separated by blank lines)."""
    files = sorted((RESOURCES / "corpus_es").glob("*.txt"))
    return "\n\n".join(p.read_text(encoding="utf-8").strip() for p in files)


def shared_dir(tmp_path_factory, name: str, build: Callable[[Path], object]) -> Path:
    """``build(dir)`` runs once per test session, also across pytest-xdist workers (a file lock), and
    every later call returns the same ``dir``. Shared read-only: a test that writes into it copies first."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # workers' basetemps are popen-gwN/ under the session's own directory
    root = base / "shared"
    root.mkdir(exist_ok=True)
    target, done = root / name, root / f"{name}.done"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not done.exists():
                shutil.rmtree(target, ignore_errors=True)
                build(target)
                done.touch()
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return target


@pytest.fixture(scope="session")
def tiny_zoo(tmp_path_factory) -> dict[str, Path]:
    """tiny_models.build_zoo, once per session: a byte-level BPE (vocab 800), a tiny Llama and GPT-2.
    Shared by every test: copy the dict before adding keys, and never write into the directories."""
    from tests.tiny_models import build_zoo

    root = shared_dir(tmp_path_factory, "zoo", build_zoo)
    return {"tokenizer": root / "tokenizer", "llama": root / "llama", "gpt2": root / "gpt2"}


@pytest.fixture(scope="session")
def tiny_adapter(tiny_zoo, tmp_path_factory) -> Path:
    """A LoRA adapter on tiny_zoo's Llama (tiny_models.make_lora_adapter, seed 1), once per session
    (read-only too)."""
    from tests.tiny_models import make_lora_adapter

    return shared_dir(tmp_path_factory, "zoo-adapter", lambda d: make_lora_adapter(tiny_zoo["llama"], d))


@pytest.fixture(scope="session")
def prepared_corpus(tmp_path_factory) -> Path:
    """The embedded corpus prepared with a vocab-800 BPE (test_loop.build_prepared), once per session."""
    from tests.test_loop import build_prepared

    return shared_dir(tmp_path_factory, "prepared", build_prepared) / "data"
