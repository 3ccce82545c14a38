"""A checkpoint is checked before a resume touches the run: its ``trainer_state.json`` holds what resume
restores (loop counters, data position), its weights are whole, its optimizer state is there, and every
``.pt`` part loads. Damage names the file and the checkpoint to resume from instead, and is found
before anything is written (``resolve_resume`` runs first, ``aura.train.run.guard``).

``--resume-from latest`` never skips a damaged newer checkpoint silently (its trainer_state.json, written
last, is there but unreadable or edited): a user who loses steps says so (``--resume-from`` the older
one) rather than finding out later. A checkpoint dir without that file is an unfinished write, skipped.
"""

from __future__ import annotations

import re
from pathlib import Path

from aura.core.errors import AuraError
from aura.core.files import check_safetensors, read_json_object
from aura.core.i18n import Messages
from aura.core.rundir import CHECKPOINT_RE, STATE_FILE, list_checkpoints

M = Messages(
    "ckpt_check",
    {
        "fix_other": (
            "Reanuda desde otro checkpoint de la ejecución (--resume-from RUTA/checkpoint-step-N) o quita "
            "--resume-from para empezar de cero.",
            "Resume from another checkpoint of the run (--resume-from PATH/checkpoint-step-N) or drop "
            "--resume-from to start from scratch.",
        ),
        "bad_state": (
            "{path}: '{field}' debe ser {expected} (es {found}): el checkpoint se editó o está dañado. {fix}",
            "{path}: '{field}' must be {expected} (it is {found}): the checkpoint was edited or is damaged. {fix}",
        ),
        "no_field": (
            "A {path} le falta '{field}' ({expected}): el checkpoint se editó o está dañado. {fix}",
            "{path} lacks '{field}' ({expected}): the checkpoint was edited or is damaged. {fix}",
        ),
        "e_object": ("un objeto", "an object"),
        "e_step": ("un número entero >= 0", "a whole number >= 0"),
        "missing_part": (
            "Al checkpoint {path} le falta {name} ({what}): no se puede reanudar exactamente. {fix}",
            "The checkpoint {path} lacks {name} ({what}): it cannot be resumed exactly. {fix}",
        ),
        "w_optimizer": ("el estado del optimizador", "the optimizer state"),
        "bad_part": (
            "{path} está dañado o incompleto ({err}). {fix}",
            "{path} is damaged or incomplete ({err}). {fix}",
        ),
        "damaged_newer": (
            "{path} es más reciente que {chosen} pero está dañado ({err}). Aura no se lo salta sin "
            "avisar: reanuda desde el anterior con --resume-from {chosen}, o repara el dañado.",
            "{path} is newer than {chosen} but damaged ({err}). Aura does not skip it silently: "
            "resume from the older one with --resume-from {chosen}, or repair the damaged one.",
        ),
    },
)

_MISSING = object()


def check_state(path: Path) -> dict:
    """``path/trainer_state.json`` as a dict whose fields a resume reads have their types."""
    file = Path(path) / STATE_FILE
    state = read_json_object(file, fix=M("fix_other"))
    for field, kind in (("step", "e_step"), ("loop", "e_object"), ("data", "e_object")):
        value = state.get(field, _MISSING)
        ok = (type(value) is int and value >= 0) if kind == "e_step" else isinstance(value, dict)
        if value is _MISSING:
            raise AuraError(M("no_field", path=file, field=field, expected=M(kind), fix=M("fix_other")))
        if not ok:
            raise AuraError(
                M("bad_state", path=file, field=field, expected=M(kind), found=repr(value)[:60], fix=M("fix_other"))
            )
    return state


def check_checkpoint(path: Path) -> dict:
    """Refuse a checkpoint a resume would fail on halfway (see the module docstring); its state."""
    path = Path(path)
    state = check_state(path)
    for f in sorted(path.glob("*.safetensors")):
        try:
            check_safetensors(f)
        except AuraError as e:
            raise AuraError(f"{e} {M('fix_other')}") from None
    sharded = (path / "dcp").is_dir() or (path / "deepspeed").is_dir()
    if not sharded and not (path / "optimizer.pt").is_file():
        raise AuraError(M("missing_part", path=path, name="optimizer.pt", what=M("w_optimizer"), fix=M("fix_other")))
    return state


def load_pt(file: Path, **kwargs):
    """``torch.load(file, weights_only=True)`` of a checkpoint part; a damaged one names the file."""
    import torch

    try:
        return torch.load(file, weights_only=True, **kwargs)
    except (RuntimeError, EOFError, ValueError, OSError) as e:  # zip/pickle errors of a cut-off file
        err = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise AuraError(M("bad_part", path=file, err=err, fix=M("fix_other"))) from None
    except Exception as e:  # noqa: BLE001 - pickle.UnpicklingError and the like: the file is not Aura's
        if type(e).__module__.split(".")[0] in ("pickle", "_pickle", "zipfile"):
            raise AuraError(M("bad_part", path=file, err=type(e).__name__, fix=M("fix_other"))) from None
        raise


def check_latest(run_dir: Path, chosen: Path) -> None:
    """Refuse ``--resume-from latest`` when a checkpoint newer than ``chosen`` (by the step in its name)
    is damaged rather than skipping it."""
    chosen_step = int(CHECKPOINT_RE.match(chosen.name).group(2)) if CHECKPOINT_RE.match(chosen.name) else -1
    complete = {r.path for r in list_checkpoints(run_dir)}
    for p in sorted(Path(run_dir).iterdir()):
        m = CHECKPOINT_RE.match(p.name)
        if not m or not p.is_dir() or p in complete or int(m.group(2)) <= chosen_step:
            continue
        if not (p / STATE_FILE).is_file():  # written last: without it, an unfinished write (not damage)
            continue
        try:
            check_state(p)
        except AuraError as e:  # its own message without its advice: the advice here is another
            err = re.sub(r"\s+", " ", str(e).replace(M("fix_other"), "")).strip().rstrip(".")
            raise AuraError(M("damaged_newer", path=p, chosen=chosen, err=err[:300])) from None
