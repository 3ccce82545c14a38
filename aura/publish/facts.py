"""What Aura knows about a model it publishes, read from the files its commands wrote: the run's
``run.json`` (through ``aura.watch.runs``), ``model_config.json`` and ``training_log.csv`` (the recipe), the prepared
data's
``meta.json``, the tokenizer's ``aura_tokenizer.json`` and a curation's ``.curate/report.json`` (the data),
the eval JSONs of ``aura eval`` (the results) and a pipeline's ``report.json`` (device-hours and cost).

Every value is the file's own (nothing recomputed that a file states); a file that is missing or cannot
be read leaves its part out. Local paths are reduced to their last component: a published card never
carries the folders of the machine that trained the model.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from aura.core.hub import looks_like_path
from aura.pipeline.report_card import eval_results, read_report, training_summary
from aura.publish.upload_plan import Source

_RUN_PART = re.compile(r"final|best|(checkpoint|interrupt)-(step|epoch)-\d+")
REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")


def read_object(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None


def hub_id(name: str | None) -> str | None:
    """``name`` when it names a hub repository (``owner/name``, not a local path), else None."""
    if not name or looks_like_path(name) or Path(name).expanduser().exists():
        return None
    return name if REPO_ID.fullmatch(name) else None


def short_name(name: str | None) -> str | None:
    """A local path's last component, with its run's name for a run's model folder (``chat/final``); a hub
    name as it is."""
    if not name:
        return None
    if hub_id(name):
        return name
    path = Path(str(name).rstrip("/"))
    return f"{path.parent.name}/{path.name}" if _RUN_PART.fullmatch(path.name) and path.parent.name else path.name


def recipe(run_dir: Path) -> dict[str, Any] | None:
    """The recipe: preset/method, optimizer, schedule, batch and tokens, from model_config.json, run.json
    and training_log.csv."""
    from aura.watch.runs import describe_run

    mc = read_object(run_dir / "model_config.json") or {}
    run = describe_run(run_dir)  # run.json as `aura runs` reads it (types checked, live status)
    cfg = mc.get("config") if isinstance(mc.get("config"), dict) else {}
    plan = mc.get("plan") if isinstance(mc.get("plan"), dict) else {}
    sched = plan.get("schedule") if isinstance(plan.get("schedule"), dict) else {}
    layout = run.get("layout") or {}
    log = training_summary(run_dir) or {}
    out = {
        "command": run.get("kind") or mc.get("kind"),
        "status": run.get("status"),
        "preset": mc.get("preset"),
        "arch": (mc.get("model_spec") or {}).get("arch") if isinstance(mc.get("model_spec"), dict) else None,
        "parameters": mc.get("parameters"),
        "trainable_parameters": mc.get("trainable_parameters"),
        "method": mc.get("method"),
        "lora": mc.get("lora") if isinstance(mc.get("lora"), dict) else None,
        "objective": mc.get("objective"),
        "base_model": short_name(mc.get("base_model")),
        "optimizer": cfg.get("optimizer") or "adamw",
        "learning_rate": sched.get("base", cfg.get("learning_rate")),
        "min_lr": sched.get("min_lr"),
        "schedule": sched.get("kind"),
        "warmup_steps": sched.get("warmup"),
        "cooldown_fraction": sched.get("cooldown_fraction") if sched.get("kind") == "wsd" else None,
        "weight_decay": cfg.get("weight_decay"),
        "adam_betas": [cfg.get("adam_beta1"), cfg.get("adam_beta2")] if cfg.get("adam_beta1") is not None else None,
        "max_grad_norm": cfg.get("max_grad_norm"),
        "precision": mc.get("precision"),
        "seed": cfg.get("seed"),
        "batch_size": cfg.get("batch_size"),
        "gradient_accumulation_steps": cfg.get("gradient_accumulation_steps"),
        "sequence_length": cfg.get("seq_length") or cfg.get("max_length"),
        "tokens_per_step": plan.get("tokens_per_step"),
        "total_steps": run.get("total_steps") or plan.get("total_steps"),
        "last_step": run.get("last_step"),
        "epochs": plan.get("epochs"),
        "world_size": layout.get("world_size", mc.get("world_size") or 1),
        "nnodes": layout.get("nnodes", 1),
        "strategy": mc.get("strategy"),
        "tokens": log.get("tokens"),
        "train_seconds": log.get("seconds"),
        "final_train_loss": log.get("final_loss"),
        "final_val_loss": log.get("val_loss"),
        "peak_memory_gb": log.get("mem_peak_gb"),
    }
    return {k: v for k, v in out.items() if v is not None}


def hardware(run_dir: Path) -> dict[str, Any] | None:
    from aura.watch.runs import describe_run

    mc = read_object(run_dir / "model_config.json") or {}
    hw = mc.get("hardware") if isinstance(mc.get("hardware"), dict) else None
    if not hw:
        return None
    layout = describe_run(run_dir).get("layout") or {}
    return {
        "device": hw.get("name"),
        "device_type": hw.get("device_type"),
        "per_node": hw.get("count"),
        "processes": layout.get("world_size", mc.get("world_size") or 1),
        "nodes": layout.get("nnodes") or 1,
    }


def _tokenizer(path: str | None) -> dict[str, Any] | None:
    if not path:
        return None
    info = read_object(Path(path) / "aura_tokenizer.json")
    if not info:
        return None
    fert = info.get("fertility") if isinstance(info.get("fertility"), dict) else {}
    return {"name": short_name(path), "vocab_size": info.get("vocab_size"), "fertility": fert.get("tokens_per_word")}


def _curation(source_path: str) -> list[dict[str, Any]] | None:
    """The funnel of ``aura data curate`` (``.curate/report.json``) when the data came from one."""
    p = Path(source_path)
    for d in (p, p.parent):
        rep = read_object(d / ".curate" / "report.json")
        if rep and isinstance(rep.get("stages"), list):
            return [
                {"stage": s.get("stage"), "docs_in": s.get("docs_in"), "docs_out": s.get("docs_out")}
                for s in rep["stages"]
                if isinstance(s, dict)
            ]
    return None


def data(run_dir: Path) -> dict[str, Any] | None:
    """Sources (names, sizes, hub datasets), the cleaning/curation funnel and the tokenizer's fertility."""
    mc = read_object(run_dir / "model_config.json") or {}
    cfg = mc.get("config") if isinstance(mc.get("config"), dict) else {}
    out: dict[str, Any] = {}
    data_dirs = [d for d in (cfg.get("data") if isinstance(cfg.get("data"), list) else []) if isinstance(d, str)]
    if isinstance(cfg.get("data"), str):  # finetune: one instruction file, folder or hub dataset
        out["instructions"] = short_name(cfg["data"])
        if isinstance(mc.get("examples"), dict):
            out["examples"] = mc["examples"]
        if hub_id(cfg["data"]):
            out["datasets"] = [cfg["data"]]
    sources, datasets, funnel = [], list(out.get("datasets", [])), []
    for d in data_dirs:
        meta = read_object(Path(d) / "meta.json")
        if not meta:
            continue
        for s in meta.get("sources") or []:
            if not isinstance(s, dict) or not s.get("path"):
                continue
            if s.get("kind") == "hf_hub":
                datasets.append(s["path"])
            sources.append({"name": short_name(s["path"]), "bytes": s.get("bytes"), "kind": s.get("kind")})
            funnel += _curation(s["path"]) or []
        cleaning = meta.get("cleaning") if isinstance(meta.get("cleaning"), dict) else {}
        splits = meta.get("splits") if isinstance(meta.get("splits"), dict) else {}
        out.setdefault("prepared", []).append(
            {
                "name": short_name(d),
                "documents_read": cleaning.get("documents_read"),
                "documents_kept": cleaning.get("documents_kept"),
                "duplicates": cleaning.get("duplicates"),
                "too_short": cleaning.get("too_short"),
                "train_tokens": (splits.get("train") or {}).get("tokens"),
                "val_tokens": (splits.get("val") or {}).get("tokens"),
            }
        )
        tok = _tokenizer(str(Path(d) / "tokenizer")) or _tokenizer((meta.get("tokenizer") or {}).get("name_or_path"))
        if tok:
            out["tokenizer"] = tok
    if "tokenizer" not in out and isinstance(mc.get("tokenizer"), dict):
        tok = _tokenizer(mc["tokenizer"].get("path"))
        if tok:
            out["tokenizer"] = tok
    if sources:
        out["sources"] = sources
    if datasets:
        out["datasets"] = sorted(set(datasets))
    if funnel:
        out["curation"] = funnel
    return out or None


