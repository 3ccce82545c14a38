"""A resume continues the run that was started: its plan comes from the checkpoint, not from the flags.

Every checkpoint's ``trainer_state.json`` carries ``plan``: the flags that decide how long the run is and
how each step is made (``PLAN_FLAGS``), the resolved step plan and its LR schedule (``StepPlan``). On
``--resume-from``:

* a plan flag the user does not repeat takes the checkpoint's value (``--epochs 3`` need not be typed
  again; without this a resumed ``--epochs 3`` run planned 1 epoch and stopped at once);
* length flags (``--epochs``, ``--max-steps``, ``--max-tokens``) given again replace the run's limits
  (those not repeated are dropped); a different length is announced, and the cosine is re-planned from
  the checkpoint's step (``Schedule.replanned``), so the learning rate never jumps; a WSD checkpoint taken
  before the cooldown is a branch point: the stable phase simply goes on towards the new length;
* a fixed flag given with another value (batch, accumulation, learning rate, warm-up, seed, sequence
  length...) would make the resumed run a different run: it is refused, naming the flag and both values;
* the cadence flags (``--save-steps``, ``--eval-interval``, ``--log-interval``, ``--keep-last``...) also
  come from the checkpoint unless given again, and may change freely.

Checkpoints written before the plan was stored resume with the flags as given (the old behaviour).
"""

from __future__ import annotations

import dataclasses

from aura.core import console
from aura.core.errors import AuraError
from aura.core.i18n import Messages
from aura.train.args import StepPlan
from aura.train.optim.schedule import Schedule

M = Messages(
    "plan",
    {
        "fixed": (
            "--{flag} {new} no coincide con el checkpoint {path} ({old}): reanudar con otro valor rompería "
            "la continuación exacta de la ejecución. Quita --{flag} para seguir con {old}, o empieza una "
            "ejecución nueva (otro --output-dir) si quieres cambiarlo.{force}",
            "--{flag} {new} does not match the checkpoint {path} ({old}): resuming with another value would "
            "break the exact continuation of the run. Drop --{flag} to continue with {old}, or start a new "
            "run (another --output-dir) to change it.{force}",
        ),
        "batch": (
            "--batch-size {batch} × --gradient-accumulation-steps {accum} × {world:proceso|procesos} = "
            "{new:secuencia|secuencias} por paso, pero el checkpoint {path} se hizo con {obatch} × {oaccum} × "
            "{oworld} = {old}: "
            "reanudar con otro lote global rompería la continuación exacta. Da --batch-size y "
            "--gradient-accumulation-steps que den {old:secuencia|secuencias} por paso, o empieza una ejecución "
            "nueva.{force}",
            "--batch-size {batch} × --gradient-accumulation-steps {accum} × {world:process|processes} = "
            "{new:sequence|sequences} per step, but the checkpoint {path} was made with {obatch} × {oaccum} × "
            "{oworld} = "
            "{old}: resuming with another global batch would break the exact continuation. Give "
            "--batch-size and --gradient-accumulation-steps that make {old:sequence|sequences} per step, or start a "
            "new run.{force}",
        ),
        "world": (
            "El checkpoint {path} se hizo con {oworld:proceso|procesos} ({launcher}) y esta reanudación tiene "
            "{world}: el lote global pasaría de {old} a {new:secuencia|secuencias} por paso y la ejecución ya no "
            "sería la misma. Reanúdala como se lanzó:\n  {cmd}\no reparte el mismo lote global con --batch-size y "
            "--gradient-accumulation-steps.{force}",
            "The checkpoint {path} was made with {oworld:process|processes} ({launcher}) and this resume has "
            "{world}: the global batch would go from {old} to {new:sequence|sequences} per step and the run "
            "would no longer be the same. Resume it as it was launched:\n  {cmd}\nor split the same global "
            "batch with --batch-size and --gradient-accumulation-steps.{force}",
        ),
        "force": (
            " Para cambiarlo de todos modos, añade --allow-plan-change (el cambio queda anotado en el "
            "historial de run.json).",
            " To change it anyway, add --allow-plan-change (the change is recorded in run.json's history).",
        ),
        "forced": (
            "--allow-plan-change: {changes}; queda anotado en el historial de run.json.",
            "--allow-plan-change: {changes}; recorded in run.json's history.",
        ),
        "resplit": (
            "El checkpoint se hizo con {oworld:proceso|procesos} y ahora hay {world}: el mismo lote global "
            "({old:secuencia|secuencias} por paso) repartido de otra forma.",
            "The checkpoint was made with {oworld:process|processes} and there are {world} now: the same "
            "global batch ({old:sequence|sequences} per step) split another way.",
        ),
        "interval_long": (
            "--{flag} {value} es mayor que el plan ({total:paso|pasos}): nunca se alcanza; {what} se hace "
            "al final de la ejecución (paso {total}).",
            "--{flag} {value} is longer than the plan ({total:step|steps}): it is never reached; {what} "
            "will run at the end of the run (step {total}).",
        ),
        "what_eval_interval": ("la validación", "validation"),
        "what_eval_suite_interval": ("la evaluación de --eval-suite", "the --eval-suite evaluation"),
        "what_save_steps": ("el único checkpoint", "the only checkpoint"),
        "change_batch": (
            "el lote global {old} → {new:secuencia|secuencias} por paso",
            "the global batch {old} → {new:sequence|sequences} per step",
        ),
        "change_world": ("los procesos {old} → {new}", "the processes {old} → {new}"),
        "change": ("--{flag} cambió {old} → {new}", "--{flag} changed {old} → {new}"),
        "changed": (
            "{changes}: el plan pasa de {old_total} a {new_total:paso|pasos} y la tasa de aprendizaje se "
            "replanifica desde el paso {step}.",
            "{changes}: the plan goes from {old_total} to {new_total:step|steps} and the learning rate is "
            "re-planned from step {step}.",
        ),
        "changed_same": (
            "{changes}, pero la ejecución sigue terminando en el paso {total} (manda el menor límite "
            "de --epochs, --max-steps y --max-tokens).",
            "{changes}, but the run still ends at step {total} (the smallest limit of --epochs, "
            "--max-steps and --max-tokens wins).",
        ),
        "data_changed": (
            "Los datos ya no dan el mismo número de pasos: el plan pasa de {old_total} a "
            "{new_total:paso|pasos} y la tasa de aprendizaje se replanifica desde el paso {step}.",
            "The data no longer gives the same number of steps: the plan goes from {old_total} to "
            "{new_total:step|steps} and the learning rate is re-planned from step {step}.",
        ),
        "too_short": (
            "Con --{flag} {new} la ejecución terminaría en el paso {total}, pero el checkpoint {path} ya "
            "está en el paso {step}. Da un valor mayor o quita --{flag}.",
            "With --{flag} {new} the run would end at step {total}, but the checkpoint {path} is already "
            "at step {step}. Give a larger value or drop --{flag}.",
        ),
        "none": ("(ninguno)", "(none)"),
        "both_limits": (
            "Varios límites a la vez ({limits}): la ejecución termina en el primero que se alcance (paso {total}).",
            "Several limits at once ({limits}): the run ends at the first one reached (step {total}).",
        ),
        "overwrite_ignored": (
            "--overwrite no se aplica con --resume-from: la ejecución continúa y no se borra nada.",
            "--overwrite does not apply with --resume-from: the run continues and nothing is deleted.",
        ),
    },
)

