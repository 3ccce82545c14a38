"""The report card: ``DIR/report.md``, a self-contained ``DIR/report.html`` and ``DIR/report.json``.

A reader of what the stages wrote, like ``aura.watch``: ``pipeline.json`` (times, status, commands),
each training stage's ``training_log.csv`` (tokens, losses, MFU, and GPU memory where the log has CUDA's
reserved memory: on a CPU the columns say "–") and ``run.json``, each eval stage's result JSONs (scores,
and the answers to ``--prompts``: one table, prompt × model stage), the GGUF files an export wrote with
their ``NAME.verify.json`` (llama.cpp's agreement). It imports nothing of training. Every number shown is one of those
files' numbers
(``report.json`` holds them unformatted); rewritten after every stage, so a half-done pipeline has one.
``report_render`` formats them (Markdown, HTML) in the reader's language.
"""

from __future__ import annotations

import csv
import json
import math
import statistics
from pathlib import Path
from typing import Any

from aura.core.atomic import atomic_write_json, atomic_write_text
from aura.pipeline.eval_contamination import refresh as refresh_contamination
from aura.pipeline.report_trust import SCORED, collect_trust

MD, HTML, JSON = "report.md", "report.html", "report.json"


def _float(cell: str | None) -> float | None:
    try:
        v = float(cell) if cell not in (None, "") else None
    except ValueError:
        return None
    return v if v is None or math.isfinite(v) else None


