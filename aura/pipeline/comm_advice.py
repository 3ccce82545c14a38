"""``comm: auto`` on a launched pretraining stage: the link measured, then its advice used.

Before the stage starts, every node runs ``aura launch check-dist --model-preset P --step-seconds S
--advice-out FILE`` with the stage's own launch block (``aura launch``'s function, on MASTER_PORT + 1 so
that the training's rendezvous never meets the measurement's store): rank 0 measures latency and
bandwidth, computes each mode's communication per step for the stage's preset (``aura.cluster.check``)
and decides once; every node reads the same decision and the stage runs with its flags (``--ddp-comm
bf16|powersgd`` or ``--local-steps H``, nothing for plain DDP). The measurement and the flags go into the
node's state file (``comm``), the stage's command, the plan's line and the report. A resumed stage keeps
the flags it started with (a checkpoint refuses a resume with other communication).

``S``, the compute seconds of one step, is ``comm.step_seconds`` when given, else the plan's estimate on
this node's device (6·N FLOPs per token at 40 % of its peak), else check-dist's default (1 s).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from aura.core import console
from aura.core.commands import COMMANDS
from aura.core.errors import AuraError
from aura.core.i18n import Messages, num
from aura.pipeline.report_render import comm_flags_text as flags_text
from aura.pipeline.spec import Stage

M = Messages(
    "pipeline.comm",
    {
        "measuring": (
            "[{i}/{n}] {stage}: comm: auto: se mide el enlace entre los nodos (aura launch check-dist "
            "--model-preset {preset}, {step} s de cómputo por paso{source}).",
            "[{i}/{n}] {stage}: comm: auto: measuring the link between the nodes (aura launch check-dist "
            "--model-preset {preset}, {step} s of compute per step{source}).",
        ),
        "estimated": (", estimados por el plan", ", the plan's estimate"),
        "applied": (
            "[{i}/{n}] {stage}: enlace medido: latencia {lat} ms, {gbit} Gbit/s por proceso; se entrena con {flags}.",
            "[{i}/{n}] {stage}: link measured: latency {lat} ms, {gbit} Gbit/s per rank; training with {flags}.",
        ),
        "kept": (
            "[{i}/{n}] {stage}: se reanuda con la comunicación con la que empezó: {flags}.",
            "[{i}/{n}] {stage}: resuming with the communication it started with: {flags}.",
        ),
        "one_process": (
            "[{i}/{n}] {stage}: comm: auto: un solo proceso, no hay comunicación que medir.",
            "[{i}/{n}] {stage}: comm: auto: a single process, no communication to measure.",
        ),
        "failed": (
            "{stage}: la medida del enlace (aura launch check-dist) terminó con el código {code}; revisa lo "
            "que dice arriba y repite el mismo comando en cada nodo.",
            "{stage}: the link measurement (aura launch check-dist) exited with code {code}; see what it says "
            "above and run the same command again on every node.",
        ),
        "plan": (
            "  {stage}: comm: auto: antes de la etapa se mide el enlace (aura launch check-dist --model-preset "
            "{preset}, {step} s por paso{source}) y se usa su consejo (DDP, --ddp-comm bf16|powersgd o "
            "--local-steps H).",
            "  {stage}: comm: auto: before the stage the link is measured (aura launch check-dist --model-preset "
            "{preset}, {step} s per step{source}) and its advice is used (DDP, --ddp-comm bf16|powersgd or "
            "--local-steps H).",
        ),
    },
)

DEFAULT_STEP_S = 1.0  # check-dist's --step-seconds default


def preset_and_step(stage: Stage, info=None) -> tuple[str, float, bool]:
    """(the preset whose gradients travel, compute seconds per step, whether the plan estimated them)."""
    from aura.models.hardware import choose_auto, detect
    from aura.pipeline.estimate import plan_stage

    info = info or detect()
    preset = stage.cfg.model_preset
    if preset == "auto":
        preset = choose_auto(info).preset
    if stage.comm.get("step_seconds"):
        return preset, float(stage.comm["step_seconds"]), False
    p = plan_stage(stage.key, stage.cfg, info)
    if p.seconds and p.steps:
        return preset, p.seconds / p.steps, True
    return preset, DEFAULT_STEP_S, False


def plan_line(stage: Stage, info) -> str:
    preset, step, estimated = preset_and_step(stage, info)
    return M("plan", stage=stage.name, preset=preset, step=num(step, ".3g"), source=M("estimated") if estimated else "")


def apply(
    stage: Stage, cfg, *, i: int, n: int, out: Path, prev: dict[str, Any], resume: bool, node_rank: int
) -> tuple[Any, dict[str, Any] | None]:
    """(``cfg`` with the measured advice's flags, the state's ``comm`` record)."""
    import importlib

    if resume and prev.get("comm"):
        record = prev["comm"]
        console.always(M("kept", i=i, n=n, stage=stage.name, flags=flags_text(record.get("flags") or {})))
        return dataclasses.replace(cfg, **(record.get("flags") or {})), record
    cmd = COMMANDS[("launch",)]
    module = importlib.import_module(cmd.module)
    job = getattr(module, cmd.config)(command=["check-dist"], **stage.launch)
    if job.nnodes * job.gpus_per_node < 2:
        console.always(M("one_process", i=i, n=n, stage=stage.name))
        return cfg, None
    preset, step, estimated = preset_and_step(stage)
    console.always(
        M(
            "measuring",
            i=i,
            n=n,
            stage=stage.name,
            preset=preset,
            step=num(step, ".3g"),
            source=M("estimated") if estimated else "",
        )
    )
    advice = out / f".{stage.name}.link.node-{node_rank}.json"
    advice.unlink(missing_ok=True)
    argv = ["check-dist", "--model-preset", preset, "--step-seconds", repr(step), "--advice-out", str(advice)]
    vocab = getattr(cfg, "vocab_size", None)
    if vocab:
        argv += ["--vocab-size", str(vocab)]
    for key, value in stage.comm.items():
        if key != "step_seconds" and value is not None:
            argv += ["--" + key.replace("_", "-"), str(value)]
    job = getattr(module, cmd.config)(command=argv, **{**stage.launch, "master_port": job.master_port + 1})
    code = getattr(module, cmd.function)(job)
    if code != 0 or not advice.is_file():
        raise AuraError(M("failed", stage=stage.name, code=code), exit_code=code or 1)
    record = json.loads(advice.read_text(encoding="utf-8"))
    flags = {k: v for k, v in (record.get("flags") or {}).items() if k in ("ddp_comm", "local_steps")}
    record["flags"] = flags
    console.always(
        M(
            "applied",
            i=i,
            n=n,
            stage=stage.name,
            lat=num(record.get("latency_ms", 0.0), ".3f"),
            gbit=num(record.get("gbit", 0.0), ".2f"),
            flags=flags_text(flags),
        )
    )
    return dataclasses.replace(cfg, **flags), record
