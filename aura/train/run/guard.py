"""The run directory's safety rules, applied before any training command writes into it.

* ``prepare_run_dir``: check and lock ``--output-dir`` (one writer; only Aura's own run dir is ever
  cleared), refuse to mix two runs in it (unless ``--overwrite`` or ``--resume-from``), resolve
  ``--resume-from PATH|latest`` (an older checkpoint needs ``--fork``), and resume an elastic restart
  only into its own job. ``release_run_dir`` drops the lock at the end of the command.

Both run from the shared run setup (``aura.train.run.session``); the layout names live in ``aura.core.rundir``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from aura.core.errors import AuraError
from aura.core.i18n import Messages
from aura.core.rundir import (
    EPOCH_INFO,
    RUN_ENTRIES,
    RUN_JSON,
    TRAINING_LOG,
    RunLock,
    is_legacy_run,
    last_job,
    read_record,
    status_label,
)

M = Messages(
    "rundir_guard",
    {
        "other_run": (
            "{path} ya contiene otra ejecución (estado: {status}, paso {step}). Usa --resume-from latest "
            "para continuarla, --overwrite para empezar de cero en ese directorio, u otro --output-dir.",
            "{path} already holds another run (status: {status}, step {step}). Use --resume-from latest "
            "to continue it, --overwrite to start over in that directory, or another --output-dir.",
        ),
        "other_run_no_ckpt": (
            "{path} ya contiene otra ejecución (estado: {status}, paso {step}) sin ningún checkpoint "
            "que reanudar. Usa --overwrite para empezar de cero en ese directorio (se borran "
            "final/ y sus registros), u otro --output-dir.",
            "{path} already holds another run (status: {status}, step {step}) with no checkpoint "
            "to resume. Use --overwrite to start over in that directory (its final/ and logs "
            "are removed), or another --output-dir.",
        ),
        "unsaved_restart": (
            "{path} tiene una ejecución que se detuvo en el paso {step} antes de guardar su primer "
            "checkpoint: no hay nada que reanudar, así que se empieza de cero (se reemplazan sus "
            "registros: run.json, training_log.csv, tb/).",
            "{path} holds a run that stopped at step {step} before saving its first checkpoint: "
            "there is nothing to resume, so it starts over (its logs are replaced: run.json, "
            "training_log.csv, tb/).",
        ),
        "restart": (
            "torchrun reinició el grupo de procesos (reinicio {n}): se reanuda desde el último checkpoint: {path}",
            "torchrun restarted the worker group (restart {n}): resuming from the latest checkpoint: {path}",
        ),
        "restart_fresh": (
            "torchrun reinició el grupo de procesos (reinicio {n}) antes del primer checkpoint: se empieza de cero.",
            "torchrun restarted the worker group (restart {n}) before the first checkpoint: starting over.",
        ),
        "restart_other": (
            "torchrun reinició el grupo de procesos (reinicio {n}), pero {path} no lo escribió este "
            "trabajo: este intento se trata como el primero (no se reanuda ni se borra nada ajeno).",
            "torchrun restarted the worker group (restart {n}), but {path} was not written by this "
            "job: this attempt is treated as a first one (nothing of another run is resumed or "
            "cleared).",
        ),
        "busy": (
            "{path} lo está escribiendo otro proceso de Aura (pid {pid} en {host}, desde {since}). Dos "
            "ejecuciones en un mismo directorio mezclarían checkpoints, registros y final/. Espera a que "
            "termine (aura runs lo muestra), detenlo, o usa otro --output-dir.",
            "{path} is being written by another Aura process (pid {pid} on {host}, since {since}). Two runs "
            "in one directory would mix their checkpoints, logs and final/. Wait for it to finish (aura runs "
            "shows it), stop it, or use another --output-dir.",
        ),
        "not_dir": (
            "--output-dir {path} es un archivo, no un directorio. Elige otra ruta.",
            "--output-dir {path} is a file, not a directory. Choose another path.",
        ),
        "fork_needed": (
            "{path} es el paso {step}, pero {run} tiene checkpoints posteriores (pasos {later}). Reanudar "
            "desde él abriría una segunda rama de la ejecución y los checkpoints nuevos se mezclarían "
            "con los posteriores (o estos los borrarían al rotar). Reanuda desde el último con "
            "--resume-from latest, o añade --fork para seguir desde el paso {step} apartando los "
            "posteriores en {run}/{fork_prefix}{step}-…/ (no se borra nada).",
            "{path} is step {step}, but {run} has later checkpoints (steps {later}). Resuming from it "
            "would start a second branch of the run, and the new checkpoints would mix with the later "
            "ones (or be pruned by them). Resume from the newest with --resume-from latest, or add "
            "--fork to continue from step {step} and move the later ones aside into "
            "{run}/{fork_prefix}{step}-…/ (nothing is deleted).",
        ),
        "forked": (
            "--fork: se sigue desde el paso {step}; lo posterior ({moved}) se movió a {dest} (no se borró nada).",
            "--fork: continuing from step {step}; what came later ({moved}) was moved to {dest} (nothing was deleted).",
        ),
        "untrusted": (
            "Se reanuda desde {path}, en un directorio que no creó Aura (no tiene {marker}). Como los de "
            "DeepSpeed, los checkpoints de Aura deben venir de una fuente de confianza: reanuda solo "
            "los que hiciste tú o de quien te fías.",
            "Resuming from {path}, in a directory Aura did not create (it has no {marker}). Like "
            "DeepSpeed's, Aura's checkpoints must come from a trusted source: resume only ones you "
            "made or trust.",
        ),
    },
)


def existing_run(out: Path) -> dict | None:
    """run.json of a previous run in ``out`` (or a stand-in when only checkpoints/final exist)."""
    from aura.core.atomic import read_json
    from aura.core.rundir import list_checkpoints

    if (out / RUN_JSON).is_file():
        try:
            info = read_json(out / RUN_JSON)
        except (OSError, ValueError):
            info = None
        return info if isinstance(info, dict) else {"status": "?", "last_step": "?"}
    refs = list_checkpoints(out)
    if refs or (out / "final").is_dir():
        return {"status": "?", "last_step": refs[-1].step if refs else "?"}
    return None


def holds_nothing_to_keep(out: Path) -> bool:
    """A run dir whose run stopped before its first checkpoint (a double Ctrl+C, a crash, a kill): no
    checkpoint (complete or not), no final/, no best/. Nothing in it can be resumed or used, so the same
    command may start over in it without --overwrite (only its logs and run.json are replaced)."""
    from aura.core.rundir import BEST, CHECKPOINT_RE, FINAL

    return not any(CHECKPOINT_RE.match(p.name) or p.name in (FINAL, BEST) for p in out.iterdir())


def clear_run(out: Path) -> None:
    """--overwrite: remove what a previous run wrote (only Aura's own entries, in Aura's own run dir)."""
    from aura.core.rundir import list_checkpoints

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


# ---- one writer per run dir ---------------------------------------------------------------------

_LOCKS: dict[str, RunLock] = {}  # run dirs this process holds (rank 0), released by release_run_dir


_CREATED: dict[str, Path | None] = {}  # run dirs this command created: the topmost new dir, or None (was empty)


def release_run_dir(out: str | Path | None = None) -> None:
    """Drop this process's lock on ``out`` (all of them with None); process exit drops them too."""
    for key in [k for k in _LOCKS if out is None or k == str(Path(out).resolve())]:
        _LOCKS.pop(key).release()
    for key in [k for k in _CREATED if out is None or k == str(Path(out).resolve())]:
        _CREATED.pop(key)


