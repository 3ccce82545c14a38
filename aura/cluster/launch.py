"""``aura launch <command> [its flags]``: start torchrun on this node from the cluster's environment.

The contract of the original Docker guide's ``ddp_launch.sh``: ``NNODES``, ``NODE_RANK``,
``MASTER_ADDR``, ``MASTER_PORT`` and ``GPUS_PER_NODE`` describe the job (flags override them), and
every node runs the same command with its own ``NODE_RANK``. It runs
``python -m torch.distributed.run ... -m aura <command>``, prints that exact command, passes its output
through, returns torchrun's exit status and, on failure, says what to check.

Before any worker starts, the inner command's flags are checked by Aura's own parser in a short child
process (``AURA_CHECK_FLAGS``): a mistyped flag exits 2 with that command's usage, not a torchrun
traceback. Workers learn the launcher's command line (``AURA_LAUNCH``, ``aura.distributed.launcher``) so a
run records it and its resume hint reproduces it.

Signals: torchrun runs in a session of its own, so a Ctrl+C (SIGINT), SIGTERM or SIGHUP reaches the
launcher alone, which passes it on once to torchrun; torchrun passes it to its workers, which finish the
step, save a checkpoint and exit 3, and the launcher then exits 3 like a single-process run (torchrun's
own traceback of the signal is not shown). A second Ctrl+C goes straight to the workers, which abort
without saving (130). If the launcher itself is killed (kill -9), torchrun gets SIGTERM from the kernel
(``PR_SET_PDEATHSIG``) and its workers save as above; if torchrun dies too, the workers notice their
parent is gone (``aura.distributed.launcher.ParentWatch``). torchrun's stderr goes to an unlinked temporary
file that the launcher follows (for the diagnosis), so nothing the workers write ever hits a closed pipe.
"""

from __future__ import annotations

import collections
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Literal

from aura.cluster.diagnose import diagnose
from aura.core import console
from aura.core.config import arg
from aura.core.errors import AuraError
from aura.core.i18n import Messages
from aura.distributed.launcher import CHECK_ENV, JOB_ENV_VARS, LAUNCH_ENV, SHARE_GPU_ENV

M = Messages(
    "dist_launch",
    {
        "no_command": (
            "Falta el comando que lanzar, p. ej. 'aura launch pretrain --data DIR --output-dir "
            "RUN' o 'aura launch check-dist'.",
            "Missing the command to launch, e.g. 'aura launch pretrain --data DIR --output-dir "
            "RUN' or 'aura launch check-dist'.",
        ),
        "bad_env": (
            "La variable de entorno {var}={value!r} no es un número entero; corrígela o usa {flag}.",
            "The environment variable {var}={value!r} is not an integer; fix it or use {flag}.",
        ),
        "bad_count": ("{name} debe ser al menos 1 (recibido {value}).", "{name} must be at least 1 (got {value})."),
        "bad_env_count": (
            "La variable de entorno {var}={value} no es válida: debe ser al menos 1. Corrígela, "
            "quítala (por defecto {default}) o usa {flag}.",
            "The environment variable {var}={value} is not valid: it must be at least 1. Fix it, "
            "unset it (default {default}) or use {flag}.",
        ),
        "bad_env_port": (
            "La variable de entorno MASTER_PORT={value} no es un puerto válido (1-65535). Corrígela, "
            "quítala (por defecto 29500) o usa --master-port.",
            "The environment variable MASTER_PORT={value} is not a valid port (1-65535). Fix it, "
            "unset it (default 29500) or use --master-port.",
        ),
        "bad_env_rank": (
            "La variable de entorno NODE_RANK={value} no puede ser negativa. Corrígela, quítala (por "
            "defecto 0) o usa --node-rank.",
            "The environment variable NODE_RANK={value} cannot be negative. Fix it, unset it "
            "(default 0) or use --node-rank.",
        ),
        "forwarding": (
            "Señal {name}: se pasa a los procesos, que terminan el paso, guardan un checkpoint y "
            "salen (otro Ctrl+C aborta sin guardar).",
            "Signal {name}: passed on to the workers, which finish the step, save a checkpoint and "
            "exit (another Ctrl+C aborts without saving).",
        ),
        "stopped": (
            "Los procesos se detuvieron tras guardar su checkpoint (código 3).",
            "The workers stopped after saving their checkpoint (exit code 3).",
        ),
        "bad_rank": (
            "NODE_RANK={rank} está fuera de rango: con NNODES={nnodes} va de 0 a {last}.",
            "NODE_RANK={rank} is out of range: with NNODES={nnodes} it goes from 0 to {last}.",
        ),
        "bad_port": (
            "MASTER_PORT={port} no es un puerto válido (1-65535).",
            "MASTER_PORT={port} is not a valid port (1-65535).",
        ),
        "bad_restarts": (
            "--max-restarts no puede ser negativo (recibido {value}).",
            "--max-restarts cannot be negative (got {value}).",
        ),
        "loopback": (
            "NNODES={nnodes} con MASTER_ADDR={addr}: en un clúster real MASTER_ADDR debe ser la IP de "
            "LAN del nodo 0 en todos los nodos.",
            "NNODES={nnodes} with MASTER_ADDR={addr}: on a real cluster MASTER_ADDR must be node 0's "
            "LAN IP on every node.",
        ),
        "job": (
            "Nodo {node_rank} de {nnodes} | {gpus:proceso|procesos} por nodo | maestro {addr}:{port} | "
            "rendezvous {rdzv}",
            "Node {node_rank} of {nnodes} | {gpus:process|processes} per node | master {addr}:{port} | "
            "rendezvous {rdzv}",
        ),
        "command": ("Comando: {cmd}", "Command: {cmd}"),
        "share_gpu": (
            "--share-gpu: los procesos de este nodo comparten sus GPU por gloo ({var}=1 en su entorno).",
            "--share-gpu: this node's ranks share its GPUs over gloo ({var}=1 in their environment).",
        ),
        "default_gpus": ("las GPU CUDA visibles, o 1", "the visible CUDA GPUs, or 1"),
        "exit": ("torchrun terminó con el código {code}.", "torchrun exited with status {code}."),
        "hint": ("Qué revisar:", "What to check:"),
    },
)

