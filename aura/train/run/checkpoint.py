"""Atomic, resumable checkpoints: ``RUN_DIR/checkpoint-step-N/`` (format in docs/architecture.md).

A checkpoint is built under ``.tmp-*`` by ``staged_dir`` and renamed into place only once complete,
so a crash, kill -9 or full disk at any instant leaves the previous checkpoint intact and never a half
one under a real name. Rank 0 owns the staged directory and broadcasts its path; every rank then
writes its part through a ``CheckpointIO`` strategy and reports success before rank 0 publishes it.

``CheckpointIO`` is the seam for sharded training: ``FullStateIO`` (implemented here) serves single
process and DDP (rank 0 writes full tensors, every rank reads them). An FSDP2 strategy writes a
``dcp/`` directory with torch.distributed.checkpoint from every rank through the same four methods.
"""

from __future__ import annotations

import errno
import json
import random
import shutil
from pathlib import Path
from typing import Any, Callable, Protocol

import numpy as np
import torch

from aura.core.atomic import atomic_write_json, human_bytes, tmp_name
from aura.core.errors import AuraError
from aura.core.i18n import Messages
from aura.core.rundir import STATE_FILE, CheckpointRef, latest_checkpoint, list_checkpoints  # noqa: F401 (re-exported)
from aura.core.staging import staged_dir
from aura.distributed import DistInfo
from aura.distributed.ckpt_sync import collect_to_main, write_manifest
from aura.train.run.ckpt_check import check_checkpoint, check_latest, check_state, load_pt

M = Messages(
    "checkpoint",
    {
        "disk_full": (
            "No queda espacio en disco para guardar {path} ({err}). El checkpoint anterior sigue "
            "intacto{previous}. Libera espacio o usa --keep-last más bajo y reanuda con --resume-from latest.",
            "No disk space left to save {path} ({err}). The previous checkpoint is intact{previous}. "
            "Free some space or lower --keep-last, then resume with --resume-from latest.",
        ),
        "write_failed": (
            "No se pudo guardar el checkpoint {path}: {err}. El checkpoint anterior sigue intacto.",
            "Could not save checkpoint {path}: {err}. The previous checkpoint is intact.",
        ),
        "rank_failed": (
            "Otro proceso no pudo escribir su parte del checkpoint {path}.",
            "Another rank failed to write its part of checkpoint {path}.",
        ),
        "not_checkpoint": (
            "{path} no es un checkpoint de Aura completo (falta trainer_state.json).",
            "{path} is not a complete Aura checkpoint (trainer_state.json is missing).",
        ),
        "no_latest": (
            "No hay ningún checkpoint completo en {path} para reanudar (una ejecución detenida antes de "
            "su primer checkpoint no deja nada que reanudar). Quita --resume-from: el mismo comando "
            "empieza de cero.",
            "There is no complete checkpoint in {path} to resume from (a run stopped before its first "
            "checkpoint leaves nothing to resume). Drop --resume-from: the same command starts over.",
        ),
        "saved": ("Checkpoint guardado: {path} ({size})", "Checkpoint saved: {path} ({size})"),
        "full_into_fsdp": (
            "El checkpoint {path} se guardó sin FSDP (model.safetensors completo, de un solo "
            "proceso o de DDP) y esta ejecución reparte el modelo con FSDP2. Reanúdalo con "
            "--strategy ddp (o en un solo proceso). Los checkpoints FSDP (dcp/) sí se reanudan "
            "con cualquier estrategia y número de procesos.",
            "The checkpoint {path} was saved without FSDP (a full model.safetensors, from one "
            "process or DDP) and this run shards the model with FSDP2. Resume it with "
            "--strategy ddp (or on one process). FSDP checkpoints (dcp/) do resume under any "
            "strategy and number of ranks.",
        ),
        "sharded_refused": (
            "El checkpoint {path} es de FSDP (solo dcp/, sin model.safetensors) y esta ejecución no "
            "usa FSDP. Cargarlo requiere torch.distributed.checkpoint, que deserializa con pickle "
            "dcp/.metadata (Aura solo admite ahí las clases de metadatos de DCP y rechaza el resto). "
            "Si el checkpoint es tuyo o de "
            "una fuente de confianza, añade --load-sharded para cargarlo igualmente (se "
            "redistribuye a este número de procesos); si no, reanúdalo con --strategy fsdp "
            "(aura launch).",
            "The checkpoint {path} is an FSDP one (dcp/ only, no model.safetensors) and this run "
            "does not use FSDP. Loading it needs torch.distributed.checkpoint, which unpickles "
            "dcp/.metadata (Aura allows only DCP's own metadata classes there and refuses the rest). "
            "If the checkpoint is yours or comes "
            "from a trusted source, add --load-sharded to load it anyway (it is resharded to "
            "this number of processes); otherwise resume it with --strategy fsdp (aura launch).",
        ),
    },
)