def discard_unstarted_run_dir(out: str | Path) -> None:
    """A command that failed before training began (a flag, missing data, another tokenizer) leaves no run
    dir holding only its marker and lock: what it created is removed, the directories it created included
    (an empty directory that was there stays, emptied). Once run.json exists the run began: nothing is
    touched. Rank 0 only (the other ranks never created anything)."""
    key = str(Path(out).resolve())
    if key not in _CREATED or key not in _LOCKS or (Path(out) / RUN_JSON).exists():
        return
    top = _CREATED.pop(key)
    _LOCKS.pop(key).release()
    if top is not None:
        shutil.rmtree(top, ignore_errors=True)
        return
    for entry in Path(out).iterdir():  # the dir was empty: everything in it is this command's
        shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() and not entry.is_symlink() else entry.unlink()


def _lock(out: Path, *, wait_s: float) -> RunLock:
    key = str(out.resolve())
    if key in _LOCKS:  # this process already writes it (an in-process second command)
        return _LOCKS[key]
    lock = RunLock(out)
    holder = lock.acquire(wait_s=wait_s)
    if holder is not None:
        raise AuraError(
            M(
                "busy",
                path=out,
                pid=holder.get("pid", "?"),
                host=holder.get("host", "?"),
                since=holder.get("since", "?"),
            )
        )
    _LOCKS[key] = lock
    return lock


