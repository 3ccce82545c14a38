"""``aura launch <command> [its flags]``: start torchrun on this node from the cluster's environment.

The contract of the original Docker guide's ``ddp_launch.sh``: ``NNODES``, ``NODE_RANK``,
``MASTER_ADDR``, ``MASTER_PORT`` and ``GPUS_PER_NODE`` describe the job (flags override them), and
every node runs the same command with its own ``NODE_RANK``. It runs
``python -m torch.distributed.run ... -m aura <command>``, prints that exact command, passes its output
through, returns torchrun's exit status and, on failure, says what to check.
"""

from __future__ import annotations

import collections
import os
import shlex
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import Literal

from aura.core import console
from aura.core.config import arg
from aura.cluster.diagnose import diagnose
from aura.core.errors import AuraError
from aura.core.i18n import Messages

M = Messages("dist_launch", {
    "no_command": ("Falta el comando que lanzar, p. ej. 'aura launch pretrain --data DIR --output-dir "
                   "RUN' o 'aura launch check-dist'.",
                   "Missing the command to launch, e.g. 'aura launch pretrain --data DIR --output-dir "
                   "RUN' or 'aura launch check-dist'."),
    "bad_env": ("La variable de entorno {var}={value!r} no es un número entero; corrígela o usa {flag}.",
                "The environment variable {var}={value!r} is not an integer; fix it or use {flag}."),
    "bad_count": ("{name} debe ser al menos 1 (recibido {value}).",
                  "{name} must be at least 1 (got {value})."),
    "bad_rank": ("NODE_RANK={rank} está fuera de rango: con NNODES={nnodes} va de 0 a {last}.",
                 "NODE_RANK={rank} is out of range: with NNODES={nnodes} it goes from 0 to {last}."),
    "bad_port": ("MASTER_PORT={port} no es un puerto válido (1-65535).",
                 "MASTER_PORT={port} is not a valid port (1-65535)."),
    "bad_restarts": ("--max-restarts no puede ser negativo (recibido {value}).",
                     "--max-restarts cannot be negative (got {value})."),
    "loopback": ("NNODES={nnodes} con MASTER_ADDR={addr}: en un clúster real MASTER_ADDR debe ser la IP de "
                 "LAN del nodo 0 en todos los nodos.",
                 "NNODES={nnodes} with MASTER_ADDR={addr}: on a real cluster MASTER_ADDR must be node 0's "
                 "LAN IP on every node."),
    "job": ("Nodo {node_rank} de {nnodes} | {gpus:proceso|procesos} por nodo | maestro {addr}:{port} | "
            "rendezvous {rdzv}",
            "Node {node_rank} of {nnodes} | {gpus:process|processes} per node | master {addr}:{port} | "
            "rendezvous {rdzv}"),
    "command": ("Comando: {cmd}", "Command: {cmd}"),
    "exit": ("torchrun terminó con el código {code}.", "torchrun exited with status {code}."),
    "hint": ("Qué revisar:", "What to check:"),
})

