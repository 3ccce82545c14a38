"""Set-up helpers shared by ``aura pretrain`` and ``aura finetune`` (the thin layers around loop.py).

* ``prepare_run_dir``: refuse to mix two runs in one ``--output-dir`` (unless ``--overwrite`` or
  ``--resume-from``), clear a previous run on ``--overwrite``, resolve ``--resume-from PATH|latest``.
* ``load_hf_weights``: load a checkpoint's ``model.safetensors`` (or shards) into a HF model, checking
  every key (tied weights may be absent from the file).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from aura.errors import AuraError
from aura.i18n import Messages

M = Messages("train_setup", {
    "other_run": ("{path} ya contiene otra ejecución (estado: {status}, paso {step}). Usa --resume-from latest "
                  "para continuarla, --overwrite para empezar de cero en ese directorio, u otro --output-dir.",
                  "{path} already holds another run (status: {status}, step {step}). Use --resume-from latest "
                  "to continue it, --overwrite to start over in that directory, or another --output-dir."),
    "weights_differ": ("Los pesos de {path} no corresponden a este modelo:\n  {diffs}\nReanuda con la misma "
                       "configuración de modelo que creó el checkpoint.",
                       "The weights in {path} do not match this model:\n  {diffs}\nResume with the same "
                       "model configuration that created the checkpoint."),
    "restart": ("torchrun reinició el grupo de procesos (reinicio {n}): se reanuda desde el último "
                "checkpoint: {path}",
                "torchrun restarted the worker group (restart {n}): resuming from the latest checkpoint: "
                "{path}"),
    "restart_fresh": ("torchrun reinició el grupo de procesos (reinicio {n}) antes del primer checkpoint: "
                      "se empieza de cero.",
                      "torchrun restarted the worker group (restart {n}) before the first checkpoint: "
                      "starting over."),
})

# What a run writes besides checkpoints (``--overwrite`` removes exactly these).
RUN_ENTRIES = ("final", "tb", "run.json", "training_log.csv", "model_config.json", "epoch_info.json")


def existing_run(out: Path) -> dict | None:
    """run.json of a previous run in ``out`` (or a stand-in when only checkpoints/final exist)."""
    from aura.train.checkpoint import list_checkpoints
    from aura.utils.fsutil import read_json

    if (out / "run.json").is_file():
        return read_json(out / "run.json")
    refs = list_checkpoints(out)
    if refs or (out / "final").is_dir():
        return {"status": "?", "last_step": refs[-1].step if refs else "?"}
    return None


def clear_run(out: Path) -> None:
    """--overwrite: remove what a previous run wrote (only Aura's own entries)."""
    from aura.train.checkpoint import list_checkpoints

    for ref in list_checkpoints(out):
        shutil.rmtree(ref.path, ignore_errors=True)
    for name in RUN_ENTRIES:
        p = out / name
        shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)


def elastic_restart() -> int:
    """How many times torchrun has restarted this worker group (0 on the first attempt or alone)."""
    import os

    try:
        return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
    except ValueError:
        return 0


def prepare_run_dir(out: Path, *, dist, resume_from: str | None, overwrite: bool) -> Path | None:
    """Check ``out`` on rank 0 (collective), clear it on --overwrite; the checkpoint to resume or None.

    Fault tolerance: when torchrun restarts the group (``--max-restarts``, TORCHELASTIC_RESTART_COUNT
    > 0) the same command line runs again, so the newest checkpoint of ``out`` is resumed by itself
    (overriding --resume-from/--overwrite, which belong to the first attempt). With none yet, an
    unfinished attempt's logs are cleared and training starts over (or resumes the user's own
    --resume-from again); a finished run's final/ is never cleared that way. A first attempt never
    resumes silently: an ``out`` holding another run still needs --resume-from latest or --overwrite.
    """
    from aura import console
    from aura.train import checkpoint as ckpt

    out = Path(out)
    if elastic_restart() > 0:
        found = None
        if dist.is_main:
            latest, previous = ckpt.latest_checkpoint(out), existing_run(out)
            found = (str(latest) if latest else None, bool(previous) and previous.get("status") != "finished")
        latest, unfinished = dist.broadcast_object(found)
        console.info(M("restart", n=elastic_restart(), path=latest) if latest is not None else
                     M("restart_fresh", n=elastic_restart()))
        if latest is not None:
            resume_from, overwrite = latest, False
        elif unfinished and not resume_from:
            overwrite = True
    existing = dist.broadcast_object(existing_run(out) if dist.is_main else None)
    if existing and not resume_from:
        if not overwrite:
            raise AuraError(M("other_run", path=out, status=existing.get("status"), step=existing.get("last_step")))
        if dist.is_main:
            clear_run(out)
    dist.barrier()
    return ckpt.resolve_resume(resume_from, out) if resume_from else None


def load_hf_weights(model, directory: Path) -> None:
    """Load model.safetensors (or its shards) into ``model``; tied weights may be absent from the file."""
    import json

    from safetensors.torch import load_file

    directory = Path(directory)
    index = directory / "model.safetensors.index.json"
    files = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.is_file() \
        else ["model.safetensors"]
    state: dict = {}
    for name in files:
        state.update(load_file(str(directory / name)))
    result = model.load_state_dict(state, strict=False)
    groups: dict[int, set[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(p), set()).add(name)
    missing = [k for k in result.missing_keys
               if not any(k in g and g & state.keys() for g in groups.values())]
    if missing or result.unexpected_keys:
        raise AuraError(M("weights_differ", path=directory,
                          diffs="\n  ".join([f"missing: {k}" for k in missing] +
                                            [f"unexpected: {k}" for k in result.unexpected_keys])))
