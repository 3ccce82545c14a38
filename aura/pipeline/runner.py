"""``aura pipeline run``: the stages one after the other, each the real command's function with its config.

Before the first stage: every stage validated (``spec.resolve``), then each one's fingerprint compared with
``DIR/pipeline.json``: a finished, unchanged stage is skipped (one line); an interrupted training stage with
the same fingerprint resumes from its latest checkpoint (the command's own ``--resume-from latest``);
a stage whose options or inputs changed runs again, and so does every stage that reads it (its
fingerprint holds theirs), after the runner has said which. The report card is rewritten after every stage.
On several nodes each node runs this same chain with its own state file; ``aura.pipeline.nodes`` says where
each stage runs (every node through torchrun, each node, or node 0 alone) and ``aura.pipeline.comm_advice`` measures
the link before a ``comm: auto`` stage.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import shlex
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

from aura import __version__
from aura.core import console
from aura.core.commands import COMMANDS
from aura.core.config import fields_of
from aura.core.errors import AuraError
from aura.core.i18n import Messages
from aura.core.locks import output_lock
from aura.core.rundir import latest_checkpoint
from aura.pipeline import comm_advice as link, nodes, report_card as report
from aura.pipeline.pipeline_state import (
    ELSEWHERE,
    FAILED,
    FINISHED,
    INTERRUPTED,
    PENDING,
    RUNNING,
    SKIPPED,
    State,
    fingerprint,
    now,
)
from aura.pipeline.spec import RESOURCES_DIR, Pipeline, Stage, config_fields, fingerprint_fields, resolve

M = Messages(
    "pipeline.runner",
    {
        "not_pipeline_dir": (
            "{path} ya existe y no es la carpeta de un pipeline (no tiene pipeline.json). Elige "
            "una carpeta nueva o vacía para --output-dir.",
            "{path} already exists and is not a pipeline's folder (it has no pipeline.json). Choose "
            "a new or empty folder for --output-dir.",
        ),
        "other_pipeline": (
            "{path} es la carpeta de otro pipeline ('{other}'). Elige otra --output-dir.",
            "{path} is the folder of another pipeline ('{other}'). Choose another --output-dir.",
        ),
        "header": ("== [{i}/{n}] {stage}: {command}", "== [{i}/{n}] {stage}: {command}"),
        "skip": (
            "[{i}/{n}] {stage}: terminada y sin cambios; se salta.",
            "[{i}/{n}] {stage}: finished and unchanged; skipped.",
        ),
        "skip_missing": (
            "[{i}/{n}] {stage}: se salta: falta el módulo de Python '{module}' (instálalo para ejecutar esta etapa).",
            "[{i}/{n}] {stage}: skipped: the Python module '{module}' is missing (install it to run this stage).",
        ),
        "resume": (
            "[{i}/{n}] {stage}: se interrumpió; se reanuda desde su último checkpoint ({ckpt}).",
            "[{i}/{n}] {stage}: it was interrupted; resuming from its latest checkpoint ({ckpt}).",
        ),
        "resume_tasks": (
            "[{i}/{n}] {stage}: se interrumpió; se reanuda en su carpeta (solo las tareas sin terminar).",
            "[{i}/{n}] {stage}: it was interrupted; resuming in its folder (only the unfinished tasks).",
        ),
        "restart": (
            "[{i}/{n}] {stage}: no terminó y no tiene checkpoint; se empieza de nuevo.",
            "[{i}/{n}] {stage}: it did not finish and has no checkpoint; starting it again.",
        ),
        "changed": (
            "Cambió desde la última ejecución: {stages} (opciones o entradas). Se rehacen: {redo}.",
            "Changed since the last run: {stages} (options or inputs). Redoing: {redo}.",
        ),
        "stage_done": ("{stage}: terminada en {time}.", "{stage}: finished in {time}."),
        "stopped": (
            "Pipeline detenido en la etapa '{stage}'. Se reanuda (las etapas terminadas se saltan) con el "
            "mismo comando:\n  {command}",
            "Pipeline stopped in stage '{stage}'. It resumes (finished stages are skipped) with the same "
            "command:\n  {command}",
        ),
        "failed": (
            "La etapa '{stage}' falló (código {code}). Corrige la causa y repite el mismo comando; las "
            "etapas terminadas se saltan:\n  {command}",
            "Stage '{stage}' failed (exit code {code}). Fix the cause and run the same command again; "
            "finished stages are skipped:\n  {command}",
        ),
        "all_done": (
            "Pipeline terminado: {n:etapa|etapas} en {path}. Informe: {report}",
            "Pipeline finished: {n:stage|stages} in {path}. Report: {report}",
        ),
    },
)


def equivalent_command(stage: Stage, cfg=None, *, launched: bool = False) -> str:
    """The ``aura ...`` line that runs the stage by hand: every option that differs from its default
    (``launched``: under ``aura launch`` with the stage's launch block)."""
    cfg = cfg if cfg is not None else stage.cfg
    argv = ["aura", *stage.key]
    if launched and stage.launch is not None:
        prefix = ["aura", "launch"]
        for key, value in stage.launch.items():
            if value is not None:
                prefix += ["--" + key.replace("_", "-"), str(value)]
        argv = prefix + list(stage.key)
    positional: list[str] = []
    for f, _tp in fields_of(type(cfg)):
        value = getattr(cfg, f.name)
        default = (
            f.default
            if f.default is not dataclasses.MISSING
            else (f.default_factory() if f.default_factory is not dataclasses.MISSING else dataclasses.MISSING)
        )  # type: ignore[misc]
        meta = f.metadata or {}
        if meta.get("positional"):
            positional += [str(v) for v in (value if isinstance(value, list) else [value]) if v is not None]
            continue
        if value == default or (value is None and default is dataclasses.MISSING):
            continue
        flag = "--" + f.name.replace("_", "-")
        if isinstance(value, bool):
            argv.append(flag if value else "--no-" + f.name.replace("_", "-"))
        elif isinstance(value, list):
            argv += [flag, *map(str, value)]
        elif value is not None:
            argv += [flag, str(value)]
    return shlex.join(argv + positional)


def _raise_interrupt(signum, frame):  # SIGTERM outside training: stop like Ctrl+C (training has its own)
    raise KeyboardInterrupt


def _decide(
    pipeline: Pipeline, out: Path, state: State, lay: nodes.Layout | None = None
) -> tuple[dict[str, str], dict[str, str]]:
    """Fingerprint and action of every stage: skip (finished, unchanged), resume (interrupted, unchanged),
    redo (its options or inputs changed), after (a stage it reads runs again), run (never ran), elsewhere
    (node 0's alone, on another node)."""
    lay = lay or nodes.Layout()
    fps: dict[str, str] = {}
    actions: dict[str, str] = {}
    for stage in pipeline.stages:
        where = lay.where.get(stage.name, nodes.LOCAL)
        upstream_runs = any(actions.get(r, "skip") not in ("skip", "elsewhere") for r in stage.refs)
        fp = fingerprint(
            command=stage.command,
            options=fingerprint_fields(stage.cfg),
            out=out,
            upstream={r: fps[r] for r in stage.refs},
            resources=RESOURCES_DIR,
        )
        fps[stage.name] = fp
        if where == nodes.MAIN and lay.node_rank != 0:
            actions[stage.name] = "elsewhere"
            continue
        prev = state.get(stage.name)
        # another node's rank 0 writes a multi-node stage: on this node its folder may hold nothing
        here = (out / stage.name).exists() or (where == nodes.ALL and lay.node_rank != 0)
        same = prev.get("fingerprint") == fp
        installed = prev.get("status") == SKIPPED and _missing_module(stage) is None  # it can run now
        if upstream_runs and prev.get("fingerprint") and same:
            actions[stage.name] = "after"  # what it reads is made again: so is it, from the start
        elif same and prev.get("status") in (FINISHED, SKIPPED) and here and not installed:
            actions[stage.name] = "skip"
        elif same and prev.get("status") in (RUNNING, INTERRUPTED, FAILED):
            actions[stage.name] = "resume"
        elif prev.get("fingerprint") and not same:
            actions[stage.name] = "redo"
        else:
            actions[stage.name] = "run"
    return fps, actions


def invalidate(pipeline: Pipeline, actions: dict[str, str], state: State) -> None:
    """Every stage that will run again is no longer finished, on disk, before anything runs: a run killed
    after redoing a stage never leaves a stage that reads it marked finished with the old result."""
    for s in pipeline.stages:
        if actions[s.name] in ("redo", "after", "run") and state.get(s.name).get("status") in (FINISHED, SKIPPED):
            state.stages[s.name]["status"] = PENDING
    state.save()


def run_pipeline(pipeline: Pipeline, out: Path, *, price: float | None, rerun: list[str]) -> int:
    """Run (or resume) ``pipeline`` in ``out``; 0 when every stage finished, 3 when a signal stopped one.
    On several nodes this node walks the same chain (``aura.pipeline.nodes``) with its own state file."""
    out = Path(out).expanduser().absolute()
    resolve(pipeline, out)  # every stage checked before anything is created
    lay = nodes.layout(pipeline)
    if out.exists() and not nodes.is_pipeline_dir(out) and any(not nodes.in_passing(p) for p in out.iterdir()):
        raise AuraError(M("not_pipeline_dir", path=out))
    command = shlex.join(rerun)
    out.mkdir(parents=True, exist_ok=True)
    # one `pipeline run` per node and folder: node 0 locks DIR itself, node K its own lock inside it
    target = out / f"node-{lay.node_rank}" if lay.node_rank else out
    with output_lock(target, command="pipeline run"):
        state = State(out, name=lay.state_file)
        other = state.data.get("pipeline")
        if other and other != pipeline.path.stem:
            raise AuraError(M("other_pipeline", path=out, other=other))
        if lay.multi:
            console.always(nodes.describe(lay))
        fps, actions = _decide(pipeline, out, state, lay)
        changed = [
            s.name
            for s in pipeline.stages
            if actions[s.name] == "redo"  # the cause, not its downstream
            and not any(actions[r] in ("redo", "after") for r in s.refs)
        ]
        if changed:
            later = [s.name for s in pipeline.stages if actions[s.name] not in ("skip", "elsewhere")]
            console.always(M("changed", stages=", ".join(changed), redo=", ".join(later)))
        state.data.update(
            pipeline=pipeline.path.stem,
            source=pipeline.source,
            command=command,
            aura_version=__version__,
            price_per_hour=price,
            order=[s.name for s in pipeline.stages],
            nodes={"nnodes": lay.nnodes, "node_rank": lay.node_rank, "where": lay.where} if lay.multi else None,
        )
        invalidate(pipeline, actions, state)
        previous = signal.signal(signal.SIGTERM, _raise_interrupt)
        started = nodes.now_epoch()
        try:
            n = len(pipeline.stages)
            for i, stage in enumerate(pipeline.stages, 1):
                try:
                    code = _run_stage(
                        stage,
                        i=i,
                        n=n,
                        out=out,
                        state=state,
                        fp=fps[stage.name],
                        action=actions[stage.name],
                        command=command,
                        lay=lay,
                        started=started,
                    )
                finally:  # a half-done pipeline already has its report card (node 0's)
                    if lay.node_rank == 0:
                        report.write(out, pipeline, state)
                if code != 0:
                    return code
        finally:
            signal.signal(signal.SIGTERM, previous)
        if lay.node_rank:
            console.success(nodes.M("node_done", rank=lay.node_rank, path=out))
        else:
            console.success(M("all_done", n=n, path=out, report=out / report.MD))
    return 0


def _missing_module(stage: Stage) -> str | None:
    for module in stage.requires:
        try:
            if importlib.util.find_spec(module) is None:
                return module
        except (ImportError, ValueError):
            return module
    return None


def _run_stage(
    stage: Stage,
    *,
    i: int,
    n: int,
    out: Path,
    state: State,
    fp: str,
    action: str,
    command: str,
    lay: nodes.Layout | None = None,
    started: float = 0.0,
) -> int:
    lay = lay or nodes.Layout()
    name, where = stage.name, lay.where.get(stage.name, nodes.LOCAL)
    if action == "elsewhere":  # node 0's alone: said in one line, recorded, nothing written
        console.always(nodes.M("elsewhere", i=i, n=n, stage=name, rank=lay.node_rank))
        state.update(
            name,
            status=ELSEWHERE,
            fingerprint=fp,
            command=equivalent_command(stage),
            started=None,
            finished=None,
            seconds=0.0,
            exit_code=None,
            reason=None,
        )
        return 0
    if action == "skip":
        console.always(M("skip", i=i, n=n, stage=name))
        return 0
    if where != nodes.EVERY or not lay.multi:
        return _execute(stage, i=i, n=n, out=out, state=state, fp=fp, action=action, command=command, lay=lay)
    lock = nodes.stage_lock(out, name, i=i, n=n)  # a shared folder: one node writes it, the others take it
    try:
        made = nodes.made_elsewhere(out, lay, name, fp, started=started)
        if made is not None:
            node, rec = made
            console.always(nodes.M("adopted", i=i, n=n, stage=name, node=node))
            state.update(
                name,
                status=FINISHED,
                fingerprint=fp,
                made_by=node,
                command=rec.get("command"),
                options=rec.get("options"),
                started=rec.get("started"),
                finished=rec.get("finished"),
                finished_epoch=rec.get("finished_epoch"),
                seconds=0.0,
                exit_code=0,
                reason=None,
            )
            return 0
        return _execute(stage, i=i, n=n, out=out, state=state, fp=fp, action=action, command=command, lay=lay)
    finally:
        lock.release()


def _execute(
    stage: Stage, *, i: int, n: int, out: Path, state: State, fp: str, action: str, command: str, lay: nodes.Layout
) -> int:
    name, stage_dir = stage.name, out / stage.name
    # a multi-node stage's folder is node 0's to clear: another node (a shared folder) never touches it
    follower = lay.where.get(name) == nodes.ALL and lay.node_rank != 0
    missing = _missing_module(stage)
    if missing:
        _skip(stage, missing, i=i, n=n, out=out, state=state, fp=fp)
        return 0
    prev = state.get(name)
    cfg, spent, keep = _resumption(stage, action, i=i, n=n, out=out, prev=prev, follower=follower)
    resumed = cfg is not stage.cfg
    base, comm = stage.cfg, None
    if stage.comm is not None:  # the link measured now (or the flags the stage started with), then used
        base, comm = link.apply(stage, stage.cfg, i=i, n=n, out=out, prev=prev, resume=resumed, node_rank=lay.node_rank)
        cfg = dataclasses.replace(base, resume_from="latest") if resumed else base
    equivalent = equivalent_command(stage, base, launched=True)
    console.always(M("header", i=i, n=n, stage=name, command=equivalent))
    state.update(
        name,
        status=RUNNING,
        fingerprint=fp,
        command=equivalent,
        options=config_fields(stage.cfg),
        started=prev.get("started") if spent else now(),
        finished=None,
        exit_code=None,
        seconds=spent,
        reason=None,
        made_by=None,
        comm=comm,
    )
    if not resumed and not keep and stage_dir.exists() and not follower:  # the runner's own folder: starts clean
        shutil.rmtree(stage_dir)
    function, cfg = _entry(stage, cfg)
    t0 = time.monotonic()
    code: Any = 1
    saved_argv = sys.argv
    # a run records sys.argv (run.json, `aura runs`' resume hint): the stage's own command, not the pipeline's
    sys.argv = ["aura", *shlex.split(equivalent_command(stage, cfg))[1:]]
    try:
        code = function(cfg)
        code = int(code) if isinstance(code, int) else 0
    except KeyboardInterrupt:
        code = 3
    except AuraError as e:
        code = e.exit_code
        raise
    finally:
        sys.argv = saved_argv
        seconds = spent + time.monotonic() - t0
        status = FINISHED if code == 0 else INTERRUPTED if code == 3 else FAILED
        state.update(
            name,
            status=status,
            exit_code=code,
            seconds=round(seconds, 3),
            finished=now() if code == 0 else None,
            finished_epoch=time.time() if code == 0 else None,
        )
        if code not in (0, 3):
            console.error(M("failed", stage=name, code=code, command=command))
    if code == 3:
        console.error(M("stopped", stage=name, command=command))
        return 3
    if code == 0:
        console.success(M("stage_done", stage=name, time=console.format_duration(seconds)))
    return code


def _skip(stage: Stage, missing: str, *, i: int, n: int, out: Path, state: State, fp: str) -> None:
    """A stage whose ``requires`` module is missing: said, recorded as skipped, its folder empty."""
    stage_dir = out / stage.name
    console.warn(M("skip_missing", i=i, n=n, stage=stage.name, module=missing))
    if stage_dir.exists():
        shutil.rmtree(stage_dir)
    state.update(
        stage.name,
        status=SKIPPED,
        fingerprint=fp,
        reason=f"missing module {missing}",
        command=equivalent_command(stage),
        started=None,
        finished=now(),
        seconds=0.0,
        made_by=None,
    )
    stage_dir.mkdir(parents=True, exist_ok=True)


def _resumption(stage: Stage, action: str, *, i: int, n: int, out: Path, prev: dict, follower: bool):
    """(the config to run, the seconds already spent, whether the folder stays) for a stage run afresh or resumed.

    A command that resumes in its own folder (``Command.resumes_in_place``: ``aura data curate`` keeps each finished
    task, datatrove's completions/, and runs only the others) keeps an interrupted stage's folder; a training
    stage resumes from its latest checkpoint; every other command starts again in a clean folder."""
    cfg, stage_dir = stage.cfg, out / stage.name
    if action == "resume" and COMMANDS[stage.key].resumes_in_place and stage_dir.is_dir():
        console.always(M("resume_tasks", i=i, n=n, stage=stage.name))
        return cfg, float(prev.get("seconds") or 0.0), True
    if action == "resume":
        ckpt = latest_checkpoint(stage_dir) if hasattr(cfg, "resume_from") else None
        if ckpt is not None or (follower and hasattr(cfg, "resume_from")):  # node 0's rank 0 finds it
            console.always(M("resume", i=i, n=n, stage=stage.name, ckpt=ckpt.name if ckpt is not None else "latest"))
            return dataclasses.replace(cfg, resume_from="latest"), float(prev.get("seconds") or 0.0), False
        console.always(M("restart", i=i, n=n, stage=stage.name))
    return cfg, 0.0, False


def _entry(stage: Stage, cfg):
    """(the function to call, its config): the stage's command, or under torchrun ``aura launch``'s own function
    and config with the stage inside."""
    cmd = COMMANDS[stage.key]
    if stage.launch is None:
        return getattr(importlib.import_module(cmd.module), cmd.function), cfg
    launch = COMMANDS[("launch",)]
    module = importlib.import_module(launch.module)
    inner = shlex.split(equivalent_command(stage, cfg))[1:]  # without "aura"
    return getattr(module, launch.function), getattr(module, launch.config)(command=inner, **stage.launch)


def run_argv(source: str, out: str, sets: list[str], price: float | None, *, scale: float = 1.0) -> list[str]:
    """The command that runs (and resumes) this pipeline: the hint after a stop."""
    argv = ["aura", "pipeline", "run", source, "--output-dir", str(out)]
    if scale != 1:
        argv += ["--scale", f"{scale:g}"]
    for item in sets:
        argv += ["--set", item]
    if price is not None:
        argv += ["--price-per-hour", str(price)]
    return argv