ENV_VARS = ("NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "GPUS_PER_NODE")


def _env_int(var: str, flag: str) -> int | None:
    value = os.environ.get(var, "").strip()
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise AuraError(M("bad_env", var=var, value=value, flag=flag)) from None


def _default_gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 1


@dataclass
class LaunchConfig:
    command: list[str] = arg([], es="Comando de Aura y sus opciones (p. ej. pretrain --data DIR).",
                             en="Aura command and its flags (e.g. pretrain --data DIR).", remainder=True,
                             metavar="COMMAND")
    nnodes: int | None = arg(None, es="Número de nodos (por defecto $NNODES o 1).",
                             en="Number of nodes (default $NNODES or 1).")
    node_rank: int | None = arg(None, es="Rango de este nodo, 0..nnodes-1 (por defecto $NODE_RANK o 0).",
                                en="This node's rank, 0..nnodes-1 (default $NODE_RANK or 0).")
    master_addr: str | None = arg(None, es="IP del nodo 0 (por defecto $MASTER_ADDR o 127.0.0.1).",
                                  en="Node 0's IP (default $MASTER_ADDR or 127.0.0.1).")
    master_port: int | None = arg(None, es="Puerto del nodo 0 (por defecto $MASTER_PORT o 29500).",
                                  en="Node 0's port (default $MASTER_PORT or 29500).")
    gpus_per_node: int | None = arg(None, es="Procesos por nodo (por defecto $GPUS_PER_NODE, o las GPU "
                                    "CUDA visibles, o 1).",
                                    en="Processes per node (default $GPUS_PER_NODE, or the visible CUDA "
                                    "GPUs, or 1).")
    max_restarts: int = arg(0, es="Reinicios del grupo de procesos si uno falla (tolerancia a fallos; "
                            "reanuda del último checkpoint).",
                            en="Restarts of the worker group when one fails (fault tolerance; resumes "
                            "from the latest checkpoint).")
    rdzv_backend: Literal["static", "c10d"] = arg(
        "static", es="Rendezvous: static (NODE_RANK fijo) o c10d (elástico; rangos asignados al llegar).",
        en="Rendezvous: static (fixed NODE_RANK) or c10d (elastic; ranks assigned on arrival).")
    rdzv_endpoint: str | None = arg(None, es="host:puerto del rendezvous c10d (por defecto "
                                    "MASTER_ADDR:MASTER_PORT).",
                                    en="c10d rendezvous host:port (default MASTER_ADDR:MASTER_PORT).")
    rdzv_id: str = arg("aura", es="Identificador del trabajo (igual en todos los nodos).",
                       en="Job id (the same on every node).")
    rdzv_conf: str | None = arg(None, es="Opciones extra del rendezvous, p. ej. is_host=true.",
                                en="Extra rendezvous options, e.g. is_host=true.")
    rdzv_timeout: int | None = arg(None, es="Segundos de espera a que lleguen todos los nodos.",
                                   en="Seconds to wait for every node to join.")
    local_addr: str | None = arg(None, es="IP propia de este nodo (con varias interfaces de red).",
                                 en="This node's own IP (with several network interfaces).")
    dry_run: bool = arg(False, es="Solo imprime el comando torchrun.", en="Only print the torchrun command.")

    def __post_init__(self):
        if not self.command:
            raise AuraError(M("no_command"))
        if self.nnodes is None:
            self.nnodes = _env_int("NNODES", "--nnodes") or 1
        if self.node_rank is None:
            self.node_rank = _env_int("NODE_RANK", "--node-rank") or 0
        if self.master_addr is None:
            self.master_addr = os.environ.get("MASTER_ADDR", "").strip() or "127.0.0.1"
        if self.master_port is None:
            self.master_port = _env_int("MASTER_PORT", "--master-port") or 29500
        if self.gpus_per_node is None:
            self.gpus_per_node = _env_int("GPUS_PER_NODE", "--gpus-per-node") or _default_gpus()
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
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nnodes={cfg.nnodes}",
           f"--nproc_per_node={cfg.gpus_per_node}"]
    conf = [cfg.rdzv_conf] if cfg.rdzv_conf else []
    if cfg.rdzv_backend == "c10d":
        endpoint = cfg.rdzv_endpoint or f"{cfg.master_addr}:{cfg.master_port}"
        cmd += ["--rdzv_backend=c10d", f"--rdzv_endpoint={endpoint}", f"--rdzv_id={cfg.rdzv_id}"]
        if cfg.rdzv_timeout:
            conf.append(f"join_timeout={cfg.rdzv_timeout}")
    else:
        cmd += [f"--node_rank={cfg.node_rank}", f"--master_addr={cfg.master_addr}",
                f"--master_port={cfg.master_port}"]
        if cfg.rdzv_timeout:
            conf.append(f"timeout={cfg.rdzv_timeout}")
    if conf:
        cmd.append("--rdzv_conf=" + ",".join(conf))
    if cfg.local_addr:
        cmd.append(f"--local_addr={cfg.local_addr}")
    cmd.append(f"--max_restarts={cfg.max_restarts}")
    return cmd + ["-m", "aura", *cfg.command]


def _tee(stream, sink, tail: collections.deque) -> None:
    for line in stream:
        sink.write(line)
        sink.flush()
        tail.append(line)


def launch(cfg: LaunchConfig) -> int:
    if cfg.nnodes > 1 and cfg.master_addr in ("127.0.0.1", "localhost") and cfg.rdzv_backend == "static":
        console.warn(M("loopback", nnodes=cfg.nnodes, addr=cfg.master_addr))
    rdzv = cfg.rdzv_backend if cfg.rdzv_backend == "static" else f"c10d ({cfg.rdzv_id})"
    console.info(M("job", node_rank=cfg.node_rank, nnodes=cfg.nnodes, gpus=cfg.gpus_per_node,
                   addr=cfg.master_addr, port=cfg.master_port, rdzv=rdzv))
    cmd = torchrun_command(cfg)
    console.info(M("command", cmd=shlex.join(cmd)))
    if cfg.dry_run:
        return 0
    # stdout stays the terminal (progress bars keep working); stderr is copied through so that
    # torchrun's own errors (rendezvous, ports) can be diagnosed once it exits.
    tail: collections.deque = collections.deque(maxlen=400)
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, errors="replace", bufsize=1)
    reader = threading.Thread(target=_tee, args=(proc.stderr, sys.stderr, tail), daemon=True)
    reader.start()
    previous = signal.signal(signal.SIGTERM, lambda *_: proc.send_signal(signal.SIGTERM))
    try:
        while True:
            try:
                code = proc.wait()
                break
            except KeyboardInterrupt:  # torchrun got the same Ctrl+C; let it stop its workers
                continue
    finally:
        signal.signal(signal.SIGTERM, previous)
        reader.join(timeout=5)
    if code != 0:
        lines = diagnose("".join(tail), addr=cfg.master_addr, port=cfg.master_port,
                         expected=cfg.nnodes * cfg.gpus_per_node)
        hint = "".join(f"\n  - {line}" for line in lines)
        console.error(M("exit", code=code) + (f"\n{M('hint')}{hint}" if lines else ""))
    return code
