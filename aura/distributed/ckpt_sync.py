"""Checkpoints on nodes that share no disk (a LAN of PCs, each with its own): node 0 is the store.

A multi-node run used to need one filesystem all nodes see (NFS), or the checkpoint copied by hand to
every node before a resume. Here the process group itself moves the files:

* **at save** (``collect_to_main``): whatever a rank wrote that rank 0 cannot see (an FSDP2 rank's DCP
  shard on its own disk) is sent to rank 0, which publishes one complete checkpoint; the sender drops its
  local copy. Node 0 then holds every checkpoint whole, as a shared disk would, for any strategy (DDP's
  rank 0 writes everything already; DCP's shards are gathered). It costs what a shared disk costs: the
  same bytes cross the LAN once (to an NFS server they would too).
* **at resume** (``fetch_checkpoint``): every rank compares its own copy with the checkpoint's list of
  files (``files.json``, written at save: name and size of each part); a file a node lacks is sent by a
  rank that holds it (rank 0, normally) to one rank of that node, which writes it atomically, the
  checkpoint's ``trainer_state.json`` last. A part no rank holds cannot be fetched: every rank is
  refused with the list of what is missing, before anything loads.

Why not "every node keeps the shards it needs": DCP reshards on resume (another world size reads other
slices of every file), and DDP's single writer has nothing on the other nodes; one complete copy on
node 0 serves both, and a copy a user made by hand (or a shared disk) is used as it is, nothing sent.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch

from aura.core.atomic import tmp_name
from aura.core.errors import AuraError
from aura.core.i18n import Messages
from aura.core.rundir import (
    MANIFEST_FILE as MANIFEST,
    STATE_FILE as STATE,  # written last: it marks a checkpoint whole
)
from aura.distributed.process import DistInfo

CHUNK = 16 << 20  # bytes per broadcast: bounded memory whatever the checkpoint's size

M = Messages(
    "ckpt_sync",
    {
        "missing": (
            "No se puede reanudar desde {path}: ningún nodo tiene {count} de sus partes, así que no se "
            "pueden enviar por la red:\n{files}\nCópialas desde donde estén (el nodo 0 guarda los "
            "checkpoints completos) o reanuda desde otro checkpoint (--resume-from RUTA/checkpoint-step-N).",
            "Cannot resume from {path}: no node holds {count} of its parts, so they cannot be sent over "
            "the network:\n{files}\nCopy them from wherever they are (node 0 keeps whole checkpoints) or "
            "resume from another checkpoint (--resume-from PATH/checkpoint-step-N).",
        ),
        "line": ("  - {file} (falta en: {where})", "  - {file} (missing on: {where})"),
        "fetched": (
            "Checkpoint {path}: {count:fichero recibido|ficheros recibidos} ({size}) del rango {src} por "
            "la red (este nodo no los tenía).",
            "Checkpoint {path}: {count:file|files} ({size}) received from rank {src} over the network (this node "
            "lacked them).",
        ),
    },
)


def listing(directory: Path) -> dict[str, int]:
    """Every regular file under ``directory``: relative POSIX path -> size (no link is followed)."""
    directory = Path(directory)
    out: dict[str, int] = {}
    if not directory.is_dir():
        return out
    for root, dirs, files in os.walk(directory):
        dirs[:] = [d for d in dirs if not d.startswith(".tmp-")]
        for name in files:
            p = Path(root) / name
            if name.startswith(".tmp-") or p.is_symlink() or not p.is_file():
                continue
            out[p.relative_to(directory).as_posix()] = p.stat().st_size
    return out


def write_manifest(directory: Path) -> None:
    """``files.json``: the name and size of every part (``trainer_state.json``, written after it, aside)."""
    from aura.core.atomic import atomic_write_json

    files = {k: v for k, v in listing(directory).items() if k not in (MANIFEST, STATE)}
    atomic_write_json(Path(directory) / MANIFEST, {"files": dict(sorted(files.items()))})


def _send(rel: str, size: int, *, src: int, source: Path | None, dest: Path | None, dist: DistInfo) -> None:
    """Broadcast one file from rank ``src`` (reading ``source/rel``); ranks given ``dest`` write it there
    (a temporary name first, renamed once whole). Collective: every rank calls it with the same rel/size."""
    target = tmp = None
    if dest is not None:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.parent / tmp_name(target.name)
    reader = open(source / rel, "rb") if dist.rank == src else None
    writer = open(tmp, "wb") if tmp is not None else None
    try:
        done = 0
        while done < size:
            n = min(CHUNK, size - done)
            buf = torch.empty(n, dtype=torch.uint8)
            if reader is not None:
                buf = torch.frombuffer(bytearray(reader.read(n)), dtype=torch.uint8)
            moved = buf.to(dist.comm_device)
            torch.distributed.broadcast(moved, src=src)
            if writer is not None:
                writer.write(moved.cpu().numpy().tobytes())
            done += n
        if writer is not None:
            writer.flush()
            os.fsync(writer.fileno())
    finally:
        for f in (reader, writer):
            if f is not None:
                f.close()
    if tmp is not None:
        os.replace(tmp, target)


def collect_to_main(local: Path, *, dist: DistInfo) -> None:
    """At save (collective): files under this rank's ``local`` staging dir that rank 0 does not see in its
    own are sent to rank 0; a rank whose files had to be sent removes its local copy afterwards."""
    if not dist.is_distributed:
        return
    views = [None] * dist.world_size
    torch.distributed.all_gather_object(views, listing(local))
    plan: list[tuple[str, int, int]] = []  # (file, size, the lowest rank holding it)
    for rank in range(1, dist.world_size):
        for rel, size in views[rank].items():
            if rel not in views[0] and all(p[0] != rel for p in plan):
                plan.append((rel, size, rank))
    for rel, size, src in plan:
        _send(rel, size, src=src, source=Path(local), dest=Path(local) if dist.is_main else None, dist=dist)
    if not dist.is_main and any(rel in views[dist.rank] for rel, _, _ in plan):
        shutil.rmtree(local, ignore_errors=True)  # this node's disk is not node 0's: its copy is there now
    dist.barrier()


def share_resume(out: Path, resume_from: str | None, *, dist: DistInfo) -> None:
    """Before rank 0 picks the checkpoint to resume (collective): when another node holds it and rank 0's
    does not (with c10d, ranks are numbered by arrival: the node that saved may not be rank 0's now), it is
    sent to every node that lacks it first. ``resume_from``: ``latest`` (the newest complete checkpoint of
    any node's ``out``, by step) or a path; None (a torchrun restart) is ``latest``."""
    from aura.core.rundir import latest_checkpoint, read_state

    if not dist.is_distributed:
        return
    latest = not resume_from or resume_from == "latest"
    mine = None
    if latest:
        path = latest_checkpoint(out)
        state = read_state(path) if path is not None else None
        if state is not None:
            mine = (int(state.get("step", -1)), float(state.get("saved_at") or 0), path.name)
    elif (Path(resume_from) / STATE).is_file():
        mine = (0, 0.0, _digest(Path(resume_from) / STATE))
    views = [None] * dist.world_size
    torch.distributed.all_gather_object(views, mine)
    # latest: the newest by (step, save time); a path: rank 0's copy when it has one, else the first holder's
    best = (
        max((v for v in views if v is not None), default=None)
        if latest
        else next((v for v in views if v is not None), None)
    )
    if best is None or views[0] == best:
        return
    holder = views.index(best)
    fetch_checkpoint(Path(out) / best[2] if latest else Path(resume_from), dist=dist, authority=holder)


def fetch_checkpoint(local: Path, *, dist: DistInfo, authority: int = 0) -> None:
    """At resume (collective): give every node the checkpoint's files it lacks, or refuse every rank with
    the list of parts no rank holds (see the module docstring). ``local`` is this rank's path to it;
    ``authority`` the rank whose copy is whole (its ``files.json`` and state file say what the others need)."""
    from aura.core import console
    from aura.core.atomic import human_bytes

    if not dist.is_distributed:
        return
    local = Path(local)
    mine, digest = listing(local), _digest(local / STATE)
    box = [(_wanted(local, mine), digest) if dist.rank == authority else None]
    torch.distributed.broadcast_object_list(box, src=authority)
    wanted, state_digest = box[0]
    seen = [None] * dist.world_size
    torch.distributed.all_gather_object(seen, (dist.node, str(local.resolve()), mine, digest))
    lacking: dict[str, list[int]] = {}  # file -> ranks without it (a wrong size counts as without)
    for rank, (_, _, files, their_digest) in enumerate(seen):
        other_save = their_digest is not None and their_digest != state_digest  # same name, another save
        for rel, size in wanted.items():
            if other_save or files.get(rel) != size:
                lacking.setdefault(rel, []).append(rank)
    if not lacking:
        return
    ranks_first = [authority] + [r for r in range(dist.world_size) if r != authority]
    holders = {rel: [r for r in ranks_first if r not in ranks] for rel, ranks in lacking.items()}
    lost = sorted(rel for rel, h in holders.items() if not h)
    if lost:
        where = {rel: ", ".join(dict.fromkeys(f"{seen[r][0]}:{seen[r][1]}" for r in lacking[rel])) for rel in lost}
        raise AuraError(
            M(
                "missing",
                path=local,
                count=len(lost),
                files="\n".join(M("line", file=rel, where=where[rel]) for rel in lost),
            )
        )
    # one writer per copy (host, path): the lowest rank of it; the state file last (it marks the copy whole)
    writers = {}
    for rank, (host, path, _, _) in enumerate(seen):
        writers.setdefault((host, path), rank)
    write_here = writers[(dist.node, str(local.resolve()))] == dist.rank
    if write_here and digest is not None and digest != state_digest:
        (local / STATE).unlink()  # the copy is incomplete from here until its new state file lands
    order = sorted(lacking, key=lambda rel: (rel == STATE, rel))
    got: list[str] = []
    for rel in order:
        dest = local if (write_here and dist.rank in lacking[rel]) else None
        _send(rel, wanted[rel], src=holders[rel][0], source=local, dest=dest, dist=dist)
        if dest is not None:
            got.append(rel)
    if got:
        console.always(
            M(
                "fetched",
                path=local,
                count=len(got),
                size=human_bytes(sum(wanted[r] for r in got)),
                src=", ".join(map(str, sorted({holders[r][0] for r in got}))),
            )
        )
    dist.barrier()


def _digest(file: Path) -> str | None:
    """sha256 of a small file (the state file: its saved_at tells one save from another), or None."""
    import hashlib

    try:
        return hashlib.sha256(file.read_bytes()).hexdigest()
    except OSError:
        return None


def _wanted(local: Path, mine: dict[str, int]) -> dict[str, int]:
    """What a whole copy holds: every file of the whole copy (``mine``, the authority's) and every part its
    ``files.json`` names, even one the authority has lost (then no rank may hold it: a refusal)."""
    try:
        listed = json.loads((local / MANIFEST).read_text(encoding="utf-8"))["files"]
        named = {str(k): int(v) for k, v in listed.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):  # an older Aura's checkpoint
        named = {}
    return {**named, **mine}
