"""Tool calls in sandboxed processes with limits: GRPO's tools (``aura.inference.tools``) never run in Aura's process.

A ``Sandbox`` starts one ``python -I`` interpreter (``SERVER`` below, standard library only) and keeps it; for
each call it forks a fresh child from it (a fork costs about a millisecond, an interpreter's start tens of
milliseconds, which TRL, calling tools in its own process, never pays). The child, before the tool's file is
imported:

* runs in a new temporary folder (its working directory, ``HOME`` and ``TMPDIR``), removed after the call;
* has an address-space limit (``RLIMIT_AS``, ``memory_mb``), a CPU-time limit and a file-size limit, and is the
  leader of its own process group, which the server kills whole when the wall-clock ``timeout`` passes (and
  after every call, so nothing it started outlives it);
* has no network: when the machine allows unprivileged user namespaces the server runs under ``unshare -rn`` (a
  network namespace with no interface but a down loopback), and in every case an audit hook
  (``sys.addaudithook``) refuses every ``socket.*`` event (creating, connecting, binding, resolving) and
  ``socket.socket`` is replaced by a function that raises;
* may write only inside its folder: the audit hook refuses ``open`` in a writing mode (or with writing
  flags) and the mutating ``os.*`` / ``shutil.*`` events (remove, rename, mkdir, chmod, ...) on any path outside
  it; it refuses starting processes (``subprocess.Popen``, ``os.system``, ``os.exec*``, ``os.fork``,
  ``os.posix_spawn``) and ``os.kill``.

Every call imports the tool's file afresh in its own child, so no call sees what another left behind, and the
server itself never imports it nor installs the hook (it must fork). ``call`` is one call in a sandbox of its
own; ``aura.inference.tools.ToolBox`` keeps one sandbox per pool worker for a whole run.

An audit hook is not a security boundary against code written to escape it (``ctypes`` can write memory
directly): it stops the mistakes a tool makes (a loop, an unbounded list, a stray path, a socket), which is
what GRPO needs to keep training. Tools are the user's own code, run with the user's rights.

A call that fails (an exception, the time or memory limit, a refused write or socket, a result that is not
text-convertible) returns ``Result(ok=False, text="Error: ...")``: GRPO appends that text as the tool's
output, counts a failed call and goes on.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from dataclasses import dataclass
from functools import lru_cache

from aura.core.i18n import Messages

M = Messages(
    "sandbox",
    {
        "timeout": ("la herramienta superó {s} s y se detuvo", "the tool ran past {s} s and was stopped"),
        "signal": (
            "el proceso de la herramienta terminó por la señal {sig}",
            "the tool's process ended by signal {sig}",
        ),
        "crashed": (
            "el proceso de la herramienta terminó sin resultado (código {rc}): {err}",
            "the tool's process ended without a result (code {rc}): {err}",
        ),
    },
)

MAX_OUTPUT = 2000  # characters of a tool's result kept (longer ones are cut)

# The server: stdlib only, so it starts in tens of milliseconds; one JSON request per line on stdin, one JSON
# reply per line on stdout ({"rc": exit code or -signal, "out": the child's reply, "err": its stderr's end} or
# {"timeout": true}). The hook and the limits are the child's alone.
SERVER = r"""
import importlib.util, json, os, resource, select, signal, socket, sys, time
import ast, math, operator, re  # what small tools (a calculator) import, loaded once for every call
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
PATH_EVENTS = {"os.remove", "os.rename", "os.mkdir", "os.rmdir", "os.symlink", "os.link", "os.chmod",
               "os.chown", "os.truncate", "os.utime", "os.chflags", "os.lchflags", "os.mkfifo", "os.mknod",
               "shutil.rmtree", "shutil.move", "shutil.copyfile", "shutil.copytree", "shutil.chown"}
FORBIDDEN = {"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
             "os.kill", "os.killpg", "pty.spawn"}
sys.dont_write_bytecode = True  # no __pycache__ written next to the user's file