def _agent() -> str:
    """This worker's launcher: under torchrun the elastic agent, the same process across restarts of
    the worker group and new for every job (host, pid, start time and torchrun's run id)."""
    import os
    import socket

    import psutil

    try:
        started = f"{psutil.Process(os.getppid()).create_time():.2f}"
    except psutil.Error:
        started = "?"
    return f"{socket.gethostname()}:{os.getppid()}:{started}:{os.environ.get('TORCHELASTIC_RUN_ID', '')}"


def _agents(dist) -> list[str]:
    """The launchers of every rank (collective). A restarted group may place rank 0 on another node,
    so a job is recognised by any of its agents."""
    mine = _agent()
    if not dist.is_distributed:
        return [mine]
    import torch.distributed

    every: list = [None] * dist.world_size
    torch.distributed.all_gather_object(every, mine)
    return sorted(set(every))


def _same_job(job: dict | None, agents: list[str]) -> bool:
    return isinstance(job, dict) and bool(set(job.get("agents") or []) & set(agents))


# ---- the run directory before training ----------------------------------------------------------


def _standing(out: Path) -> str:
    """absent | empty | run (Aura's marker) | legacy (an older Aura's run) | other:KIND | foreign."""
    from aura.core import ownership

    if not out.exists():
        return "absent"
    if not out.is_dir():
        raise AuraError(M("not_dir", path=out))
    if ownership.is_empty_dir(out):
        return "empty"
    kind = ownership.owned_kind(out)
    if kind == "run":
        return "run"
    if kind is not None:
        return f"other:{kind}"
    return "legacy" if is_legacy_run(out) else "foreign"


def _adopt_legacy(out: Path) -> None:
    """Give an older Aura's run dir (and its checkpoints, final/, best/) the markers it lacks."""
    from aura.core import ownership
    from aura.core.rundir import BEST, FINAL, list_checkpoints

    for ref in list_checkpoints(out):
        if ownership.read_marker(ref.path) is None:
            ownership.write_marker(ref.path, "checkpoint")
    for name in (FINAL, BEST):
        d = out / name
        if d.is_dir() and ownership.read_marker(d) is None and not ownership.is_empty_dir(d):
            ownership.write_marker(d, "adapter" if (d / "adapter_config.json").is_file() else "model")
    ownership.write_marker(out, "run")