def _same(a: str | None, b: Path) -> bool:
    if not a:
        return False
    try:
        return Path(a).expanduser().resolve() == b.resolve()
    except OSError:
        return False


def evaluations(source: Source) -> list[dict[str, Any]]:
    """The eval results of this model: ``MODEL.eval-*.json`` beside it (named after it by ``aura eval``)
    and, in a pipeline, every stage's result whose model (or adapter) is this folder."""
    model = source.model_dir
    if model is None:
        return []
    found: list[dict[str, Any]] = []
    adapter = source.kind == "adapter"
    for path in sorted(model.parent.glob(f"{model.name}.eval*.json")):
        data = read_object(path) or {}
        # one model's report (aura eval beside the model), or {"results": [...]} for several
        for r in data.get("results") or ([data] if "rows" in data else []):
            if isinstance(r, dict) and (bool(r.get("adapter")) == adapter or _same(r.get("adapter"), model)):
                found.append(dict(r, _file=path.name, _data=data.get("data")))
    if source.pipeline_dir is not None:
        state = read_object(source.pipeline_dir / "pipeline.json") or {}
        stages = state.get("stages") if isinstance(state.get("stages"), dict) else {}
        for stage in sorted(p for p in source.pipeline_dir.iterdir() if p.is_dir()):
            options = (stages.get(stage.name) or {}).get("options") or {}
            # A perplexity result does not record the adapter it was measured with: the stage's options do.
            stage_adapter = options.get("adapter") if isinstance(options, dict) else None
            for r in eval_results(stage):
                used = r.get("adapter") or stage_adapter
                mine = _same(used, model) if adapter else (_same(r.get("model"), model) and not used)
                if mine:
                    data = read_object(stage / r["_file"]) or {}
                    found.append(dict(r, _file=f"{stage.name}/{r['_file']}", _data=data.get("data")))
    return found


