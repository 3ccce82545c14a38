"""Where ``aura eval`` writes task results, named after what was evaluated, so no evaluation replaces another.

``MODEL.eval-aura-es.json`` (beside the model folder) holds only the full aura-es suite on the model itself;
any other configuration says so in the name: ``final.eval-aura-es.limit20.json``,
``final.eval-tasks-spanish_bench.json``, ``final.eval-aura-es.adapter-chat-final.json`` (the adapter
``runs/chat/final`` on ``final``). ``--output-dir DIR`` uses the same names inside DIR
(``DIR/eval-aura-es.limit20.json``). ``suite_figure`` reads the full-suite result back: ``aura runs`` shows
it for a run whose ``final/`` was evaluated. Torch-free: ``aura eval`` checks every output before loading a
model, and ``aura runs`` reads results without the evaluation stack.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

SUITE_FILE = "eval-aura-es"  # the full suite, no adapter, no limit: the file `aura runs` reads
_RUN_PARTS = re.compile(r"final|best|(checkpoint|interrupt)-(step|epoch)-\d+")


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("._") or "_"


def task_list(tasks: str) -> list[str]:
    return [t.strip() for t in tasks.split(",") if t.strip()] if tasks else []


def adapter_label(adapter: str) -> str:
    """A short name for an adapter folder: its name, with its run's when the name alone says nothing
    (``runs/chat/final`` -> ``chat-final``)."""
    path = Path(adapter).expanduser().resolve()
    name = f"{path.parent.name}-{path.name}" if _RUN_PARTS.fullmatch(path.name) else path.name
    return _safe(name)


def result_stem(*, suite: str, tasks: str, limit: int, adapter: str, prompts: str = "", seeds: int = 1) -> str:
    """``eval-`` + the parts of the configuration: suite, tasks, limit, adapter (see the module doc). Answers to
    ``--prompts`` ride along in the suite's or tasks' file (they add to it, they replace nothing); alone
    they are ``eval-prompts``."""
    parts = [suite] if suite else []
    names = task_list(tasks)
    if names:
        joined = "+".join(_safe(t) for t in names)
        if len(joined) > 60:  # a long list: its start and a digest of the whole
            digest = hashlib.sha256(",".join(names).encode("utf-8")).hexdigest()[:8]
            joined = f"{joined[:40]}+{len(names)}-{digest}"
        parts.append(f"tasks-{joined}")
    if prompts and not parts:
        parts.append("prompts")
    if limit:
        parts.append(f"limit{limit}")
    if seeds > 1:
        parts.append(f"seeds{seeds}")
    if adapter:
        parts.append(f"adapter-{adapter_label(adapter)}")
    return "eval-" + ".".join(parts)


def stem_of(cfg) -> str:
    return result_stem(
        suite=cfg.suite,
        tasks=cfg.tasks,
        limit=cfg.limit,
        adapter=cfg.adapter,
        prompts=getattr(cfg, "prompts", ""),
        seeds=getattr(cfg, "seeds", 1),
    )


def group_members(name: str) -> list[str]:
    """The folders of one ``--model`` entry: ``A1,A2,A3`` is a recipe trained with three seeds."""
    return [m.strip() for m in name.split(",") if m.strip()] or [name]


def beside_entry(name: str, stem: str) -> Path:
    """Where one ``--model`` entry's results go: beside the model, or for a group of seeds (``A1,A2,A3``)
    beside its first model, named for the group (``A1.STEM.group3.json``)."""
    members = group_members(name)
    return beside_model(members[0], stem if len(members) == 1 else f"{stem}.group{len(members)}")


def beside_model(model: str, stem: str) -> Path:
    """``MODEL.STEM.json`` in the folder that holds the model."""
    path = Path(model).expanduser().resolve()
    return path.parent / f"{path.name}.{stem}.json"


def task_outputs(cfg) -> list[tuple[Path, str]]:
    """Every file ``aura eval --suite/--tasks`` will write, with the flag that chose it."""
    if not (cfg.suite or cfg.tasks or getattr(cfg, "prompts", "")):
        return []
    stem = stem_of(cfg)
    if cfg.output and not cfg.data:  # one file for all models (with --data, --output is the perplexity table)
        return [(Path(cfg.output), "--output")]
    if cfg.output_dir:
        return [(Path(cfg.output_dir) / f"{stem}.json", "--output-dir")]
    return [(beside_entry(name, stem), "aura eval") for name in cfg.models]


def suite_figure(model_dir: Path) -> float | None:
    """The mean accuracy over the aura-es tasks of the full-suite result beside ``model_dir``
    (``MODEL.eval-aura-es.json``, no adapter, no limit), or None."""
    path = model_dir.parent / f"{model_dir.name}.{SUITE_FILE}.json"
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(report, dict) or report.get("limit") or report.get("adapter"):
        return None
    accs = [r.get("value") for r in report.get("rows") or [] if isinstance(r, dict) and r.get("metric") == "acc"]
    accs = [a for a in accs if isinstance(a, (int, float))]
    return sum(accs) / len(accs) if accs else None