class CheckpointIO(Protocol):
    """How model and optimizer state reach the disk. Every method is called on every rank.

    ``write(model, dir, state_dict)`` / ``read(model, dir)`` are the setup's hooks (full HF model or
    adapter); ``state_dict`` is None when the model's own ``state_dict()`` is the full one.
    """

    def save_model(self, model, directory: Path, *, dist: DistInfo, write: Callable) -> None:
        """A full, shareable model (``final/``)."""

    def save_state(self, model, optimizer, directory: Path, *, dist: DistInfo, write: Callable) -> None:
        """Resumable model + optimizer state in this strategy's format."""

    def load_state(self, model, optimizer, directory: Path, *, dist: DistInfo, read: Callable) -> None:
        """The inverse of ``save_state`` (``optimizer=None``: weights only)."""


def unwrap_model(model):
    """The plain model under DDP / torch.compile wrappers (FSDP2 shards in place)."""
    from aura.distributed import unwrap

    return unwrap(model)


class FullStateIO:
    """Single process and DDP: full tensors, written by rank 0 and read by every rank."""

    def save_model(self, model, directory, *, dist, write):
        if dist.is_main:
            write(unwrap_model(model), directory, None)

    def save_state(self, model, optimizer, directory, *, dist, write):
        if dist.is_main:
            write(unwrap_model(model), directory, None)
            save_pt(optimizer.state_dict(), directory / "optimizer.pt")

    def load_state(self, model, optimizer, directory, *, dist, read):
        # Never through DCP (it unpickles dcp/.metadata): an FSDP checkpoint needs load_checkpoint's
        # explicit allow_sharded (--load-sharded).
        if is_sharded_only(directory):
            raise AuraError(M("sharded_refused", path=directory))
        read(unwrap_model(model), directory)
        if optimizer is not None:
            optimizer.load_state_dict(load_pt(directory / "optimizer.pt", map_location="cpu"))


class ShardedStateIO:
    """FSDP2: every rank writes its shards with torch.distributed.checkpoint into ``dcp/``;
    ``final/`` gets the full weights gathered on rank 0."""

    def save_model(self, model, directory, *, dist, write):
        from aura.distributed.sharded import full_state_dict

        state = full_state_dict(model, dist=dist)
        if dist.is_main:
            write(unwrap_model(model), directory, state)

    def save_state(self, model, optimizer, directory, *, dist, write):
        from aura.distributed.sharded import save_sharded

        save_sharded(directory / "dcp", model=model, optimizer=optimizer, dist=dist)

    def load_state(self, model, optimizer, directory, *, dist, read):
        from aura.distributed.sharded import load_sharded

        if not _is_sharded(directory) and (directory / STATE_FILE).is_file():
            raise AuraError(M("full_into_fsdp", path=directory))
        load_sharded(directory / "dcp", model=model, optimizer=optimizer, dist=dist)


def _is_sharded(directory: Path) -> bool:
    """A checkpoint written by ShardedStateIO (``dcp/.metadata``) rather than full tensors."""
    return (Path(directory) / "dcp" / ".metadata").is_file()


def is_sharded_only(directory: Path) -> bool:
    """An FSDP checkpoint: DCP shards and no full-state weights beside them."""
    directory = Path(directory)
    full = any(
        (directory / n).is_file()
        for n in ("model.safetensors", "model.safetensors.index.json", "adapter_model.safetensors")
    )
    return _is_sharded(directory) and not full


