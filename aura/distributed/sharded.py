"""Checkpoints of FSDP2 (or DDP, or plain) models with torch.distributed.checkpoint (DCP).

``save_sharded`` writes every rank's shard of the model and optimizer in parallel into one directory;
``load_sharded`` reads it back into a model parallelised the same way or differently: DCP stores
global tensor shapes, so a run saved on 4 ranks resumes on 2 or on 1 (tested on 2 -> 1). On several
nodes without a shared disk, ``aura.distributed.ckpt_sync`` gathers the shards on node 0 at save and
sends each node what it lacks at resume.
``full_state_dict`` gathers the whole model on rank 0 for exporting ``final/`` as safetensors.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import torch

from aura.core.atomic import fsync_tree, tmp_name
from aura.core.errors import AuraError
from aura.core.i18n import Messages
from aura.distributed.process import DistInfo

M = Messages(
    "dist_sharded",
    {
        "missing": (
            "No hay un checkpoint distribuido en {path} (falta .metadata). ¿Se guardó con otra "
            "estrategia? Los checkpoints DDP se cargan con model.safetensors.",
            "There is no distributed checkpoint in {path} (.metadata is missing). Was it saved with "
            "another strategy? DDP checkpoints are loaded from model.safetensors.",
        ),
        "mismatch": (
            "El checkpoint distribuido {path} no encaja con este modelo: {err}. Reanuda con la misma "
            "arquitectura, el mismo --model-preset y los mismos adaptadores LoRA.",
            "The distributed checkpoint {path} does not match this model: {err}. Resume with the "
            "same architecture, --model-preset and LoRA adapters.",
        ),
    },
)


def _options(*, full: bool = False):
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=full, cpu_offload=full)


def save_sharded(
    path: str | os.PathLike, *, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None, dist: DistInfo
) -> Path:
    """Write model (+ optimizer) state to the directory ``path``, atomically, from every rank.

    The shards go to a ``.tmp-*`` sibling first; rank 0 renames it into place once all ranks have
    written, so an interrupted save never leaves a directory that ``load_sharded`` would accept.
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    path = Path(path)
    tmp = path.parent / tmp_name(path.name)
    tmp = path.parent / Path(dist.broadcast_object(str(tmp))).name  # one name for all ranks (rank 0's pid, host)
    tmp.mkdir(parents=True, exist_ok=True)
    if optimizer is None:
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        state = {"model": get_model_state_dict(model, options=_options())}
    else:
        msd, osd = get_state_dict(model, optimizer, options=_options())
        state = {"model": msd, "optim": osd}
    dcp.save(state, checkpoint_id=str(tmp))
    dist.barrier()
    fsync_tree(tmp)
    dist.barrier()
    if dist.is_main:
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    dist.barrier()
    if tmp.exists():  # a node without a shared filesystem: move its own shards into place too
        path.mkdir(parents=True, exist_ok=True)
        for f in tmp.iterdir():
            os.replace(f, path / f.name)
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def load_sharded(
    path: str | os.PathLike, *, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None, dist: DistInfo
) -> None:
    """Load ``save_sharded``'s directory into ``model`` (+ ``optimizer``), resharding as needed.

    DCP's own reader unpickles ``.metadata`` and its non-tensor values: Aura reads them through
    ``aura.distributed.dcp_reader`` instead, which builds nothing but DCP's metadata classes and plain
    data and reads no file outside ``path`` (a crafted checkpoint is refused, never run).
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_state_dict,
        set_model_state_dict,
        set_state_dict,
    )

    from aura.distributed.dcp_reader import SafePlanner, SafeReader, unwrap

    path = Path(path)
    if not (path / ".metadata").is_file():
        raise AuraError(M("missing", path=path))
    reader = SafeReader(path)
    reader.read_metadata()  # a refusal here names the file, before any collective
    if optimizer is None:
        state = {"model": get_model_state_dict(model, options=_options())}
    else:
        msd, osd = get_state_dict(model, optimizer, options=_options())
        state = {"model": msd, "optim": osd}
    try:
        dcp.load(state, storage_reader=reader, planner=SafePlanner(path))
    except (RuntimeError, ValueError, KeyError) as err:
        raise AuraError(M("mismatch", path=path, err=str(err).splitlines()[0][:300])) from None
    except BaseException as err:  # dcp wraps what a rank raised in a CheckpointException
        refusal = unwrap(err)
        if refusal is not None:
            raise refusal from None
        failures = [exc for exc, _ in getattr(err, "failures", {}).values()]
        if failures and isinstance(failures[0], (RuntimeError, ValueError, KeyError)):
            raise AuraError(M("mismatch", path=path, err=str(failures[0]).splitlines()[0][:300])) from None
        raise
    if optimizer is None:
        set_model_state_dict(model, state["model"], options=_options())
    else:
        set_state_dict(
            model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"], options=_options()
        )
    dist.barrier()


def full_state_dict(model: torch.nn.Module, *, dist: DistInfo) -> dict[str, torch.Tensor]:
    """The whole model's weights on CPU on rank 0 (``{}`` on the others), with the user's key names.

    Works for FSDP2 (gathers the shards), DDP (no ``module.`` prefix) and plain models; every rank
    must call it. Pass the result to ``save_pretrained(dir, state_dict=...)`` on rank 0.
    """
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
    if not dist.is_distributed:
        opts = StateDictOptions(full_state_dict=True, cpu_offload=False)
    sd = get_model_state_dict(model, options=opts)
    if not dist.is_main:
        return {}
    return {k: v.detach().cpu() for k, v in sd.items()}
