"""``DIR/pipeline.json``: each stage's resolved options, the fingerprint of its inputs, status and times.

A stage's fingerprint hashes its command, its resolved options (references kept as ``@stage/path``, so that
moving DIR changes nothing), the fingerprints of the stages it reads and the identity (size, mtime) of
every input file it names outside DIR. A stage is taken as done only when its status is ``finished`` and
its fingerprint is today's: the status becomes ``running`` (atomically, on disk) before the stage starts
and ``finished`` only after its function returned 0, so a run killed at any instant leaves nothing that
a later run takes as finished.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from aura.core.atomic import atomic_write_json
from aura.core.errors import AuraError
from aura.core.i18n import Messages
from aura.core.locks import lock_holder, lock_path

M = Messages(
    "pipeline.state",
    {
        "bad_state": (
            "{path} está dañado ({err}). Bórralo para empezar el pipeline de nuevo (las carpetas de las "
            "etapas se rehacen).",
            "{path} is damaged ({err}). Delete it to start the pipeline over (the stages' folders are redone).",
        ),
    },
)

STATE_FILE = "pipeline.json"
FINISHED, RUNNING, INTERRUPTED, FAILED, PENDING, SKIPPED, ELSEWHERE = (
    "finished",
    "running",
    "interrupted",
    "failed",
    "pending",
    "skipped",
    "elsewhere",
)  # elsewhere: node 0's
_MAX_FILES = 20_000  # a folder's identity lists at most this many files (a corpus of shards)


def _identity(path: Path) -> Any:
    """(size, mtime_ns) of a file, or of every file under a folder; None when it does not exist."""
    try:
        if path.is_file():
            st = path.stat()
            return [st.st_size, st.st_mtime_ns]
        if path.is_dir():
            out = []
            for root, dirs, files in os.walk(path):
                dirs.sort()
                for name in sorted(files):
                    p = Path(root) / name
                    st = p.stat()
                    out.append([str(p.relative_to(path)), st.st_size, st.st_mtime_ns])
                    if len(out) >= _MAX_FILES:
                        return out
            return out
    except OSError:
        return None
    return None


def fingerprint(*, command: str, options: dict[str, Any], out: Path, upstream: dict[str, str], resources: Path) -> str:
    """The hash of what a stage's result depends on (see the module's docstring)."""
    out_s, res_s = str(Path(out)), str(resources)
    files: dict[str, Any] = {}

    def portable(v):
        if isinstance(v, list):
            return [portable(x) for x in v]
        if isinstance(v, str):
            if v == out_s or v.startswith(out_s + os.sep):
                return "@" + os.path.relpath(v, out_s)
            if v == res_s or v.startswith(res_s + os.sep):
                return "aura:" + os.path.relpath(v, res_s)
            if v and (os.sep in v or "." in v) and os.path.exists(v):
                files[v] = _identity(Path(v))
        return v

    body = {
        "command": command,
        "options": {k: portable(v) for k, v in sorted(options.items()) if k != "output_dir"},
        "upstream": dict(sorted(upstream.items())),
        "files": files,
    }
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode("utf-8")).hexdigest()[:16]


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


class State:
    """The state file of one output folder (``name``: one node's, on several nodes), rewritten atomically on
    every change."""

    def __init__(self, out: Path, *, name: str = STATE_FILE):
        self.path = Path(out) / name
        self.data: dict[str, Any] = {"stages": {}}
        if self.path.is_file():
            try:
                data = json.loads(self.path.read_text(encoding="utf-8"))
                if not isinstance(data, dict) or not isinstance(data.get("stages"), dict):
                    raise ValueError("no 'stages'")
            except (ValueError, UnicodeDecodeError) as e:
                raise AuraError(M("bad_state", path=self.path, err=e)) from None
            self.data = data

    @property
    def stages(self) -> dict[str, dict[str, Any]]:
        return self.data["stages"]

    def get(self, name: str) -> dict[str, Any]:
        return self.stages.get(name, {})

    def update(self, name: str, **fields) -> None:
        self.stages.setdefault(name, {}).update(fields)
        self.save()

    def save(self) -> None:
        self.data["updated"] = now()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(self.path, self.data)


def describe(out: Path) -> dict[str, Any]:
    """What a reader (``aura studio``) shows of the pipeline folder ``out``: its name, when it was last
    updated, whether its runner is alive, and each stage in the pipeline's order with its status, its
    folder and whether that folder is a run (a training stage: ``run.json``). A stage recorded as
    ``running`` whose runner no longer holds the folder's lock (killed) reads ``interrupted``, as the next
    ``aura pipeline run`` will take it. Raises ``AuraError`` for a damaged state file."""
    out = Path(out)
    data = State(out).data
    live = lock_holder(lock_path(out.absolute())) is not None
    stages = data["stages"]
    order = data.get("order")
    names = [n for n in order if isinstance(n, str)] if isinstance(order, list) else []
    names += [n for n in stages if n not in names]
    listed = []
    for name in names:
        rec = stages.get(name)
        rec = rec if isinstance(rec, dict) else {}
        status = rec.get("status") if isinstance(rec.get("status"), str) else PENDING
        if status == RUNNING and not live:
            status = INTERRUPTED
        seconds = rec.get("seconds")
        listed.append(
            {
                "name": name,
                "status": status,
                "dir": str(out / name),
                "run": (out / name / "run.json").is_file(),
                "command": rec.get("command") if isinstance(rec.get("command"), str) else None,
                "seconds": seconds if isinstance(seconds, (int, float)) else None,
            }
        )

    def text(key):
        return data.get(key) if isinstance(data.get(key), str) else None

    return {
        "path": str(out),
        "name": out.name,
        "pipeline": text("pipeline"),
        "updated": text("updated"),
        "command": text("command"),
        "running": live,
        "stages": listed,
        "report": (out / "report.html").is_file(),
    }


def find_pipeline_dirs(root: Path) -> list[Path]:
    """The pipeline folders (``pipeline.json``) directly inside ``root``, by name."""
    try:
        return sorted(
            p for p in Path(root).iterdir() if p.is_dir() and not p.name.startswith(".") and (p / STATE_FILE).is_file()
        )
    except OSError:
        return []
