"""A warm interpreter for the suite's CLI runs: ``run_aura`` forks each ``python -m aura ARGS`` from a process that
has already imported torch, transformers and peft, instead of starting a new interpreter that spends ~4 of a tiny
run's ~5.5 CPU seconds importing them (measured on the CI's 2-core AMD EPYC: a 2-step LoRA run took 5.65 s, of
which 4.35 s were imports). The child is still a separate process running the real entry point (``aura/__main__``)
with its own argv, environment, working directory, stdin, stdout, stderr and exit code; only the third-party
modules below are already in memory. No module of ``aura`` is imported before the fork, so every run starts
from Aura's own import-time state. One thing differs: the run's parent process is the server, not the test, so a
run whose behaviour depends on its parent (a job's identity across torchrun's restarts) needs
``run_aura(..., fresh=True)``.

A server serves the runs whose environment matches its own in every variable the preloaded libraries may read
when they are imported (``HF_*``, ``PYTHONPATH``, ``OMP_NUM_THREADS``, ...: ``import_key``); ``run_aura`` keeps
one server per such environment it sees twice, and starts a new interpreter for the others, as for every run when
``AURA_TEST_FORK=0``. Runs that test signals, stream stdout or go through torchrun use ``subprocess`` directly.
"""

from __future__ import annotations

import io
import json
import os
import signal
import sys
import tempfile
import threading
from pathlib import Path

# Third-party modules a training run imports, loaded once in the server (never a module of aura).
PRELOAD = (
    "numpy",
    "torch",
    "torch.distributed",
    "torch.utils.tensorboard",
    "safetensors.torch",
    "tokenizers",
    "transformers",
    "transformers.modeling_utils",
    "transformers.models.auto.modeling_auto",
    "transformers.models.auto.tokenization_auto",
    "transformers.models.llama.modeling_llama",
    "transformers.models.qwen2.modeling_qwen2",
    "transformers.models.qwen3.modeling_qwen3",
    "transformers.models.gpt2.modeling_gpt2",
    "transformers.tokenization_utils_fast",
    "peft",
    "psutil",
    "yaml",
    "jinja2",
)

# Variables a run may set differently from the server's without a new interpreter: read by Aura (or Python's
# tempfile, reset in the child) at run time, never by the preloaded libraries when they are imported.
RUNTIME_PREFIXES = ("AURA_", "PYTEST_", "LC_")
# The last two are set by torch and accelerate themselves once imported, in the test process too, and read by
# torch when it first looks for a GPU or compiles.
RUNTIME_VARS = {
    *("LANG", "LANGUAGE", "PYTHONUNBUFFERED", "TMPDIR", "COLUMNS", "LINES", "TERM", "NO_COLOR"),
    *("PYTORCH_NVML_BASED_CUDA_CHECK", "TORCHINDUCTOR_CACHE_DIR"),
}


# What Aura sets at import when its output is not a terminal (``aura.core.console``; ``run_aura`` always sets
# AURA_PLAIN): the server has them before the libraries that read them at import are loaded.
IMPLIED = {"HF_HUB_DISABLE_PROGRESS_BARS": "1", "TQDM_DISABLE": "1"}


def runtime_only(name: str) -> bool:
    return name in RUNTIME_VARS or name.startswith(RUNTIME_PREFIXES)


def import_key(env: dict[str, str]) -> frozenset:
    """The part of ``env`` the preloaded libraries may read when imported: two runs with the same key can be
    forked from one server."""
    return frozenset((k, v) for k, v in {**IMPLIED, **env}.items() if not runtime_only(k))


def _start(channel_in: int, channel_out: int) -> None:
    """The server: import PRELOAD, say whether it can fork (one thread only: a fork copies only the calling
    thread, and a pool of native threads, as OpenMP's when OMP_NUM_THREADS is not 1, would not survive it),
    then serve one request (a JSON line) at a time, answered with the child's pid, then its exit status."""
    reader = os.fdopen(channel_in, "r", encoding="utf-8")
    writer = os.fdopen(channel_out, "w", encoding="utf-8", buffering=1)
    for name in PRELOAD:
        __import__(name)
    ready = sys.platform == "linux" and len(os.listdir("/proc/self/task")) == 1
    writer.write(json.dumps({"ready": ready}) + "\n")
    if not ready:
        return
    for line in reader:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            reader.close()
            writer.close()
            _child(request)  # never returns
        writer.write(json.dumps({"pid": pid}) + "\n")
        _, status = os.waitpid(pid, 0)
        writer.write(json.dumps({"code": os.waitstatus_to_exitcode(status)}) + "\n")