LENGTH_FLAGS = ("epochs", "max_steps", "max_tokens")
# Flags a resume must keep (present on pretrain, finetune or both; absent ones are skipped).
BATCH_FLAGS = ("batch_size", "gradient_accumulation_steps")  # their product x processes must not change
FIXED_FLAGS = BATCH_FLAGS + (
    "learning_rate",
    "min_lr",
    "warmup_steps",
    "seed",
    "weight_decay",
    "adam_beta1",
    "adam_beta2",
    "max_grad_norm",
    "max_length",
    "truncation",
    "packing",
    "train_on_prompt",
    "val_fraction",
    "optimizer",
    "lr_schedule",
)
# What a checkpoint written before a fixed flag existed was trained with.
LEGACY_FLAGS = {"optimizer": "adamw", "lr_schedule": "cosine"}
# Flags renamed since a checkpoint may have been written: its key -> today's field (the flag's alias).
RENAMED_FLAGS = {"validation_split": "val_fraction"}
# How ranks communicate: taken from the checkpoint when not given again; another value is refused (a resume in one
# process, or without PowerSGD, would silently be another run) unless --allow-plan-change.
COMM_FLAGS = ("ddp_comm", "powersgd_rank", "powersgd_warmup", "local_steps", "outer_lr", "outer_momentum")
# A forced change of these makes the new schedule apply from the resumed step on.
SCHEDULE_FLAGS = ("learning_rate", "min_lr", "warmup_steps", "lr_schedule")
# Cadence: taken from the checkpoint when not given again, free to change when given.
CADENCE_FLAGS = (
    "save_steps",
    "eval_interval",
    "eval_batches",
    "log_interval",
    "keep_last",
    "max_bad_steps",
    "time_budget",
    "cooldown_fraction",
)  # the last two: a WSD branch point may change them
PLAN_FLAGS = LENGTH_FLAGS + FIXED_FLAGS + COMM_FLAGS + CADENCE_FLAGS