def _fork(out: Path, resume: Path, step: int, *, fork: bool) -> None:
    """Refuse to resume an older checkpoint while later ones exist, or (--fork) move them aside."""
    import time

    from aura.core import console
    from aura.core.rundir import BEST, FINAL, FORK_PREFIX, list_checkpoints

    later = [r for r in list_checkpoints(out) if r.step > step and r.path.resolve() != resume.resolve()]
    if not later:
        return
    if not fork:
        raise AuraError(
            M(
                "fork_needed",
                path=resume,
                step=step,
                run=out,
                fork_prefix=FORK_PREFIX,
                later=", ".join(str(r.step) for r in later),
            )
        )
    dest = out / f"{FORK_PREFIX}{step}-{time.strftime('%Y%m%d-%H%M%S')}"
    n = 1
    while dest.exists() or dest.is_symlink():
        n += 1
        dest = dest.with_name(f"{FORK_PREFIX}{step}-{time.strftime('%Y%m%d-%H%M%S')}-{n}")
    dest.mkdir()
    moved = [r.path for r in later]
    if (out / FINAL).is_dir():
        moved.append(out / FINAL)
    best_step = read_record(out / BEST / "best.json").get("step")
    if (out / BEST).is_dir() and not (isinstance(best_step, int) and best_step <= step):
        moved.append(out / BEST)  # best/ of the abandoned branch (one from before the fork point stays)
    for p in moved:
        p.rename(dest / p.name)
    for name in (TRAINING_LOG, EPOCH_INFO):  # the abandoned branch's curves, as they were
        if (out / name).is_file() and not (out / name).is_symlink():  # never a file a link points to
            shutil.copy2(out / name, dest / name)
    console.warn(M("forked", step=step, dest=dest, moved=", ".join(p.name for p in moved)))


def prepare_run_dir(
    out: Path, *, dist, resume_from: str | None, overwrite: bool, fork: bool = False, inputs=()
) -> Path | None:
    """Check and lock ``out`` on rank 0 (collective); the checkpoint to resume, or None.

    * ``out`` is never /, $HOME, the current directory or one of the command's ``inputs`` (nor inside
      or around one); an existing non-empty directory must be Aura's run dir (marker ``kind: run``, or
      an older Aura's run.json), except to resume a checkpoint the user names in it (with a warning).
    * One writer: rank 0 holds ``out``'s OS lock for the whole command; a second writer is refused,
      naming the holder.
    * A run dir holding a run needs --resume-from or --overwrite (which clears only Aura's entries).
    * Resuming a checkpoint older than the run's newest needs --fork (later ones are moved aside).
    * Fault tolerance: when torchrun restarts the group (``--max-restarts``, TORCHELASTIC_RESTART_COUNT
      > 0) and ``out`` was last written by this same job (the job recorded in the lock file by its
      first attempt), the newest checkpoint is resumed by itself (with none yet, an unfinished
      attempt's logs are cleared). A directory written by another job is never resumed or cleared that
      way: the attempt behaves as a first one.
    """
    out = Path(out)
    agents = _agents(dist)
    if resume_from or elastic_restart() > 0:  # the checkpoint may be on another node's disk only
        from aura.distributed.ckpt_sync import share_resume

        share_resume(out, resume_from, dist=dist)
    verdict: dict | None = None
    if dist.is_main:
        try:
            verdict = {
                "resume": _prepare_main(
                    out,
                    resume_from=resume_from,
                    overwrite=overwrite,
                    fork=fork,
                    inputs=[str(i) for i in inputs if i],
                    agents=agents,
                )
            }
        except AuraError as e:
            verdict = {"error": str(e)}
    verdict = dist.broadcast_object(verdict)
    if "error" in verdict:
        raise AuraError(verdict["error"])
    if not verdict["resume"]:
        return None
    return _local_copy(Path(verdict["resume"]), out, dist=dist)


