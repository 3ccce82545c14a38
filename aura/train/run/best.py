"""``best/``: the model with the lowest validation loss so far, kept out of checkpoint rotation.

``--keep-last`` deletes old checkpoints; on a small corpus the best one is often among them (the model
starts memorising and validation loss rises). Whenever a validation improves on the best so far, the
loop writes ``RUN_DIR/best/`` (a Hugging Face model dir, or the adapter dir for LoRA, written atomically
like ``final/``) with ``best.json`` = {step, epoch, val_loss}. When validation loss has risen for
``RISES_TO_WARN`` evaluations in a row, it says so (again every 10th rise), naming the step ``best/`` keeps.
The counters live in ``TrainState`` so a resumed run keeps counting.
"""

from __future__ import annotations

from pathlib import Path

from aura.core import console
from aura.core.atomic import read_json
from aura.core.i18n import Messages
from aura.core.rundir import BEST

M = Messages(
    "best",
    {
        "saved": (
            "Mejor validación hasta ahora ({val:.4f}, paso {step}): guardada en {path}",
            "Best validation so far ({val:.4f}, step {step}): saved to {path}",
        ),
        "rising": (
            "la pérdida de validación ha subido {n:vez seguida|veces seguidas} desde el paso {step} ({best:.2f}): el "
            "modelo está memorizando; `best/` conserva el paso {step}.",
            "validation loss has risen {n:time|times} in a row since step {step} ({best:.2f}): the model is "
            "memorising; `best/` keeps step {step}.",
        ),
    },
)

BEST_JSON = "best.json"
RISES_TO_WARN = 3


def track(state, val: float | None) -> bool:
    """Update the best/rising counters of ``state`` (a TrainState) with a new validation loss; True when
    it is a new best (the caller then writes ``best/``)."""
    if val is None:
        return False
    improved = state.best_val_loss is None or val < state.best_val_loss
    if state.last_val_loss is not None and val > state.last_val_loss:
        state.val_rises_in_row += 1
    else:
        state.val_rises_in_row = 0
    state.last_val_loss = val
    rises = state.val_rises_in_row
    if improved:
        state.best_val_loss, state.best_step = val, state.step
    elif state.best_step is not None and (rises == RISES_TO_WARN or (rises > RISES_TO_WARN and rises % 10 == 0)):
        console.warn(M("rising", n=state.val_rises_in_row, step=state.best_step, best=state.best_val_loss))
    return improved


def best_dir(run_dir: Path) -> Path:
    return Path(run_dir) / BEST


def read_best(run_dir: Path) -> dict | None:
    """``best/best.json`` of a run ({step, epoch, val_loss}), or None when there is no complete best/."""
    try:
        info = read_json(best_dir(run_dir) / BEST_JSON)
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) and isinstance(info.get("val_loss"), (int, float)) else None


def best_json(state) -> dict:
    return {"step": state.best_step, "epoch": state.epoch, "val_loss": state.best_val_loss}