EXIT_INTERRUPTED = 3  # aura.train.loop.EXIT_INTERRUPTED: a worker stopped by a signal after saving
SHUTDOWN_TIMEOUT_S = 300  # torchrun's default 30 s may be too short to write a large checkpoint


def _env_int(var: str, flag: str) -> int | None:
    value = os.environ.get(var, "").strip()
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise AuraError(M("bad_env", var=var, value=value, flag=flag)) from None


def _env_count(var: str, flag: str, default: str) -> int | None:
    """A count from the environment (None when unset); a value below 1 is refused, never defaulted."""
    value = _env_int(var, flag)
    if value is not None and value < 1:
        raise AuraError(M("bad_env_count", var=var, value=value, default=default, flag=flag))
    return value


def _default_gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 1


@dataclass
class LaunchConfig:
    command: list[str] = arg(
        [],
        es="Comando de Aura y sus opciones (p. ej. pretrain --data DIR).",
        en="Aura command and its flags (e.g. pretrain --data DIR).",
        remainder=True,
        metavar="COMMAND",
    )
    nnodes: int | None = arg(
        None, es="Número de nodos (por defecto $NNODES o 1).", en="Number of nodes (default $NNODES or 1)."
    )
    node_rank: int | None = arg(
        None,
        es="Rango de este nodo, 0..nnodes-1 (por defecto $NODE_RANK o 0).",
        en="This node's rank, 0..nnodes-1 (default $NODE_RANK or 0).",
    )
    master_addr: str | None = arg(
        None,
        es="IP del nodo 0 (por defecto $MASTER_ADDR o 127.0.0.1).",
        en="Node 0's IP (default $MASTER_ADDR or 127.0.0.1).",
    )
    master_port: int | None = arg(
        None,
        es="Puerto del nodo 0 (por defecto $MASTER_PORT o 29500).",
        en="Node 0's port (default $MASTER_PORT or 29500).",
    )
    gpus_per_node: int | None = arg(
        None,
        es="Procesos por nodo (por defecto $GPUS_PER_NODE, o las GPU CUDA visibles, o 1).",
        en="Processes per node (default $GPUS_PER_NODE, or the visible CUDA GPUs, or 1).",
    )
    max_restarts: int = arg(
        0,
        es="Reinicios del grupo de procesos si uno falla (tolerancia a fallos; reanuda del último checkpoint).",
        en="Restarts of the worker group when one fails (fault tolerance; resumes from the latest checkpoint).",
    )
    rdzv_backend: Literal["static", "c10d"] = arg(
        "static",
        es="Rendezvous: static (NODE_RANK fijo) o c10d (elástico; rangos asignados al llegar).",
        en="Rendezvous: static (fixed NODE_RANK) or c10d (elastic; ranks assigned on arrival).",
    )
    rdzv_endpoint: str | None = arg(
        None,
        es="host:puerto del rendezvous c10d (por defecto MASTER_ADDR:MASTER_PORT).",
        en="c10d rendezvous host:port (default MASTER_ADDR:MASTER_PORT).",
    )
    rdzv_id: str = arg(
        "aura", es="Identificador del trabajo (igual en todos los nodos).", en="Job id (the same on every node)."
    )
    rdzv_conf: str | None = arg(
        None,
        es="Opciones extra del rendezvous, p. ej. is_host=true.",
        en="Extra rendezvous options, e.g. is_host=true.",
    )
    rdzv_timeout: int | None = arg(
        None, es="Segundos de espera a que lleguen todos los nodos.", en="Seconds to wait for every node to join."
    )
    local_addr: str | None = arg(
        None,
        es="IP propia de este nodo (con varias interfaces de red).",
        en="This node's own IP (with several network interfaces).",
    )
    share_gpu: bool = arg(
        False,
        es="Varios procesos en una misma GPU, por gloo (NCCL no lo admite): para "
        "probar el código de varios procesos con una sola GPU, no para ir rápido.",
        en="Several ranks on one GPU, over gloo (NCCL does not allow it): to test multi-rank "
        "code with a single GPU, not for speed.",
    )
    dry_run: bool = arg(False, es="Solo imprime el comando torchrun.", en="Only print the torchrun command.")

    def __post_init__(self):
        if not self.command:
            raise AuraError(M("no_command"))
        # a variable that is set is used as given: NNODES=0 is refused, never replaced by the default
        if self.nnodes is None:
            self.nnodes = _env_count("NNODES", "--nnodes", "1") or 1
        if self.node_rank is None:
            self.node_rank = _env_int("NODE_RANK", "--node-rank")
            if self.node_rank is not None and self.node_rank < 0:
                raise AuraError(M("bad_env_rank", value=self.node_rank))
            self.node_rank = 0 if self.node_rank is None else self.node_rank
        if self.master_addr is None:
            self.master_addr = os.environ.get("MASTER_ADDR", "").strip() or "127.0.0.1"
        if self.master_port is None:
            self.master_port = _env_int("MASTER_PORT", "--master-port")
            if self.master_port is not None and not 0 < self.master_port < 65536:
                raise AuraError(M("bad_env_port", value=self.master_port))
            self.master_port = 29500 if self.master_port is None else self.master_port
        if self.gpus_per_node is None:
            self.gpus_per_node = _env_count("GPUS_PER_NODE", "--gpus-per-node", M("default_gpus")) or _default_gpus()
        for name, value in (("NNODES", self.nnodes), ("GPUS_PER_NODE", self.gpus_per_node)):
            if value < 1:
                raise AuraError(M("bad_count", name=name, value=value))
        if not 0 <= self.node_rank < self.nnodes:
            raise AuraError(M("bad_rank", rank=self.node_rank, nnodes=self.nnodes, last=self.nnodes - 1))
        if not 0 < self.master_port < 65536:
            raise AuraError(M("bad_port", port=self.master_port))
        if self.max_restarts < 0:
            raise AuraError(M("bad_restarts", value=self.max_restarts))