def _flag(name: str) -> str:
    return name.replace("_", "-")


def _show(value) -> str:
    return M("none") if value is None else str(value)


def plan_state(args, plan: StepPlan) -> dict:
    """What a checkpoint stores about the plan (``trainer_state.json``'s ``plan``)."""
    flags = {f: getattr(args, f) for f in PLAN_FLAGS if hasattr(args, f)}
    return {"flags": flags, **plan.to_dict()}


@dataclasses.dataclass
class Adopted:
    """The outcome of ``adopt_flags``: the config to use and the length flags the user changed."""

    cfg: object
    changed: list[tuple[str, object, object]]  # (field, old, new)
    saved: dict | None  # the checkpoint's plan
    step: int
    path: str
    forced: list[dict] = dataclasses.field(default_factory=list)  # --allow-plan-change: {setting, old, new}


def adopt_flags(cfg, saved_state: dict, *, explicit, path, world_size: int = 1) -> Adopted:
    """Before presets fill the defaults: the checkpoint's plan flags replace those not given again; a
    fixed or communication flag given with another value raises AuraError; changed length flags are
    returned. The batch may be split differently (another number of processes, micro-batch or
    accumulation) as long as the global batch, sequences per optimizer step, stays the same: another
    number of processes without that (the resume hint of a torchrun run followed in one process) is
    refused, naming how the run was launched. ``--allow-plan-change`` turns every refusal into a warning;
    the changes are returned (``forced``) for run.json's history."""
    if getattr(cfg, "overwrite", False):
        console.warn(M("overwrite_ignored"))
    saved = saved_state.get("plan") if isinstance(saved_state.get("plan"), dict) else None
    step = int(saved_state.get("step", 0))
    if saved is None:
        return Adopted(cfg, [], None, step, str(path))
    flags = {**LEGACY_FLAGS, **{RENAMED_FLAGS.get(name, name): value for name, value in saved.get("flags", {}).items()}}
    changes, changed, forced = {}, [], []
    allow = bool(getattr(cfg, "allow_plan_change", False))
    length_given = any(name in explicit for name in LENGTH_FLAGS)
    for name, old in flags.items():
        if not hasattr(cfg, name):
            continue
        new = getattr(cfg, name)
        if name in LENGTH_FLAGS and length_given:  # the length flags given now replace the run's limits
            if new != old:
                changed.append((name, old, new))
        elif name not in explicit:
            changes[name] = old
        elif new != old and name not in CADENCE_FLAGS + BATCH_FLAGS:
            if not allow:
                raise AuraError(M("fixed", flag=_flag(name), new=new, old=_show(old), path=path, force=M("force")))
            forced.append({"setting": f"--{_flag(name)}", "old": old, "new": new})
    forced += _check_global_batch(
        cfg,
        changes,
        flags,
        explicit=explicit,
        path=path,
        world_size=world_size,
        saved_world=int(saved_state.get("world_size") or world_size),
        allow=allow,
    )
    if forced:
        console.warn(M("forced", changes="; ".join(_describe_change(c) for c in forced)))
    return Adopted(dataclasses.replace(cfg, **changes) if changes else cfg, changed, saved, step, str(path), forced)


def _check_global_batch(
    cfg, changes: dict, flags: dict, *, explicit, path, world_size: int, saved_world: int, allow: bool
) -> list[dict]:
    """The global batch (sequences per step over every process) must not change; [] or, with
    --allow-plan-change, the changes it forces."""
    if any(flags.get(f) is None for f in BATCH_FLAGS):
        return []
    batch, accum = (getattr(cfg, f) if f in explicit else changes.get(f, flags[f]) for f in BATCH_FLAGS)
    old_batch, old_accum = (flags[f] for f in BATCH_FLAGS)
    new, old = (batch or 1) * (accum or 1) * world_size, old_batch * old_accum * saved_world
    if new == old:
        if world_size != saved_world:
            console.info(M("resplit", oworld=saved_world, world=world_size, old=old))
        return []
    if not allow:
        if world_size == saved_world:
            raise AuraError(
                M(
                    "batch",
                    batch=batch,
                    accum=accum,
                    world=world_size,
                    new=new,
                    path=path,
                    obatch=old_batch,
                    oaccum=old_accum,
                    oworld=saved_world,
                    old=old,
                    force=M("force"),
                )
            )
        launch = _launch_of(path)
        raise AuraError(
            M(
                "world",
                path=path,
                oworld=saved_world,
                world=world_size,
                old=old,
                new=new,
                launcher=launch.get("launcher", "torchrun"),
                cmd=_relaunch(launch, path, saved_world),
                force=M("force"),
            )
        )
    out = [{"setting": "global_batch", "old": old, "new": new}]
    return out + (
        [{"setting": "world_size", "old": saved_world, "new": world_size}] if world_size != saved_world else []
    )


