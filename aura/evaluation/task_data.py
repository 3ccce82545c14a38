"""Where the data of lm-evaluation-harness tasks lives, checked on this machine before any download.

Most of lm-eval's tasks (``spanish_bench``, ``global_mmlu_es``...) read a Hugging Face hub dataset named
by their YAML's ``dataset_path``. Offline, ``datasets`` and ``huggingface_hub`` retry every file for about
a minute and then fail in English. ``missing_hub_data`` walks lm-eval's own task index (groups, tags,
``include`` files; nothing is downloaded or imported from a task) and lists the hub datasets that are not
in the local caches; ``hub_unreachable`` asks the hub's host (or the HTTPS proxy) once, with a short
timeout. ``aura eval --tasks`` refuses at once, in the user's language, when data is missing and the hub
cannot be reached, and names what works without a network (``--suite aura-es``).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from urllib.parse import urlsplit

_TRUE = ("1", "on", "yes", "true")


def _hf_home() -> Path:
    return Path(
        os.environ.get("HF_HOME") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "huggingface"
    ).expanduser()


def is_cached(dataset: str) -> bool:
    """True when ``dataset`` (``org/name``) is in the hub cache or the ``datasets`` cache of this machine."""
    hub = Path(os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE") or _hf_home() / "hub")
    built = Path(os.environ.get("HF_DATASETS_CACHE") or _hf_home() / "datasets")
    names = {dataset, dataset.lower()}
    return any(
        (hub / f"datasets--{n.replace('/', '--')}").is_dir() or (built / n.replace("/", "___")).is_dir() for n in names
    )


def _packaged() -> set[str]:
    """The loaders ``datasets`` ships (json, csv, parquet, text...): they read files, not the hub."""
    try:
        from datasets.packaged_modules import _PACKAGED_DATASETS_MODULES
    except ImportError:
        return {"json", "csv", "parquet", "text", "arrow", "pandas"}
    return set(_PACKAGED_DATASETS_MODULES)


def _needs_hub(cfg: dict, packaged: set[str]) -> str | None:
    """The hub dataset a task config reads, or None (local files, a packaged loader on local files, or a
    task that does not say)."""
    path = cfg.get("dataset_path")
    if not isinstance(path, str) or not path:
        return None
    if path in packaged:
        files = (
            (cfg.get("dataset_kwargs") or {}).get("data_files") if isinstance(cfg.get("dataset_kwargs"), dict) else None
        )
        flat = [
            v
            for f in (files.values() if isinstance(files, dict) else [files])
            for v in (f if isinstance(f, (list, tuple)) else [f])
        ]
        urls = [u for u in flat if "://" in str(u)]
        return str(urls[0]) if urls else None  # data files given as URLs need the network too
    if Path(path).expanduser().exists():
        return None
    return path


def _full_config(entry) -> dict:
    cfg = dict(entry.cfg or {})
    if "dataset_path" not in cfg and "include" in cfg and entry.yaml_path is not None:
        from lm_eval.tasks._yaml_loader import load_yaml

        cfg = load_yaml(entry.yaml_path, resolve_func=False, recursive=True)
    return cfg


def hub_datasets(manager, name, *, _seen: set | None = None) -> list[str]:
    """The hub datasets task/group/tag ``name`` (or an inline task or group config) reads, from lm-eval's
    task index only (nothing is downloaded)."""
    seen = set() if _seen is None else _seen
    index = getattr(manager, "task_index", {})
    packaged = _packaged()
    if isinstance(name, list):
        return [d for item in name for d in hub_datasets(manager, item, _seen=seen)]
    if isinstance(name, dict):  # a member of a group: a reference with overrides, or defined inline
        if "dataset_path" in name:
            found = _needs_hub(name, packaged)
            return [found] if found else []
        ref = name.get("group", name.get("task"))
        if isinstance(ref, str) and ref in index:
            return hub_datasets(manager, ref, _seen=seen)
        return hub_datasets(manager, name.get("task"), _seen=seen)  # an inline group's members
    if not isinstance(name, str) or name in seen or name not in index:
        return []
    seen.add(name)
    entry = index[name]
    kind = getattr(entry.kind, "name", str(entry.kind))
    if kind == "TAG":
        return [d for member in sorted(entry.tags) for d in hub_datasets(manager, member, _seen=seen)]
    if kind == "GROUP":
        return hub_datasets(manager, (entry.cfg or {}).get("task"), _seen=seen)
    try:
        found = _needs_hub(_full_config(entry), packaged)
    except (OSError, ValueError, ImportError):  # a file lm-eval itself will report on
        return []
    return [found] if found else []


def missing_hub_data(manager, tasks: list) -> dict[str, list[str]]:
    """{task: the hub datasets it reads that are not cached here}, for the tasks (names or full task configs)
    that miss some."""
    out = {}
    for task in tasks:
        missing = sorted({d for d in hub_datasets(manager, task) if not is_cached(d)})
        if missing:
            out[task.get("task", "?") if isinstance(task, dict) else task] = missing
    return out


def offline_var() -> str | None:
    """The environment variable that turns Hugging Face's offline mode on, or None."""
    return next(
        (
            v
            for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")
            if os.environ.get(v, "").strip().lower() in _TRUE
        ),
        None,
    )


def hub_unreachable(*, timeout_s: float = 3.0) -> str | None:
    """None when the hub answers a TCP connection (directly, or through the HTTPS proxy), else the
    ``host:port`` that did not."""
    endpoint = urlsplit(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    proxy = os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy")
    target = urlsplit(proxy if proxy and "://" in proxy else f"http://{proxy}") if proxy else endpoint
    host = target.hostname or "huggingface.co"
    port = target.port or (443 if target.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except OSError:
        return f"{host}:{port}"