def torchrun_command(cfg: LaunchConfig) -> list[str]:
    """The exact torchrun command line for ``cfg``."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nnodes={cfg.nnodes}",
        f"--nproc_per_node={cfg.gpus_per_node}",
    ]
    conf = [cfg.rdzv_conf] if cfg.rdzv_conf else []
    if cfg.rdzv_backend == "c10d":
        endpoint = cfg.rdzv_endpoint or f"{cfg.master_addr}:{cfg.master_port}"
        cmd += ["--rdzv_backend=c10d", f"--rdzv_endpoint={endpoint}", f"--rdzv_id={cfg.rdzv_id}"]
        if cfg.rdzv_timeout:
            conf.append(f"join_timeout={cfg.rdzv_timeout}")
    else:
        cmd += [f"--node_rank={cfg.node_rank}", f"--master_addr={cfg.master_addr}", f"--master_port={cfg.master_port}"]
        if cfg.rdzv_timeout:
            conf.append(f"timeout={cfg.rdzv_timeout}")
    if conf:
        cmd.append("--rdzv_conf=" + ",".join(conf))
    if cfg.local_addr:
        cmd.append(f"--local_addr={cfg.local_addr}")
    cmd.append(f"--max_restarts={cfg.max_restarts}")
    return cmd + ["-m", "aura", *cfg.command]


class _Follow:
    """Copies torchrun's stderr (an unlinked temporary file it appends to) to ours as it grows, keeping
    a tail for the diagnosis. torchrun's own traceback (and its failure table) is left out when the
    workers already said why they stopped: after a signal the launcher passed on (the stop was asked
    for; the workers say what they saved), or when every worker of this node ended with a user error (2,
    its message printed) or a saved stop (3)."""

    def __init__(self, reader, sink, tail: collections.deque, explained):
        import codecs

        self.reader, self.sink, self.tail, self.explained = reader, sink, tail, explained
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.signalled = False
        self.done = threading.Event()
        self._partial = ""
        self._held: list[str] | None = None  # a traceback being read
        self._skip_rules = 0  # lines of torchrun's failure table still to leave out (its "====" rules)
        self.thread = threading.Thread(target=self._run, name="aura-launch-stderr", daemon=True)

    def _run(self) -> None:
        while True:
            chunk = self.reader.read(65536)
            if chunk:
                self._feed(self.decoder.decode(chunk))
                continue
            if self.done.is_set():
                self._feed(self.decoder.decode(b"", final=True))
                if self._partial:
                    self._line(self._partial)
                if self._held:
                    self._out("".join(self._held))
                return
            time.sleep(0.05)

    def _feed(self, text: str) -> None:
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        for line in lines:
            self._line(line + "\n")

    def _line(self, line: str) -> None:
        self.tail.append(line)
        if self._skip_rules:
            self._skip_rules -= line.startswith("====")
            return
        if self._held is not None:
            self._held.append(line)
            if line[:1] not in (" ", "\t", "\n") and not line.startswith(
                ("Traceback", "During handling", "The above exception")
            ):
                if "SignalException" in line and self.signalled:
                    pass
                elif "ChildFailedError" in line and self.explained():
                    self._skip_rules = 2  # its table follows, between two "====" rules
                else:
                    self._out("".join(self._held))
                self._held = None
        elif line.startswith("Traceback (most recent call last):"):
            self._held = [line]
        elif not self.signalled or ("death signal, shutting down workers" not in line and "closing signal" not in line):
            self._out(line)

    def _out(self, text: str) -> None:
        try:
            self.sink.write(text)
            self.sink.flush()
        except (OSError, ValueError):  # our terminal is gone (SIGHUP): keep following for the tail
            pass


def _die_with_parent() -> None:
    """In torchrun, before it runs: SIGTERM when the launcher dies, whatever kills it (Linux)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _launch_argv(cfg: LaunchConfig) -> list[str]:
    """The launcher's own flags as typed (the workers record them to print the resume command)."""
    argv = sys.argv[1:]
    n = len(cfg.command)
    if "launch" in argv and n and argv[len(argv) - n :] == cfg.command:
        flags = argv[argv.index("launch") + 1 : len(argv) - n]
        if all(not a.startswith("--lang") and a != "--debug" for a in flags):
            return flags
    return [f"--nnodes={cfg.nnodes}", f"--gpus-per-node={cfg.gpus_per_node}", f"--master-port={cfg.master_port}"]