def _local_copy(resume: Path, out: Path, *, dist) -> Path:
    """This rank's path to rank 0's checkpoint ``resume``, made whole (collective).

    A checkpoint in rank 0's run dir is looked for in this node's own ``out`` (on a LAN without a shared
    disk each node may name another folder); any other path as it is. What this node lacks is sent over
    the process group (``aura.distributed.ckpt_sync``); a part no node holds refuses every rank."""
    from aura.distributed.ckpt_sync import fetch_checkpoint

    rel = dist.broadcast_object(resume.name if resume.parent.resolve() == out.resolve() else None)
    local = out / rel if rel is not None else resume
    fetch_checkpoint(local, dist=dist)
    return local


def _prepare_main(out: Path, *, resume_from, overwrite, fork, inputs, agents) -> str | None:
    import time
    import uuid

    from aura.core import console, ownership
    from aura.core.atomic import check_writable
    from aura.train.run import checkpoint as ckpt

    restart = elastic_restart()
    own = [(out / name).resolve() for name in ("data", "tokenizer")]  # a run's own inputs live inside it
    inputs = [i for i in inputs if not any(p == d or d in p.parents for p in [Path(i).resolve()] for d in own)]
    ownership.check_location(out, inputs=inputs)
    standing = _standing(out)
    if standing.startswith("other:"):
        raise AuraError(
            ownership.M(
                "not_ours",
                path=out,
                marker=ownership.MARKER,
                flag="--overwrite",
                kind_note=ownership.M("other_kind", kind="run", found=standing[6:]),
            )
        )
    same_job = restart > 0 and _same_job(last_job(out) if standing != "absent" else None, agents)
    if standing == "foreign" and not resume_from and not same_job:
        raise AuraError(ownership.M("not_ours", path=out, marker=ownership.MARKER, kind_note="", flag="--overwrite"))
    if resume_from and not same_job:
        ckpt.resolve_resume(resume_from, out)  # a wrong --resume-from fails before anything is written
    check_writable(out, flag="--output-dir")
    if standing in ("absent", "empty"):  # what this command creates, removed again if it fails before training
        top = out
        while not top.parent.exists() and top.parent != top.parent.parent:
            top = top.parent
        _CREATED[str(out.resolve())] = top if standing == "absent" else None
    out.mkdir(parents=True, exist_ok=True)
    lock = _lock(out, wait_s=30.0 if restart else 1.0)  # a restart waits for the old attempt to exit
    same_job = restart > 0 and _same_job(lock.previous.get("job"), agents)
    if same_job:
        latest = ckpt.latest_checkpoint(out)
        previous = existing_run(out)
        console.info(M("restart", n=restart, path=latest) if latest is not None else M("restart_fresh", n=restart))
        if latest is not None:
            resume_from, overwrite, fork = str(latest), False, False
        elif previous and previous.get("status") != "finished" and not resume_from:
            overwrite = True
    elif restart > 0:
        console.warn(M("restart_other", n=restart, path=out))
    existing = existing_run(out) if standing in ("run", "legacy") else None
    if existing and not resume_from:
        step = existing.get("last_step")
        if not overwrite and holds_nothing_to_keep(out):  # a run stopped before its first save: start over
            console.info(M("unsaved_restart", path=out, step=step if isinstance(step, int) else "?"))
            overwrite = True
        if not overwrite:
            key = "other_run" if ckpt.latest_checkpoint(out) is not None else "other_run_no_ckpt"
            raise AuraError(M(key, path=out, status=status_label(str(existing.get("status"))), step=step))
        clear_run(out)
    if standing in ("absent", "empty"):
        ownership.write_marker(out, "run")
    elif standing == "legacy":
        _adopt_legacy(out)
    resume = ckpt.resolve_resume(resume_from, out) if resume_from else None
    if resume is not None:
        _fork(out, resume, int(ckpt.read_state(resume)["step"]), fork=fork)
        home = resume.parent
        if ownership.owned_kind(home) != "run" and not is_legacy_run(home):
            console.warn(M("untrusted", path=resume, marker=ownership.MARKER))
    if not same_job:
        lock.set_job({"id": uuid.uuid4().hex, "agents": agents, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    return str(resume) if resume is not None else None
