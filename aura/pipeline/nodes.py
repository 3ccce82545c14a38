"""Several nodes: every node runs the same ``aura pipeline run NAME -o DIR`` with the environment of
``aura launch`` (NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT, GPUS_PER_NODE). Where each stage runs:

* ``all``: a stage launched on more than one node (``launch:``) runs on every node through torchrun;
  under DDP global rank 0 writes its checkpoints, ``final/`` and logs (on node 0), under FSDP2 every rank
  writes its own DCP shards;
* ``every``: a single-process stage that a multi-node stage needs (tokenizer, prepare: what its ranks read
  on their own node) runs on every node, deterministically, into that node's DIR;
* ``main``: every other single-process stage (eval, export, the stages after the multi-node one) runs on
  node 0 alone, which holds the trained model; the other nodes say so in one line and record it as
  ``elsewhere``.

Each node keeps its own state file (node 0 ``pipeline.json``, which the report and Studio read; node K
``pipeline.node-K.json``), so a rerun after a kill resumes on every node from its own record. When DIR is
one shared folder (NFS) for all nodes, an ``every`` stage is written under a lock (``.STAGE.stage-lock``):
the first node to take it makes the stage, the others wait, then take the result when its fingerprint is
theirs (``made_by``) instead of writing the folder a second time. Nothing here schedules anything: the
chain stays linear and each node walks it in order.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from aura.core import console
from aura.core.atomic import TMP_PREFIX
from aura.core.errors import AuraError
from aura.core.i18n import Messages
from aura.core.locks import FileLock
from aura.pipeline.pipeline_state import FINISHED, STATE_FILE
from aura.pipeline.spec import Pipeline

M = Messages(
    "pipeline.nodes",
    {
        "layout": (
            "Nodo {rank} de {n}: {all} en todos los nodos (torchrun); {every} en cada nodo; {main} en el nodo 0.",
            "Node {rank} of {n}: {all} on every node (torchrun); {every} on each node; {main} on node 0.",
        ),
        "elsewhere": (
            "[{i}/{n}] {stage}: se ejecuta en el nodo 0 (etapa de un proceso); nada que hacer en el nodo {rank}.",
            "[{i}/{n}] {stage}: runs on node 0 (a single-process stage); nothing to do on node {rank}.",
        ),
        "waiting": (
            "[{i}/{n}] {stage}: la está escribiendo otro nodo en esta carpeta compartida (pid {pid} en "
            "{host}); se espera a que termine.",
            "[{i}/{n}] {stage}: another node is writing it in this shared folder (pid {pid} on {host}); "
            "waiting for it to finish.",
        ),
        "adopted": (
            "[{i}/{n}] {stage}: la hizo el nodo {node} en esta carpeta compartida con las mismas opciones "
            "y entradas; se usa tal cual.",
            "[{i}/{n}] {stage}: node {node} made it in this shared folder with the same options and "
            "inputs; used as it is.",
        ),
        "diverged": (
            "{stage}: el nodo {node} la hizo en esta carpeta compartida durante esta ejecución con otras "
            "opciones o entradas (huella {theirs}, aquí {ours}). Todos los nodos deben ejecutar el mismo "
            "pipeline con los mismos archivos (mismas rutas, tamaños y fechas) y los mismos --set.",
            "{stage}: node {node} made it in this shared folder during this run with other options or "
            "inputs (fingerprint {theirs}, here {ours}). Every node must run the same pipeline with the "
            "same files (same paths, sizes and dates) and the same --set.",
        ),
        "node_done": (
            "Nodo {rank}: sus etapas del pipeline terminaron en {path}; el modelo y el informe están en "
            "la carpeta del nodo 0.",
            "Node {rank}: its pipeline stages finished in {path}; the model and the report are in node 0's folder.",
        ),
    },
)

ALL, EVERY, MAIN, LOCAL = "all", "every", "main", "local"
NODE_STATE = "pipeline.node-{rank}.json"


@dataclass
class Layout:
    nnodes: int = 1
    node_rank: int = 0
    where: dict[str, str] = field(default_factory=dict)  # stage -> all | every | main | local

    @property
    def multi(self) -> bool:
        return self.nnodes > 1

    @property
    def state_file(self) -> str:
        return NODE_STATE.format(rank=self.node_rank) if self.node_rank else STATE_FILE


def layout(pipeline: Pipeline) -> Layout:
    """Where each stage runs (the module's docstring); every stage ``local`` on one node."""
    multi = [s for s in pipeline.stages if s.nnodes > 1]
    if not multi:
        return Layout(where={s.name: LOCAL for s in pipeline.stages})
    where: dict[str, str] = {s.name: ALL for s in multi}
    needed = {r for s in multi for r in s.refs}
    for stage in reversed(pipeline.stages):  # what a multi-node stage reads, and what that reads
        if stage.name in needed:
            needed.update(stage.refs)
    for stage in pipeline.stages:
        where.setdefault(stage.name, EVERY if stage.name in needed else MAIN)
    return Layout(nnodes=multi[0].nnodes, node_rank=multi[0].node_rank, where=where)


def describe(lay: Layout) -> str:
    names = {k: ", ".join(s for s, w in lay.where.items() if w == k) or "–" for k in (ALL, EVERY, MAIN)}
    return M("layout", rank=lay.node_rank, n=lay.nnodes, all=names[ALL], every=names[EVERY], main=names[MAIN])


def is_pipeline_dir(out: Path) -> bool:
    """A pipeline's folder: node 0's state file or another node's."""
    return (out / STATE_FILE).is_file() or any(out.glob(NODE_STATE.format(rank="*")))


def in_passing(path: Path) -> bool:
    """What another node's run puts in the shared folder before its state file is there: the lock it holds, and
    that state file (or a disk probe) being written under ``aura.core.atomic``'s staging name. Not content: two
    nodes started together must not take each other's start for a foreign folder."""
    name = path.name
    return name.startswith(TMP_PREFIX) or (name.startswith(".") and name.endswith((".aura-lock", ".stage-lock")))


def _others(out: Path, lay: Layout) -> list[tuple[int, dict]]:
    """(node, state) of every other node's state file in ``out`` (only in a shared folder are there any)."""
    found = []
    for path in [out / STATE_FILE, *sorted(out.glob(NODE_STATE.format(rank="*")))]:
        if path.name == lay.state_file or not path.is_file():
            continue
        node = 0 if path.name == STATE_FILE else int(path.stem.rsplit("-", 1)[-1])
        try:
            found.append((node, json.loads(path.read_text(encoding="utf-8"))))
        except (OSError, ValueError, UnicodeDecodeError):
            continue
    return found


def stage_lock(out: Path, name: str, *, i: int, n: int) -> FileLock:
    """Hold the lock of stage ``name``'s folder, waiting (and saying so once) while another node writes it."""
    lock = FileLock(out / f".{name}.stage-lock", remove=True)
    holder = lock.acquire(wait_s=0.5, command=f"pipeline stage {name}")
    if holder is not None:
        console.always(M("waiting", i=i, n=n, stage=name, pid=holder.get("pid", "?"), host=holder.get("host", "?")))
        while lock.acquire(wait_s=3600.0, command=f"pipeline stage {name}") is not None:
            pass
    return lock


def made_elsewhere(out: Path, lay: Layout, name: str, fp: str, *, started: float) -> tuple[int, dict] | None:
    """(node, its record) when another node finished stage ``name`` in this shared folder with fingerprint
    ``fp``; an error when it did during this run (after ``started``) from other options or inputs."""
    if not (out / name).is_dir():
        return None
    for node, data in _others(out, lay):
        rec = (data.get("stages") or {}).get(name) or {}
        if rec.get("status") != FINISHED or rec.get("made_by") is not None:
            continue
        if rec.get("fingerprint") == fp:
            return node, rec
        if float(rec.get("finished_epoch") or 0.0) >= started:
            raise AuraError(M("diverged", stage=name, node=node, theirs=rec.get("fingerprint"), ours=fp))
    return None


def now_epoch() -> float:
    return time.time()