def _check_inner(cfg: LaunchConfig) -> int:
    """The inner command's flags through Aura's own parser (its usage, exit 2), before any worker."""
    env = {**os.environ, CHECK_ENV: "1"}
    return subprocess.run([sys.executable, "-m", "aura", *cfg.command], env=env).returncode


def _worker_codes(results: str) -> list[int]:
    codes = []
    for name in sorted(os.listdir(results)) if os.path.isdir(results) else []:
        try:
            with open(os.path.join(results, name), encoding="utf-8") as f:
                codes.append(int(f.read().strip()))
        except (OSError, ValueError):
            continue
    return codes


def _explained(codes: list[int], cfg: LaunchConfig) -> bool:
    """Every worker of this node reported how it ended: a user error (2) or a stop with a checkpoint (3)."""
    return len(codes) == cfg.gpus_per_node and all(c in (2, EXIT_INTERRUPTED) for c in codes)


def launch(cfg: LaunchConfig) -> int:
    code = _check_inner(cfg)
    if code != 0 or any(a in ("-h", "--help") for a in cfg.command):  # its usage, or its help, once
        return code
    if cfg.nnodes > 1 and cfg.master_addr in ("127.0.0.1", "localhost") and cfg.rdzv_backend == "static":
        console.warn(M("loopback", nnodes=cfg.nnodes, addr=cfg.master_addr))
    rdzv = cfg.rdzv_backend if cfg.rdzv_backend == "static" else f"c10d ({cfg.rdzv_id})"
    console.info(
        M(
            "job",
            node_rank=cfg.node_rank,
            nnodes=cfg.nnodes,
            gpus=cfg.gpus_per_node,
            addr=cfg.master_addr,
            port=cfg.master_port,
            rdzv=rdzv,
        )
    )
    cmd = torchrun_command(cfg)
    console.info(M("command", cmd=shlex.join(cmd)))
    if cfg.share_gpu:
        console.info(M("share_gpu", var=SHARE_GPU_ENV))
    if cfg.dry_run:
        return 0
    with tempfile.TemporaryDirectory(prefix="aura-launch-") as tmp:
        return _run(cfg, cmd, tmp)