def io_for(model) -> CheckpointIO:
    """The checkpoint strategy matching how ``model`` was parallelised."""
    from aura.distributed import strategy_of

    return ShardedStateIO() if strategy_of(model) == "fsdp" else FullStateIO()


# ---- RNG ---------------------------------------------------------------------------------------


def capture_rng() -> dict[str, Any]:
    """Python, numpy, torch and CUDA RNG states as tensors and plain containers (weights_only-safe)."""
    np_state = np.random.get_state()
    state: dict[str, Any] = {
        "python": list(random.getstate()[1]) + [random.getstate()[0]],
        "python_gauss": random.getstate()[2],
        "numpy": {
            "keys": torch.from_numpy(np.asarray(np_state[1]).astype(np.int64)),
            "pos": int(np_state[2]),
            "has_gauss": int(np_state[3]),
            "gauss": float(np_state[4]),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    py = state["python"]
    random.setstate((py[-1], tuple(py[:-1]), state["python_gauss"]))
    n = state["numpy"]
    np.random.set_state(("MT19937", n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        for index, cuda_state in cuda_states_to_restore(state["cuda"], torch.cuda.device_count()):
            torch.cuda.set_rng_state(cuda_state, index)


def cuda_states_to_restore(states: list, device_count: int) -> list[tuple[int, Any]]:
    """(device index, state) for the devices visible now: a checkpoint saved with more GPUs visible resumes
    with fewer (set_rng_state_all would fail on the missing ones); extra visible GPUs keep their seed."""
    return list(enumerate(states[:device_count]))


def library_versions() -> dict[str, str]:
    import importlib.metadata as md

    from aura import __version__

    out = {"aura": __version__, "torch": torch.__version__}
    for pkg in ("transformers", "tokenizers", "safetensors", "peft", "numpy"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    return out


# ---- listing -----------------------------------------------------------------------------------


def resolve_resume(value: str, run_dir: str | Path) -> Path:
    """``latest`` -> newest complete checkpoint of ``run_dir``; a path -> that checkpoint (checked)."""
    if value == "latest":
        path = latest_checkpoint(run_dir)
        if path is None:
            raise AuraError(M("no_latest", path=run_dir))
        check_latest(Path(run_dir), path)
    else:
        path = Path(value)
        if path.is_dir() and not (path / STATE_FILE).is_file() and latest_checkpoint(path):
            path = latest_checkpoint(path)  # a run dir was given: take its newest checkpoint
        elif not (path / STATE_FILE).is_file():
            raise AuraError(M("not_checkpoint", path=path))
    check_checkpoint(path)  # damage is found here, before the run dir is touched
    return path


def read_state(path: str | Path) -> dict:
    path = Path(path)
    if not (path / STATE_FILE).is_file():
        raise AuraError(M("not_checkpoint", path=path))
    return check_state(path)


def prune(run_dir: str | Path, keep_last: int) -> list[Path]:
    """Keep the ``keep_last`` most recently saved step/interrupt checkpoints (epoch checkpoints are kept).

    Save order, not step order: the run dir holds one branch (``--fork`` moves later checkpoints of an
    abandoned branch aside), and ``saved_at`` (trainer_state.json) only grows within it.
    """
    if keep_last <= 0:
        return []
    refs = sorted(
        (r for r in list_checkpoints(run_dir) if r.kind != "checkpoint-epoch"), key=lambda r: (r.saved, r.step)
    )
    doomed = [r.path for r in refs[:-keep_last]]
    for p in doomed:
        # Rename first so a crash half-way through rmtree leaves a .tmp- dir nobody takes as complete.
        tmp = p.parent / tmp_name(f"del-{p.name}")
        p.rename(tmp)
        shutil.rmtree(tmp, ignore_errors=True)
    return doomed


def clean_staging(run_dir: str | Path) -> list[Path]:
    """Remove this run's stale staging entries (``.tmp-`` checkpoints, final/, logs of a writer that is
    gone); anything else in the directory, a live writer's entries included, is left alone."""
    from aura.core.rundir import staging_prefixes
    from aura.core.staging import remove_stale_tmp

    return remove_stale_tmp(run_dir, prefix=staging_prefixes())


def next_saved_at(run_dir: str | Path) -> float:
    """Wall-clock time of a new save, never earlier than a checkpoint already in ``run_dir``."""
    import time

    return max([time.time()] + [r.saved + 1e-3 for r in list_checkpoints(run_dir)])


# ---- save / load -------------------------------------------------------------------------------

ENGINE_STATE = "scaler.pt"  # the step engine's state; the name every Aura checkpoint has used


def save_checkpoint(
    path: Path,
    *,
    model,
    optimizer,
    engine_state: dict | None,
    trainer_state: dict,
    dist: DistInfo,
    io: CheckpointIO,
    write_model: Callable,
    write_extras: Callable[[Path], None] | None,
    extra_state: dict | None = None,
) -> Path:
    """Write a complete checkpoint at ``path`` atomically (collective: call on every rank).

    ``engine_state``: the step engine's own state (``aura.train.optim.step_engine``: the fp16 GradScaler's), saved
    as ``scaler.pt`` when not empty."""
    rng = capture_rng()
    all_rng = [rng]
    if dist.is_distributed:
        all_rng = [None] * dist.world_size
        torch.distributed.all_gather_object(all_rng, rng)
    previous = latest_checkpoint(path.parent) if dist.is_main else None
    try:
        if dist.is_main:
            with staged_dir(path, replace=True, kind="checkpoint") as tmp:
                dist.broadcast_object(str(tmp))
                _write_parts(
                    tmp, model=model, optimizer=optimizer, dist=dist, io=io, write_model=write_model, path=path
                )
                collect_to_main(tmp, dist=dist)  # another node's DCP shards, when it has its own disk
                for r, state in enumerate(all_rng):
                    (tmp / "rng").mkdir(exist_ok=True)
                    save_pt(state, tmp / "rng" / f"rank-{r}.pt")
                if engine_state:
                    save_pt(engine_state, tmp / ENGINE_STATE)
                if extra_state:
                    save_pt(extra_state, tmp / "extra_state.pt")
                if write_extras is not None:
                    write_extras(tmp)
                state = dict(
                    trainer_state,
                    world_size=dist.world_size,
                    versions=library_versions(),
                    saved_at=next_saved_at(path.parent),
                )
                write_manifest(tmp)  # every part and its size: what a node without it fetches at resume
                atomic_write_json(tmp / STATE_FILE, state)  # last: marks the content complete
        else:
            # rank 0's staging name under this node's own run dir: the same dir on a shared disk, this
            # node's own folder (another path, another disk) on a LAN without one
            tmp = path.parent / Path(dist.broadcast_object(None)).name
            _write_parts(tmp, model=model, optimizer=optimizer, dist=dist, io=io, write_model=write_model, path=path)
            collect_to_main(tmp, dist=dist)
    except (OSError, RuntimeError) as e:
        _raise_write_error(e, path, previous)
    dist.barrier()
    return path


def save_pt(obj, path: Path) -> None:
    """torch.save through a Python file, so a full disk surfaces as OSError(ENOSPC) in the chain."""
    with open(path, "wb") as f:
        torch.save(obj, f)


def _raise_write_error(e: BaseException, path: Path, previous: Path | None) -> None:
    """Disk full (anywhere in the exception chain) or another OS error -> AuraError; else re-raise."""
    chain, seen = e, set()
    while chain is not None and id(chain) not in seen:
        seen.add(id(chain))
        if (isinstance(chain, OSError) and chain.errno == errno.ENOSPC) or "No space left" in str(chain):
            prev = f" ({previous})" if previous else ""
            raise AuraError(M("disk_full", path=path, err="ENOSPC", previous=prev)) from None
        chain = chain.__cause__ or chain.__context__
    if isinstance(e, OSError):
        raise AuraError(M("write_failed", path=path, err=e)) from None
    raise e


def _write_parts(tmp: Path, *, model, optimizer, dist, io, write_model, path: Path) -> None:
    """Every rank writes its part, then all agree it worked (a failure on any rank aborts all)."""
    try:
        io.save_state(model, optimizer, tmp, dist=dist, write=write_model)
    except Exception:
        _check_all_ranks(dist, ok=False, path=path)
        raise
    _check_all_ranks(dist, ok=True, path=path)


def _check_all_ranks(dist: DistInfo, *, ok: bool, path: Path) -> None:
    if not dist.is_distributed:
        return
    flag = torch.tensor([1 if ok else 0], dtype=torch.int32, device=dist.comm_device)
    dist.all_reduce(flag, "min")
    if int(flag.item()) == 0 and ok:
        raise AuraError(M("rank_failed", path=path))


def load_checkpoint(
    path: Path,
    *,
    model,
    optimizer,
    engine,
    dist: DistInfo,
    io: CheckpointIO,
    read_model: Callable,
    restore_rng_state: bool = True,
    allow_sharded: bool = False,
) -> tuple[dict, dict | None]:
    """Restore model, optimizer, the step engine's state (``engine.load_state_dict``) and RNG from
    ``path``; returns (trainer_state, extra_state).

    ``allow_sharded`` (--load-sharded): an FSDP checkpoint (dcp/) may be read through DCP into a run
    without FSDP. Otherwise DCP is used only by FSDP runs (ShardedStateIO).
    """
    from aura.core.paths import check_links

    check_links(path)  # every file a resume reads lies inside the checkpoint (no link leaving it)
    state = read_state(path)
    if allow_sharded and isinstance(io, FullStateIO) and is_sharded_only(path):
        io = ShardedStateIO()
    io.load_state(model, optimizer, path, dist=dist, read=read_model)
    if engine is not None and (path / ENGINE_STATE).is_file():
        engine.load_state_dict(load_pt(path / ENGINE_STATE))
    rng_file = path / "rng" / f"rank-{dist.rank}.pt"
    if restore_rng_state and rng_file.is_file():
        restore_rng(load_pt(rng_file))
    extra = None
    if (path / "extra_state.pt").is_file():
        extra = load_pt(path / "extra_state.pt")
    return state, extra


def checkpoint_size(path: Path) -> str:
    from aura.core.atomic import dir_size

    return human_bytes(dir_size(path))


def describe_differences(saved: dict, current: dict, *, prefix: str = "") -> list[str]:
    """``key: saved -> current`` for every differing leaf (for "this checkpoint is another model")."""
    out = []
    for key in sorted(set(saved) | set(current)):
        a, b = saved.get(key), current.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += describe_differences(a, b, prefix=f"{prefix}{key}.")
        elif json.dumps(a, default=str) != json.dumps(b, default=str):
            out.append(f"{prefix}{key}: {a} -> {b}")
    return out


def save_model_dir(
    path: Path,
    *,
    model,
    dist: DistInfo,
    io: CheckpointIO,
    write_model: Callable,
    write_extras: Callable[[Path], None] | None,
) -> Path:
    """Write a shareable model directory (``final/``, ``best/``: weights + extras, no optimizer) atomically.

    It replaces only an Aura model or adapter directory; its marker says which it is (a peft adapter
    has ``adapter_config.json``).
    """
    from aura.core import ownership

    try:
        if dist.is_main:
            if path.exists():
                ownership.check_replaceable(path, kind=("model", "adapter"))
            with staged_dir(path, replace=True) as tmp:
                dist.broadcast_object(str(tmp))
                _write_model_only(tmp, model=model, dist=dist, io=io, write_model=write_model, path=path)
                if write_extras is not None:
                    write_extras(tmp)
                ownership.write_marker(tmp, "adapter" if (tmp / "adapter_config.json").is_file() else "model")
        else:
            tmp = Path(dist.broadcast_object(None))
            _write_model_only(tmp, model=model, dist=dist, io=io, write_model=write_model, path=path)
    except (OSError, RuntimeError) as e:
        _raise_write_error(e, path, None)
    dist.barrier()
    return path


def _write_model_only(tmp: Path, *, model, dist, io, write_model, path: Path) -> None:
    try:
        io.save_model(model, tmp, dist=dist, write=write_model)
    except Exception:
        _check_all_ranks(dist, ok=False, path=path)
        raise
    _check_all_ranks(dist, ok=True, path=path)
