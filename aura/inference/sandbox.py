"""One tool call in a subprocess with limits: GRPO's tools (``aura.inference.tools``) never run in Aura's process.

Each call is a fresh ``python -I`` process (``WORKER`` below, standard library only) that:

* runs in a new temporary folder (its working directory), removed after the call;
* has an address-space limit (``RLIMIT_AS``, ``memory_mb``), a CPU-time limit and a file-size limit; the parent
  kills its whole process group when the wall-clock ``timeout`` passes;
* has no network: when the machine allows unprivileged user namespaces it runs under ``unshare -rn`` (a network
  namespace with no interface but a down loopback), and in every case an audit hook (``sys.addaudithook``)
  refuses every ``socket.*`` event (creating, connecting, binding, resolving) and ``socket.socket`` is replaced
  by a function that raises;
* may write only inside its folder: the audit hook refuses ``open`` in a writing mode (or with writing
  flags) and the mutating ``os.*`` / ``shutil.*`` events (remove, rename, mkdir, chmod, ...) on any path outside
  it; it refuses starting processes (``subprocess.Popen``, ``os.system``, ``os.exec*``, ``os.fork``,
  ``os.posix_spawn``) and ``os.kill``.

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
import shutil
import signal
import subprocess
import sys
import tempfile
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

# The child: stdlib only, so it starts in tens of milliseconds under a small address-space limit.
WORKER = r"""
import importlib.util, json, os, resource, sys
req = json.loads(sys.stdin.read())
out = sys.stdout
sys.stdout = sys.stderr  # a tool's prints do not mix with the result
folder = os.path.realpath(req["folder"])
os.chdir(folder)
mem = req["memory_mb"] << 20
resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
cpu = int(req["timeout"]) + 1
resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 20, 64 << 20))
sys.dont_write_bytecode = True  # no __pycache__ written next to the user's file
sys.path.insert(0, os.path.dirname(req["file"]))
import socket
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
PATH_EVENTS = {"os.remove", "os.rename", "os.mkdir", "os.rmdir", "os.symlink", "os.link", "os.chmod",
               "os.chown", "os.truncate", "os.utime", "os.chflags", "os.lchflags", "os.mkfifo", "os.mknod",
               "shutil.rmtree", "shutil.move", "shutil.copyfile", "shutil.copytree", "shutil.chown"}
FORBIDDEN = {"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
             "os.kill", "os.killpg", "pty.spawn"}
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
    reply = {"ok": True, "text": text}
except BaseException as e:
    reply = {"ok": False, "text": type(e).__name__ + (": " + str(e) if str(e) else "")}
out.write(json.dumps(reply, ensure_ascii=False))
out.flush()
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


def call(file: str, function: str, arguments: dict, *, limits: Limits = Limits()) -> Result:
    """Run ``function(**arguments)`` of the Python file ``file`` in a sandboxed subprocess (module docstring)."""
    with tempfile.TemporaryDirectory(prefix="aura-tool-") as folder:
        request = json.dumps(
            {
                "file": os.path.abspath(file),
                "function": function,
                "arguments": arguments,
                "folder": folder,
                "timeout": limits.timeout,
                "memory_mb": limits.memory_mb,
            }
        )
        cmd = [*network_namespace(), sys.executable, "-I", "-c", WORKER]
        proc = subprocess.Popen(
            cmd,
            cwd=folder,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group: a timeout kills whatever it started too
            env={"PATH": os.environ.get("PATH", ""), "HOME": folder, "TMPDIR": folder, "PYTHONHASHSEED": "0"},
        )
        try:
            out, err = proc.communicate(request.encode(), timeout=limits.timeout)
        except subprocess.TimeoutExpired:
            _kill(proc)
            return Result(False, "Error: " + M("timeout", s=f"{limits.timeout:g}"))
    return _reply(proc.returncode, out, err)


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.communicate()


def _reply(rc: int, out: bytes, err: bytes) -> Result:
    try:
        reply = json.loads(out.decode("utf-8", "replace"))
    except ValueError:
        if rc < 0:
            return Result(False, "Error: " + M("signal", sig=signal.Signals(-rc).name))
        tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
        return Result(False, "Error: " + M("crashed", rc=rc, err=tail[0][:300]))
    text = str(reply.get("text", ""))[:MAX_OUTPUT]
    return Result(True, text) if reply.get("ok") else Result(False, "Error: " + text)