def _run(cfg: LaunchConfig, cmd: list[str], tmp: str) -> int:
    """torchrun in a session of its own, its stderr followed, signals passed on once (module docstring)."""
    import psutil

    results = os.path.join(tmp, "results")
    os.mkdir(results)
    job_env = {k: os.environ[k] for k in JOB_ENV_VARS if os.environ.get(k, "").strip()}
    env = {**os.environ, LAUNCH_ENV: json.dumps({"argv": _launch_argv(cfg), "env": job_env, "results": results})}
    if cfg.share_gpu:
        env[SHARE_GPU_ENV] = "1"
    env.setdefault("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", str(SHUTDOWN_TIMEOUT_S))  # time to write a checkpoint
    log = os.path.join(tmp, "stderr")
    writer = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    reader = open(log, "rb")
    os.unlink(log)  # nothing left behind, whatever happens to the launcher
    tail: collections.deque = collections.deque(maxlen=400)
    follow = _Follow(reader, sys.stderr, tail, explained=lambda: _explained(_worker_codes(results), cfg))
    try:
        proc = subprocess.Popen(
            cmd,
            stderr=writer,
            env=env,
            start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )
    finally:
        os.close(writer)
    follow.thread.start()
    received: list[int] = []

    def forward(signum, _frame) -> None:
        received.append(signum)
        if len(received) == 1:
            follow.signalled = True
            try:
                console.warn(M("forwarding", name=signal.Signals(signum).name))
            except OSError:
                pass
            proc.send_signal(signal.SIGINT if signum == signal.SIGINT else signal.SIGTERM)
        elif signum == signal.SIGINT:  # a second Ctrl+C: straight to the workers, which abort
            try:
                for child in psutil.Process(proc.pid).children():
                    child.send_signal(signal.SIGINT)
            except psutil.Error:
                pass

    handled = [signal.SIGINT, signal.SIGTERM] + (
        [signal.SIGHUP] if hasattr(signal, "SIGHUP") and signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN else []
    )
    previous = {sig: signal.signal(sig, forward) for sig in handled}
    try:
        code = proc.wait()
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        follow.done.set()
        follow.thread.join(timeout=10)
        reader.close()
    codes = _worker_codes(results)
    if received:
        if codes and all(c == EXIT_INTERRUPTED for c in codes):
            console.info(M("stopped"))
            return EXIT_INTERRUPTED
        if codes and any(c not in (0, EXIT_INTERRUPTED) for c in codes):
            return max(codes, key=lambda c: (c == 130, c))
        return 130 if received[0] == signal.SIGINT else 128 + int(received[0])
    if code != 0 and _explained(codes, cfg):
        return max(codes)  # 2: the workers' own message says what to change; no torchrun diagnosis
    if code != 0:
        lines = diagnose(
            "".join(tail), addr=cfg.master_addr, port=cfg.master_port, expected=cfg.nnodes * cfg.gpus_per_node
        )
        hint = "".join(f"\n  - {line}" for line in lines)
        console.error(M("exit", code=code) + (f"\n{M('hint')}{hint}" if lines else ""))
    return code