def _child(request: dict) -> None:
    """Become ``python -X faulthandler -m aura ARGS`` with the request's cwd, environment and stdio."""
    code = 1
    try:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None  # recomputed from this run's TMPDIR
        for fd, path, flags in (
            (0, request["stdin"] or os.devnull, os.O_RDONLY),
            (1, request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
            (2, request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
        ):
            opened = os.open(path, flags, 0o600)
            os.dup2(opened, fd)
            os.close(opened)
        unbuffered = bool(request["env"].get("PYTHONUNBUFFERED"))
        encoding = request["env"].get("PYTHONIOENCODING", "utf-8")
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding=encoding)
        sys.stdout = io.TextIOWrapper(
            io.FileIO(1, "w", closefd=False) if unbuffered else io.BufferedWriter(io.FileIO(1, "w", closefd=False)),
            encoding=encoding,
            write_through=unbuffered,
        )
        sys.stderr = io.TextIOWrapper(
            io.FileIO(2, "w", closefd=False), encoding=encoding, errors="backslashreplace", write_through=True
        )
        sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
        import faulthandler
        import runpy

        faulthandler.enable(file=sys.stderr)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
        sys.path[0] = os.getcwd()  # what `python -m` puts first
        sys.argv = [request["argv0"], *request["args"]]
        try:
            runpy.run_module("aura", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as e:
            if e.code is None or isinstance(e.code, int):
                code = e.code or 0
            else:
                print(e.code, file=sys.stderr)
                code = 1
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 1
        threading._shutdown()  # what the interpreter does at exit: wait for the run's non-daemon threads
        import atexit

        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


class ForkServer:
    """The test side: starts the server in a new interpreter with this process's environment, then runs
    ``aura ARGS`` through it (see the module docstring)."""

    def __init__(self, env: dict[str, str]):
        import subprocess

        self.env = {**IMPLIED, **env}
        to_server_r, to_server_w = os.pipe()
        from_server_r, from_server_w = os.pipe()
        code = f"import tests.forkserver as f; f._start({to_server_r}, {from_server_w})"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code],
            env=self.env,
            cwd=Path(__file__).resolve().parents[1],
            pass_fds=(to_server_r, from_server_w),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        os.close(to_server_r)
        os.close(from_server_w)
        self.send = os.fdopen(to_server_w, "w", encoding="utf-8", buffering=1)
        self.receive, self.pending = from_server_r, b""
        self.ready = json.loads(self._line(300) or '{"ready": false}')["ready"]

    def serves(self, env: dict[str, str]) -> bool:
        """Whether a run with ``env`` can be forked: the server alive and every variable the libraries may read
        at import the same as the server's."""
        return self.ready and self.proc.poll() is None and import_key(env) == import_key(self.env)

    def run(self, args: list[str], *, env: dict[str, str], cwd, input: str | None, timeout: float):
        """``(returncode, stdout, stderr)`` of ``python -m aura ARGS``, or ``None`` with the child's stdout and
        stderr so far when it ran past ``timeout`` (stopped with SIGABRT: faulthandler prints its stacks)."""
        import aura.__main__ as entry

        with tempfile.TemporaryDirectory(prefix="aura-fork-") as folder:
            stdin = None
            if input is not None:
                stdin = os.path.join(folder, "stdin")
                Path(stdin).write_text(input, encoding="utf-8")
            out, err = os.path.join(folder, "stdout"), os.path.join(folder, "stderr")
            request = {
                "args": list(args),
                "argv0": entry.__file__,
                "env": env,
                "cwd": str(cwd or os.getcwd()),
                "stdin": stdin,
                "stdout": out,
                "stderr": err,
            }
            self.send.write(json.dumps(request) + "\n")
            pid = json.loads(self._line(None))["pid"]
            answer = self._line(timeout)
            timed_out = answer is None
            if timed_out:
                os.kill(pid, signal.SIGABRT)
                answer = self._line(60)
                if answer is None:
                    os.kill(pid, signal.SIGKILL)
                    answer = self._line(None)
            code = json.loads(answer)["code"]

            def read(path: str) -> str:
                return Path(path).read_text(encoding="utf-8", errors="replace") if os.path.exists(path) else ""

            return (None if timed_out else code), read(out), read(err)

    def _line(self, timeout: float | None) -> str | None:
        """The server's next line, or ``None`` after ``timeout`` seconds without one (unbuffered: a line already
        read never waits in a buffer that ``select`` cannot see)."""
        import select
        import time

        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self.pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self.receive], [], [], left)[0]:
                return None
            chunk = os.read(self.receive, 4096)
            if not chunk:
                raise RuntimeError("the fork server ended")
            self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        return line.decode("utf-8")

    def close(self) -> None:
        self.send.close()
        os.close(self.receive)
        self.proc.wait(timeout=30)