def child(req, reply_fd, err_fd):
    os.setsid()  # its own process group: the server kills whatever it started too
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)  # the server's requests are not the tool's to read
    os.dup2(err_fd, 1)
    os.dup2(err_fd, 2)  # a tool's prints do not mix with the result
    folder = os.path.realpath(req["folder"])
    os.chdir(folder)
    os.environ.update(HOME=folder, TMPDIR=folder)
    mem = req["memory_mb"] << 20
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    cpu = int(req["timeout"]) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 20, 64 << 20))
    sys.path.insert(0, os.path.dirname(req["file"]))

    def inside(path):
        if isinstance(path, int):
            return True
        real = os.path.realpath(os.fsdecode(path))
        return real == folder or real.startswith(folder + os.sep)

    def hook(event, args):
        if event.startswith("socket."):
            raise PermissionError("network access is not allowed in a tool (" + event + ")")
        if event in FORBIDDEN:
            raise PermissionError("starting processes is not allowed in a tool (" + event + ")")
        if event == "open" and args and args[0] is not None:
            mode, flags = args[1] or "", args[2] or 0
            writes = any(c in str(mode) for c in "wax+") or bool(flags & WRITE_FLAGS)
            if writes and not inside(args[0]):
                raise PermissionError("writing outside the tool's folder is not allowed: " + os.fsdecode(args[0]))
        elif event in PATH_EVENTS:
            for a in args:
                if isinstance(a, (str, bytes, os.PathLike)) and not inside(a):
                    raise PermissionError("changing files outside the tool's folder is not allowed: " + os.fsdecode(a))

    def no_socket(*a, **k):
        raise PermissionError("network access is not allowed in a tool")

    sys.addaudithook(hook)
    socket.socket = socket.create_connection = no_socket
    try:
        spec = importlib.util.spec_from_file_location("aura_tool_module", req["file"])
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        value = getattr(module, req["function"])(**req["arguments"])
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
        reply = {"ok": True, "text": text[: req["max_chars"]]}
    except BaseException as e:
        reply = {"ok": False, "text": (type(e).__name__ + (": " + str(e) if str(e) else ""))[: req["max_chars"]]}
    os.write(reply_fd, json.dumps(reply, ensure_ascii=False).encode())
    sys.stdout.flush()
    sys.stderr.flush()

def wait(pid, timeout):
    # the child's wait status, or None when it ran past ``timeout`` seconds
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = None
    deadline = time.monotonic() + timeout
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return status
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if fd is None:
                time.sleep(min(left, 0.002))
            else:
                select.select([fd], [], [], left)
    finally:
        if fd is not None:
            os.close(fd)

def kill_group(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass

def read_end(fd, limit):
    os.lseek(fd, max(0, os.fstat(fd).st_size - limit), os.SEEK_SET)
    return os.read(fd, limit).decode("utf-8", "replace")

for line in sys.stdin.buffer:
    req = json.loads(line)
    reply_fd, err_fd = os.memfd_create("reply"), os.memfd_create("stderr")
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            child(req, reply_fd, err_fd)
        except BaseException:
            code = 70
        os._exit(code)
    status = wait(pid, req["timeout"])
    if status is None:
        kill_group(pid)
        try:
            os.kill(pid, signal.SIGKILL)  # still its group's leader? (killed before its setsid)
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)
        kill_group(pid)
        answer = {"timeout": True}
    else:
        kill_group(pid)
        rc = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        answer = {"rc": rc, "out": read_end(reply_fd, 1 << 20), "err": read_end(err_fd, 2000)}
    os.close(reply_fd)
    os.close(err_fd)
    sys.stdout.write(json.dumps(answer, ensure_ascii=False) + "\n")
    sys.stdout.flush()
"""


@dataclass(frozen=True)
class Limits:
    """A tool call's limits: wall-clock seconds and address space in MiB."""

    timeout: float = 5.0
    memory_mb: int = 1024


@dataclass(frozen=True)
class Result:
    ok: bool
    text: str  # the tool's output, or "Error: ..." (what the model reads in the tool turn)