def cost(source: Source) -> dict[str, Any] | None:
    """Device-hours and cost of the pipeline that made the model (its report.json), with the stage that
    trained it, or None outside a pipeline."""
    if source.pipeline_dir is None:
        return None
    report = read_report(source.pipeline_dir)
    if report is None:
        return None
    stages = [s for s in report["stages"] if isinstance(s, dict)]
    total_h = sum(s.get("device_hours") or 0.0 for s in stages)
    priced = report.get("price_per_hour") is not None
    own = next((s for s in stages if source.run_dir is not None and s.get("name") == source.run_dir.name), {})
    return {
        "pipeline": report.get("pipeline"),
        "price_per_hour": report.get("price_per_hour"),
        "device_hours": total_h,
        "cost": sum(s.get("cost") or 0.0 for s in stages) if priced else None,
        "stage": own.get("name"),
        "stage_device_hours": own.get("device_hours"),
        "stage_cost": own.get("cost"),
        "stages": [
            {
                "name": s.get("name"),
                "command": s.get("command_name"),
                "status": s.get("status"),
                "device_hours": s.get("device_hours"),
                "cost": s.get("cost"),
                "notes": s.get("notes") or {},
            }
            for s in stages
        ],
        "environment": report.get("environment"),
    }


def base_model(source: Source, override: str = "") -> tuple[str | None, str | None]:
    """(hub id for the card's ``base_model``, the base as the run named it) of a fine-tune or adapter."""
    named = None
    if source.kind == "adapter" and source.model_dir is not None:
        named = (read_object(source.model_dir / "adapter_config.json") or {}).get("base_model_name_or_path")
    if not named and source.model_dir is not None:  # a model aura merge wrote
        named = (read_object(source.model_dir / "aura_merge.json") or {}).get("base_model")
    if not named and source.run_dir is not None:
        named = (read_object(source.run_dir / "model_config.json") or {}).get("base_model")
    return (override or hub_id(named)), short_name(named)


def model_facts(source: Source) -> dict[str, Any]:
    config = read_object(source.model_dir / "config.json") if source.kind == "model" and source.model_dir else None
    adapter = (
        read_object(source.model_dir / "adapter_config.json") if source.kind == "adapter" and source.model_dir else None
    )
    out: dict[str, Any] = {}
    if config:
        out.update(
            model_type=config.get("model_type"),
            architectures=config.get("architectures"),
            vocab_size=config.get("vocab_size"),
            context=config.get("max_position_embeddings"),
            hidden_size=config.get("hidden_size"),
            layers=config.get("num_hidden_layers"),
        )
    if adapter:
        summary = (read_object(source.model_dir / "aura_adapter.json") or {}).get("config_summary")
        if isinstance(summary, dict):
            out["model_type"] = summary.get("model_type")
        out.update(
            peft_type=adapter.get("peft_type"),
            r=adapter.get("r"),
            lora_alpha=adapter.get("lora_alpha"),
            target_modules=adapter.get("target_modules"),
        )
    return {k: v for k, v in out.items() if v is not None}


def gather(source: Source, *, base_override: str = "") -> dict[str, Any]:
    """All of the above for one source (plain JSON-friendly data)."""
    run = source.run_dir
    hub_base, named_base = base_model(source, base_override)
    recipe_ = recipe(run) if run else None
    if recipe_ and hub_base and recipe_.get("base_model"):
        recipe_["base_model"] = hub_base  # the name others can download (--base-model)
    return {
        "kind": source.kind,
        "model": model_facts(source),
        "base_model": hub_base,
        "base_model_named": named_base,
        "recipe": recipe_,
        "hardware": hardware(run) if run else None,
        "data": data(run) if run else None,
        "evaluations": evaluations(source),
        "cost": cost(source),
        "gguf": [g.name for g in source.gguf],
    }