def _run_json(stage_dir: Path) -> dict[str, Any]:
    try:
        data = json.loads((stage_dir / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def headline(rows: list[dict[str, str]], declared: Any) -> list[dict[str, Any]] | None:
    """The objective's headline (run.json's ``headline``, written from the objective's declaration) read from
    the training log: each metric's last validation value (an eval or epoch row that has it), else its last
    logged interval; or, for a ``change``, its last logged interval minus its first. None without one (the
    loss is the number)."""
    if not isinstance(declared, list) or not declared:
        return None
    steps = [r for r in rows if (r.get("kind") or "step") == "step"]
    out = []
    for h in declared:
        if not isinstance(h, dict) or not isinstance(h.get("metric"), str):
            return None
        name = h["metric"]
        trained = [v for v in (_float(r.get(name)) for r in steps) if v is not None]
        validated = [
            v for v in (_float(r.get(name)) for r in rows if r.get("kind") in ("eval", "epoch")) if v is not None
        ]
        if h.get("change"):
            value, val = (trained[-1] - trained[0] if trained else None), False
        else:
            value, val = (validated[-1], True) if validated else (trained[-1] if trained else None, False)
        out.append(
            {
                "metric": name,
                "es": str(h.get("es") or name),
                "en": str(h.get("en") or name),
                "change": bool(h.get("change")),
                "value": value,
                "val": val,
            }
        )
    return out


def training_summary(stage_dir: Path) -> dict[str, Any] | None:
    """tokens, seconds, tokens/s, peak memory, final loss, the objective's headline (``headline``) and the loss
    curve of a training log."""
    path = stage_dir / "training_log.csv"
    if not path.is_file():
        return None
    try:
        with path.open(encoding="utf-8", newline="") as f:
            rows = list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError, csv.Error):
        return None
    steps = [r for r in rows if (r.get("kind") or "step") == "step"]
    out: dict[str, Any] = {
        "tokens": None,
        "seconds": None,
        "tokens_per_s": None,
        "mem_peak_gb": None,
        "gpu_mem_peak_gb": None,
        "gpu_mem_reserved_gb": None,
        "mfu": None,
        "final_loss": None,
        "val_loss": None,
        "headline": None,
        "curve": [],
    }
    if rows:
        last = rows[-1]
        out["tokens"] = _float(last.get("tokens"))
        out["seconds"] = _float(last.get("seconds"))
        if out["tokens"] and out["seconds"]:
            out["tokens_per_s"] = out["tokens"] / out["seconds"]
    mems = [m for m in (_float(r.get("mem_peak_gb")) for r in rows) if m is not None]
    out["mem_peak_gb"] = max(mems) if mems else None  # CUDA's allocated bytes, or the process's RSS on a CPU
    # GPU memory only where the log says it is (CUDA's reserved memory is logged on CUDA alone): never RSS
    gpu = [r for r in rows if _float(r.get("mem_reserved_gb")) is not None]
    out["gpu_mem_peak_gb"] = max((_float(r.get("mem_peak_gb")) or 0.0) for r in gpu) if gpu else None
    out["gpu_mem_reserved_gb"] = max(_float(r.get("mem_reserved_gb")) for r in gpu) if gpu else None
    # the median logged interval: neither the first (compilation, warm-up) nor an evaluation's pause weighs
    mfus = [m for m in (_float(r.get("mfu")) for r in steps) if m is not None]
    out["mfu"] = statistics.median(mfus) if mfus else None
    if steps:
        out["final_loss"] = _float(steps[-1].get("train_loss"))
    vals = [v for v in (_float(r.get("val_loss")) for r in rows) if v is not None]
    out["val_loss"] = vals[-1] if vals else None
    out["headline"] = headline(rows, _run_json(stage_dir).get("headline"))
    out["curve"] = [
        (int(float(r["step"])), _float(r.get("train_loss")))
        for r in steps
        if r.get("step") and _float(r.get("train_loss")) is not None
    ]
    return out


def _world_size(stage_dir: Path) -> int:
    try:
        run = json.loads((stage_dir / "run.json").read_text(encoding="utf-8"))
        return int((run.get("launch") or {}).get("world_size") or 1)
    except (OSError, ValueError, TypeError, AttributeError):
        return 1


def eval_results(stage_dir: Path) -> list[dict[str, Any]]:
    """Every result entry of every eval JSON in a stage folder (task rows or perplexity)."""
    out = []
    for path in sorted(stage_dir.glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, UnicodeDecodeError):
            continue
        if isinstance(data, dict) and isinstance(data.get("results"), list):
            out += [dict(r, _file=path.name) for r in data["results"] if isinstance(r, dict) and "model" in r]
    return out


def judge_results(stage_dir: Path, out: Path, names: list[str]) -> list[dict[str, Any]]:
    """The ``aura eval --judge`` summaries in a stage folder (``eval-judge.json`` beside its verdicts): who was
    judged against what, by which judge, and the overall tally (``aura.evaluation.judge.summarize``)."""
    found = []
    for path in sorted(stage_dir.glob("*judge*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, UnicodeDecodeError):
            continue
        if not (
            isinstance(data, dict) and isinstance(data.get("overall"), dict) and isinstance(data.get("judge"), dict)
        ):
            continue
        found.append(
            {
                "stage": stage_dir.name,
                "model": _model_stage(str(data.get("model")), out, names),
                "baseline": _model_stage(str(data.get("baseline")), out, names),
                "judge": data["judge"].get("model"),
                "overall": data["overall"],
                "file": path.name,
            }
        )
    return found


def stage_notes(stage_dir: Path) -> dict[str, Any]:
    """What a stage wrote about itself: a tokenizer's fertility, a data stage's documents kept and tokens, a GRPO
    stage's groups with a reward signal."""
    from aura.core.rundir import REWARD_SIGNAL

    notes: dict[str, Any] = {}
    try:  # a GRPO stage: how many of its groups had a reward signal (none: the model did not change)
        signal = json.loads((stage_dir / REWARD_SIGNAL).read_text(encoding="utf-8"))
        if isinstance(signal.get("groups"), int) and isinstance(signal.get("groups_with_signal"), int):
            notes.update(groups=signal["groups"], groups_with_signal=signal["groups_with_signal"])
    except (OSError, ValueError, UnicodeDecodeError, AttributeError):
        pass
    for name in ("aura_tokenizer.json", "meta.json"):
        try:
            data = json.loads((stage_dir / name).read_text(encoding="utf-8"))
        except (OSError, ValueError, UnicodeDecodeError):
            continue
        if not isinstance(data, dict):
            continue
        fert = data.get("fertility")
        if isinstance(fert, dict) and "tokens_per_word" in fert:
            notes.update(vocab_size=data.get("vocab_size"), fertility=fert["tokens_per_word"])
        splits, cleaning = data.get("splits"), data.get("cleaning")
        if isinstance(splits, dict) and isinstance(cleaning, dict):
            notes.update(
                documents_read=cleaning.get("documents_read"),
                documents_kept=cleaning.get("documents_kept"),
                train_tokens=(splits.get("train") or {}).get("tokens"),
                val_tokens=(splits.get("val") or {}).get("tokens"),
            )
    return notes


def environment() -> dict[str, str]:
    """Where the report was written: Aura's version and commit (when Aura runs from a git checkout), Python,
    torch, CUDA, the devices and the platform."""
    import platform
    import subprocess
    import sys
    from importlib import metadata

    from aura import __version__

    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = "–"
    commit = "–"
    try:
        repo = Path(__file__).resolve().parents[2]
        r = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, timeout=5
        )
        if r.returncode == 0 and r.stdout.strip():
            dirty = subprocess.run(
                ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                capture_output=True,
                text=True,
                timeout=5,
            ).stdout.strip()
            commit = r.stdout.strip() + ("+" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        pass
    cuda, devices = "–", "CPU"
    torch = sys.modules.get("torch")  # imported by this process's stages: the report itself never imports it
    if torch is not None:
        cuda = torch.version.cuda or "–"
        if torch.cuda.is_available():
            names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
            devices = ", ".join(f"{names.count(n)} × {n}" for n in dict.fromkeys(names))
    return {
        "aura": __version__,
        "commit": commit,
        "python": platform.python_version(),
        "torch": torch_version,
        "cuda": cuda,
        "devices": devices,
        "platform": f"{platform.system()} {platform.machine()}",
    }


def gguf_files(stage_dir: Path) -> list[dict[str, Any]]:
    """Every GGUF of a stage folder: name, bytes and, when its ``NAME.verify.json`` is about this very file
    (same name and size), what llama.cpp's verification measured, or (``verified`` false) why it was not
    verified and the command that verifies it later."""
    out = []
    for path in sorted(stage_dir.glob("*.gguf")):
        size = path.stat().st_size
        verify = None
        try:
            data = json.loads(
                path.with_name(path.name.removesuffix(".gguf") + ".verify.json").read_text(encoding="utf-8")
            )
            if isinstance(data, dict) and data.get("gguf") == path.name and data.get("bytes") == size:
                if data.get("verified") is False:  # written without llama.cpp: why, and the command for later
                    verify = {k: data.get(k) for k in ("quant", "verified", "reason", "verify_command")}
                else:
                    verify = {
                        k: data.get(k)
                        for k in (
                            "quant",
                            "top1",
                            "max_abs_diff",
                            "rel_diff",
                            "generated",
                            "agreeing",
                            "tolerance",
                            "llama_cpp_python",
                        )
                    }
        except (OSError, ValueError, UnicodeDecodeError):
            pass
        out.append({"name": path.name, "bytes": size, "verify": verify})
    return out


def _model_stage(model: str, out: Path, names: list[str]) -> str:
    try:
        rel = Path(model).resolve().relative_to(out.resolve())
    except ValueError:
        return model
    return rel.parts[0] if rel.parts and rel.parts[0] in names else model


def collect(out: Path, pipeline, state) -> dict[str, Any]:
    """The report's numbers, straight from the stages' files."""
    out = Path(out)
    price = state.data.get("price_per_hour")
    names = [s.name for s in pipeline.stages]
    stages, models, judges = [], {}, []
    rows_by: dict[str, dict[str, dict]] = {}  # model -> score key -> its result row (stderr, per-item scores)
    for stage in pipeline.stages:
        rec = state.get(stage.name)
        d = out / stage.name
        seconds = rec.get("seconds")
        train = training_summary(d) if d.is_dir() else None
        world = _world_size(d) if train else 1
        dev_h = seconds * world / 3600 if isinstance(seconds, (int, float)) else None
        row = {
            "name": stage.name,
            "command_name": stage.command,
            "status": rec.get("status", "pending"),
            "command": rec.get("command"),
            "seconds": seconds,
            "device_hours": dev_h,
            "cost": dev_h * price if (dev_h is not None and price is not None) else None,
            "training": {k: v for k, v in (train or {}).items() if k != "curve"} if train else None,
            "curve": (train or {}).get("curve", []),
            "reason": rec.get("reason"),
            "comm": rec.get("comm"),
            "made_by": rec.get("made_by"),
            "notes": stage_notes(d) if d.is_dir() else {},
            "files": gguf_files(d) if d.is_dir() else [],
        }
        stages.append(row)
        judges += judge_results(d, out, names) if d.is_dir() else []
        if train is not None:
            models.setdefault(
                stage.name,
                {
                    "stage": stage.name,
                    "final_loss": train["final_loss"],
                    "headline": train["headline"],
                    "val_loss": train["val_loss"],
                    "scores": {},
                },
            )
        for r in eval_results(d) if d.is_dir() else []:
            m = models.setdefault(
                _model_stage(r["model"], out, names),
                {"stage": _model_stage(r["model"], out, names), "final_loss": None, "val_loss": None, "scores": {}},
            )
            if "bits_per_byte" in r and "rows" not in r:
                m["scores"]["val_bits_per_byte"] = r["bits_per_byte"]
            for row_ in r.get("rows") or []:
                metric = str(row_.get("metric") or "").split(" (")[0]  # "exact_match (flexible-extract)"
                if metric in (*SCORED, "mcc", "bits_per_byte"):
                    key = f"{row_['task']}/{row_['metric']}"
                    m["scores"][key] = row_.get("value")
                    if isinstance(row_.get("stderr"), (int, float)):
                        m.setdefault("stderr", {})[key] = row_["stderr"]
                    m["eval_stage"] = stage.name  # its contamination.json (aura.pipeline.report_trust)
                    if metric in SCORED:
                        rows_by.setdefault(m["stage"], {})[key] = row_
            if isinstance(r.get("answers"), list):
                m["answers"] = [
                    {"prompt": a.get("prompt"), "answer": a.get("answer")} for a in r["answers"] if isinstance(a, dict)
                ]
                m["max_new_tokens"] = (r.get("prompts") or {}).get("max_new_tokens")
    models = {k: v for k, v in models.items() if v["scores"] or v.get("answers")}
    collect_trust(list(models.values()), rows_by, {s.name: out / s.name for s in pipeline.stages})
    return {
        "pipeline": state.data.get("pipeline"),
        "out": str(out),
        "aura_version": state.data.get("aura_version"),
        "updated": state.data.get("updated"),
        "price_per_hour": price,
        "stages": stages,
        "scale": getattr(pipeline, "scale", 1.0),
        "models": list(models.values()),
        "judges": judges,
        "environment": environment(),
    }


def write(out: Path, pipeline, state) -> dict[str, Any]:
    """Rewrite the three report files (atomically) from what is on disk now."""
    from aura.pipeline.report_render import render_html, render_md

    refresh_contamination(out, pipeline, state)  # each finished eval stage's contamination.json, once
    data = collect(out, pipeline, state)
    atomic_write_json(Path(out) / JSON, {k: v for k, v in data.items()})
    atomic_write_text(Path(out) / MD, render_md(data))
    atomic_write_text(Path(out) / HTML, render_html(data))
    return data


def read_report(out: Path) -> dict[str, Any] | None:
    """``DIR/report.json`` as ``write`` left it, or None when the folder has none or it cannot be read
    (a report is rewritten after every stage; readers such as ``aura push`` take what is there)."""
    try:
        data = json.loads((Path(out) / JSON).read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("stages"), list) else None