@lru_cache(maxsize=1)
def network_namespace() -> list[str]:
    """``["unshare", "-rn"]`` where an unprivileged network namespace can be made here, else ``[]``."""
    unshare = shutil.which("unshare")
    if not unshare:
        return []
    try:
        ok = subprocess.run([unshare, "-rn", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    return [unshare, "-rn"] if ok else []


class Sandbox:
    """A started sandbox server (``SERVER``): ``call`` forks one child per call. Started on its first call; ends
    with ``close`` (or when Aura's process ends: the server stops at the end of its stdin). One call at a time."""

    def __init__(self):
        self._proc: subprocess.Popen | None = None

    def call(self, file: str, function: str, arguments: dict, *, limits: Limits = Limits()) -> Result:
        """Run ``function(**arguments)`` of the Python file ``file`` in a forked child (module docstring)."""
        with tempfile.TemporaryDirectory(prefix="aura-tool-") as folder:
            request = {
                "file": os.path.abspath(file),
                "function": function,
                "arguments": arguments,
                "folder": folder,
                "timeout": limits.timeout,
                "memory_mb": limits.memory_mb,
                "max_chars": MAX_OUTPUT,
            }
            answer = self._ask(json.dumps(request, ensure_ascii=False), limits.timeout + SERVER_GRACE)
        if answer is None or answer.get("timeout"):
            return Result(False, "Error: " + M("timeout", s=f"{limits.timeout:g}"))
        if "rc" not in answer:  # the server itself ended
            return Result(False, "Error: " + M("crashed", rc=answer["server_rc"], err=""))
        return _reply(answer["rc"], answer.get("out", ""), answer.get("err", ""))

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            _stop(proc)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _start(self) -> subprocess.Popen:
        if self._proc is None or self._proc.poll() is not None:
            self._proc = subprocess.Popen(
                [*network_namespace(), sys.executable, "-I", "-c", SERVER],
                cwd=tempfile.gettempdir(),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # the terminal's Ctrl+C is Aura's to handle, not the server's
                env={"PATH": os.environ.get("PATH", ""), "PYTHONHASHSEED": "0"},
            )
            weakref.finalize(self, _stop, self._proc)  # a box dropped without close, or Aura's exit
        return self._proc

    def _ask(self, request: str, timeout: float) -> dict | None:
        """The server's answer to one request line; None (the server stopped) if none came within ``timeout``."""
        proc = self._start()
        try:
            proc.stdin.write(request.encode() + b"\n")
            proc.stdin.flush()
        except OSError:
            return self._ended(proc)
        line, deadline = b"", time.monotonic() + timeout
        fd = proc.stdout.fileno()
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                self._proc = None
                _kill(proc)
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return self._ended(proc)
            line += chunk
        return json.loads(line)

    def _ended(self, proc: subprocess.Popen) -> dict:
        self._proc = None
        _kill(proc)
        return {"server_rc": proc.returncode}


SERVER_GRACE = 10.0  # seconds the server may take beyond a call's own limit before it counts as stuck


def call(file: str, function: str, arguments: dict, *, limits: Limits = Limits()) -> Result:
    """One call in a sandbox of its own (``Sandbox.call``; a run's many calls go through ``ToolBox``)."""
    with Sandbox() as box:
        return box.call(file, function, arguments, limits=limits)


def _stop(proc: subprocess.Popen) -> None:
    """End a server: the end of its stdin ends its loop; killed if it does not end within 5 s."""
    try:
        proc.stdin.close()
        proc.wait(timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        _kill(proc)
    proc.stdout.close()


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()


def _reply(rc: int, out: str, err: str) -> Result:
    try:
        reply = json.loads(out)
    except ValueError:
        if rc < 0:
            return Result(False, "Error: " + M("signal", sig=signal.Signals(-rc).name))
        tail = err.strip().splitlines()[-1:] or [""]
        return Result(False, "Error: " + M("crashed", rc=rc, err=tail[0][:300]))
    text = str(reply.get("text", ""))[:MAX_OUTPUT]
    return Result(True, text) if reply.get("ok") else Result(False, "Error: " + text)