def _describe_change(c: dict) -> str:
    if c["setting"] == "global_batch":
        return M("change_batch", old=c["old"], new=c["new"])
    if c["setting"] == "world_size":
        return M("change_world", old=c["old"], new=c["new"])
    return M("change", flag=c["setting"].lstrip("-"), old=_show(c["old"]), new=_show(c["new"]))


def _launch_of(checkpoint) -> dict:
    """The launch record in the run.json beside ``checkpoint`` ({} for a run of an older Aura)."""
    from pathlib import Path

    from aura.core.atomic import read_json

    try:
        info = read_json(Path(checkpoint).parent / "run.json")
    except (OSError, ValueError):
        return {}
    launch = info.get("launch") if isinstance(info, dict) else None
    return launch if isinstance(launch, dict) else {}


def _relaunch(launch: dict, checkpoint, world: int) -> str:
    from aura.distributed.launcher import resume_command, strip_resume

    if not launch:  # an older run.json: torchrun with the process count the checkpoint was made with
        import sys

        launch = {"prefix": ["torchrun", f"--nproc_per_node={world}", "-m", "aura"], "argv": strip_resume(sys.argv[1:])}
    return resume_command(launch, checkpoint)


def continue_plan(plan: StepPlan, adopted: Adopted) -> StepPlan:
    """The resumed run's plan: the checkpoint's schedule, re-planned (and said so) when the length changed."""
    saved = adopted.saved
    if saved is None or not isinstance(saved.get("schedule"), dict):
        return plan
    if any(c["setting"].lstrip("-").replace("-", "_") in SCHEDULE_FLAGS for c in adopted.forced):
        return plan  # a forced new learning rate or schedule applies from the resumed step on
    old_schedule = Schedule.from_dict(saved["schedule"])
    old_total, new_total, step = int(saved["total_steps"]), plan.total_steps, adopted.step
    if old_schedule.cooldown_start is not None and old_schedule.cooling(step) and not adopted.changed:
        # a cooldown that --time-budget (or a re-plan) started: the run ends where it was decided then
        return dataclasses.replace(
            plan, total_steps=old_total, schedule=old_schedule, epochs=-(-old_total // plan.steps_per_epoch)
        )
    if old_schedule.kind == "wsd" and not old_schedule.cooling(step) and plan.schedule is not None:
        # a branch point (WSD before its cooldown): the stable phase goes on, the cooldown follows the flags
        old_schedule = dataclasses.replace(old_schedule, cooldown_fraction=plan.schedule.cooldown_fraction)
        old_schedule = old_schedule.replanned(step=step, total=old_total)
    changes = "; ".join(
        M("change", flag=_flag(name), old=_show(old), new=_show(new)) for name, old, new in adopted.changed
    )
    if new_total == old_total:
        if changes:
            console.info(M("changed_same", changes=changes, total=new_total))
        return dataclasses.replace(plan, schedule=old_schedule)
    if new_total <= step:
        name, _, new = next((c for c in adopted.changed if c[2] is not None), ("max_steps", None, new_total))
        raise AuraError(M("too_short", flag=_flag(name), new=_show(new), total=new_total, path=adopted.path, step=step))
    if changes:
        console.info(M("changed", changes=changes, old_total=old_total, new_total=new_total, step=step))
    else:
        console.warn(M("data_changed", old_total=old_total, new_total=new_total, step=step))
    return dataclasses.replace(plan, schedule=old_schedule.replanned(step=step, total=new_total))


def interval_notices(args, plan: StepPlan, *, explicit) -> None:
    """A warning for every interval the user set that the plan never reaches (the loop still validates,
    evaluates and saves at the last step)."""
    for name in ("eval_interval", "eval_suite_interval", "save_steps"):
        value = getattr(args, name, None)
        if name == "eval_suite_interval" and not getattr(args, "eval_suite", ""):
            continue
        if value and value > plan.total_steps and (name in explicit or name == "eval_suite_interval"):
            console.warn(
                M("interval_long", flag=_flag(name), value=value, total=plan.total_steps, what=M(f"what_{name}"))
            )


def limits_notice(args, plan: StepPlan) -> None:
    """One line when several length limits are set at once (the smallest wins, silently otherwise)."""
    given = [f"--{_flag(f)} {getattr(args, f)}" for f in LENGTH_FLAGS if getattr(args, f, None)]
    if len(given) > 1:
        console.info(M("both_limits", limits=", ".join(given), total=plan.total_steps))
