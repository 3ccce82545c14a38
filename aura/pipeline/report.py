"""The report card: ``DIR/report.md``, a self-contained ``DIR/report.html`` and ``DIR/report.json``.

A reader of what the stages wrote, like ``aura.watch``: ``pipeline.json`` (times, status, commands),
each training stage's ``training_log.csv`` and ``run.json``, each eval stage's result JSONs, the files an
export wrote. It imports nothing of training. Every number shown is one of those files' numbers
(``report.json`` holds them unformatted); rewritten after every stage, so a half-done pipeline has one.
"""

from __future__ import annotations

import csv
import html
import json
import math
from pathlib import Path
from typing import Any

from aura.core.atomic import atomic_write_json, atomic_write_text, human_bytes
from aura.core.console import format_duration
from aura.core.i18n import Messages, current_lang, num

M = Messages("pipeline.report", {
    "plain_ddp": ("DDP normal", "plain DDP"),
    "title": ("Informe del pipeline '{name}'", "Pipeline report '{name}'"),
    "intro": ("Carpeta: {path}. Aura {version}. Actualizado: {updated}. Precio: {price}.",
              "Folder: {path}. Aura {version}. Updated: {updated}. Price: {price}."),
    "no_price": ("sin precio (--price-per-hour)", "no price (--price-per-hour)"),
    "price": ("{price} €/hora de dispositivo", "€{price} per device-hour"),
    "stages": ("Etapas", "Stages"),
    "models": ("Modelos lado a lado", "Models side by side"),
    "commands": ("Comandos equivalentes", "Equivalent commands"),
    "outputs": ("Archivos exportados", "Exported files"),
    "h_stage": ("etapa", "stage"), "h_status": ("estado", "status"), "h_time": ("tiempo", "wall time"),
    "h_dev_h": ("horas-dispositivo", "device-hours"), "h_cost": ("coste €", "cost €"),
    "h_tokens": ("tokens", "tokens"), "h_tok_s": ("tokens/s", "tokens/s"), "h_mem": ("memoria pico GB", "peak memory GB"),
    "h_loss": ("pérdida final", "final loss"), "h_val": ("pérdida val.", "val loss"),
    "h_model": ("modelo (etapa)", "model (stage)"), "h_bpb": ("bits/byte (val.)", "bits/byte (val)"),
    "h_file": ("archivo", "file"), "h_size": ("tamaño", "size"),
    "total": ("en total", "total"),
    "s_finished": ("terminada", "finished"), "s_running": ("en curso o cortada", "running or cut off"),
    "s_interrupted": ("interrumpida", "interrupted"), "s_failed": ("fallida", "failed"),
    "s_skipped": ("saltada", "skipped"), "s_pending": ("pendiente", "pending"),
    "s_elsewhere": ("en el nodo 0", "on node 0"),
    "n_comm": ("enlace medido: latencia {lat:.3f} ms, {gbit:.2f} Gbit/s; {advice} Aplicado: {flags}",
               "link measured: latency {lat:.3f} ms, {gbit:.2f} Gbit/s; {advice} Applied: {flags}"),
    "n_made_by": ("hecha por el nodo {node} en la carpeta compartida", "made by node {node} in the shared folder"),
    "no_models": ("Aún no hay evaluaciones.", "No evaluations yet."),
    "h_notes": ("notas", "notes"),
    "n_fertility": ("vocabulario {vocab}, fertilidad {fert:.3f} tokens/palabra",
                    "vocabulary {vocab}, fertility {fert:.3f} tokens/word"),
    "n_data": ("documentos {read} → {kept}, tokens {train:,} + {val:,} (val.)",
               "documents {read} → {kept}, tokens {train:,} + {val:,} (val)"),
    "n_skipped": ("saltada: {reason}", "skipped: {reason}"),
    "environment": ("Entorno: Aura {aura}, Python {python}, torch {torch}, {platform}.",
                    "Environment: Aura {aura}, Python {python}, torch {torch}, {platform}."),
    "loss_curve": ("Pérdida de entrenamiento por paso: {stage}", "Training loss per step: {stage}"),
})

MD, HTML, JSON = "report.md", "report.html", "report.json"


def comm_flags_text(flags: dict[str, Any]) -> str:
    """The communication flags `comm: auto` applied, as typed (`--local-steps 8`, `--ddp-comm powersgd`)."""
    if flags.get("local_steps"):
        return f"--local-steps {flags['local_steps']}"
    mode = flags.get("ddp_comm") or "none"
    return M("plain_ddp") if mode == "none" else f"--ddp-comm {mode}"

def _float(cell: str | None) -> float | None:
    try:
        v = float(cell) if cell not in (None, "") else None
    except ValueError:
        return None
    return v if v is None or math.isfinite(v) else None


def training_summary(stage_dir: Path) -> dict[str, Any] | None:
    """tokens, seconds, tokens/s, peak memory, final loss and the loss curve of a training log."""
    path = stage_dir / "training_log.csv"
    if not path.is_file():
        return None
    try:
        with path.open(encoding="utf-8", newline="") as f:
            rows = list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError, csv.Error):
        return None
    steps = [r for r in rows if (r.get("kind") or "step") == "step"]
    out: dict[str, Any] = {"tokens": None, "seconds": None, "tokens_per_s": None, "mem_peak_gb": None,
                           "final_loss": None, "val_loss": None, "curve": []}
    if rows:
        last = rows[-1]
        out["tokens"] = _float(last.get("tokens"))
        out["seconds"] = _float(last.get("seconds"))
        if out["tokens"] and out["seconds"]:
            out["tokens_per_s"] = out["tokens"] / out["seconds"]
    mems = [m for m in (_float(r.get("mem_peak_gb")) for r in rows) if m is not None]
    out["mem_peak_gb"] = max(mems) if mems else None
    if steps:
        out["final_loss"] = _float(steps[-1].get("train_loss"))
    vals = [v for v in (_float(r.get("val_loss")) for r in rows) if v is not None]
    out["val_loss"] = vals[-1] if vals else None
    out["curve"] = [(int(float(r["step"])), _float(r.get("train_loss"))) for r in steps
                    if r.get("step") and _float(r.get("train_loss")) is not None]
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


def stage_notes(stage_dir: Path) -> dict[str, Any]:
    """What a tokenizer or data stage wrote about itself: fertility, the documents kept, the tokens."""
    notes: dict[str, Any] = {}
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
            notes.update(documents_read=cleaning.get("documents_read"), documents_kept=cleaning.get("documents_kept"),
                         train_tokens=(splits.get("train") or {}).get("tokens"),
                         val_tokens=(splits.get("val") or {}).get("tokens"))
    return notes


def _notes_text(s: dict[str, Any]) -> str:
    n = s.get("notes") or {}
    parts = []
    if n.get("fertility") is not None:
        parts.append(M("n_fertility", vocab=n.get("vocab_size"), fert=n["fertility"]))
    if n.get("train_tokens") is not None:
        parts.append(M("n_data", read=n.get("documents_read"), kept=n.get("documents_kept"),
                       train=n["train_tokens"], val=n.get("val_tokens") or 0))
    if s["status"] == "skipped" and s.get("reason"):
        parts.append(M("n_skipped", reason=s["reason"]))
    comm = s.get("comm")
    if comm:
        parts.append(M("n_comm", lat=comm.get("latency_ms") or 0.0, gbit=comm.get("gbit") or 0.0,
                       advice=comm.get("advice") or "", flags=comm_flags_text(comm.get("flags") or {})))
    if s.get("made_by") is not None:
        parts.append(M("n_made_by", node=s["made_by"]))
    return "; ".join(parts)


def environment() -> dict[str, str]:
    import platform
    from importlib import metadata

    from aura import __version__

    try:
        torch = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch = "–"
    return {"aura": __version__, "python": platform.python_version(), "torch": torch,
            "platform": f"{platform.system()} {platform.machine()}"}


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
    stages, models = [], {}
    for stage in pipeline.stages:
        rec = state.get(stage.name)
        d = out / stage.name
        seconds = rec.get("seconds")
        train = training_summary(d) if d.is_dir() else None
        world = _world_size(d) if train else 1
        dev_h = seconds * world / 3600 if isinstance(seconds, (int, float)) else None
        row = {"name": stage.name, "command_name": stage.command, "status": rec.get("status", "pending"),
               "command": rec.get("command"), "seconds": seconds, "device_hours": dev_h,
               "cost": dev_h * price if (dev_h is not None and price is not None) else None,
               "training": {k: v for k, v in (train or {}).items() if k != "curve"} if train else None,
               "curve": (train or {}).get("curve", []), "reason": rec.get("reason"),
               "comm": rec.get("comm"), "made_by": rec.get("made_by"),
               "notes": stage_notes(d) if d.is_dir() else {},
               "files": [{"name": p.name, "bytes": p.stat().st_size} for p in sorted(d.glob("*.gguf"))]
               if d.is_dir() else []}
        stages.append(row)
        if train is not None:
            models.setdefault(stage.name, {"stage": stage.name, "final_loss": train["final_loss"],
                                           "val_loss": train["val_loss"], "scores": {}})
        for r in eval_results(d) if d.is_dir() else []:
            m = models.setdefault(_model_stage(r["model"], out, names),
                                  {"stage": _model_stage(r["model"], out, names), "final_loss": None,
                                   "val_loss": None, "scores": {}})
            if "bits_per_byte" in r and "rows" not in r:
                m["scores"]["val_bits_per_byte"] = r["bits_per_byte"]
            for row_ in r.get("rows") or []:
                if row_.get("metric") in ("acc", "exact_match", "bits_per_byte"):
                    m["scores"][f"{row_['task']}/{row_['metric']}"] = row_.get("value")
    models = {k: v for k, v in models.items() if v["scores"]}
    return {"pipeline": state.data.get("pipeline"), "out": str(out), "aura_version": state.data.get("aura_version"),
            "updated": state.data.get("updated"), "price_per_hour": price, "stages": stages,
            "models": list(models.values()), "environment": environment()}


def _n(v, spec: str = ",.2f") -> str:
    if v is None:
        return "–"
    if isinstance(v, float) and v.is_integer() and spec.startswith(",") and "e" not in spec:
        return num(int(v), ",")
    return num(v, spec)


def _tables(data: dict[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, headers, rows) of the report's tables, numbers formatted in the reader's language."""
    rows = []
    tot_s = tot_h = tot_c = 0.0
    for s in data["stages"]:
        t = s["training"] or {}
        rows.append([s["name"], M("s_" + s["status"]) if ("s_" + s["status"]) in M.table else s["status"],
                     format_duration(s["seconds"]) if s["seconds"] is not None else "–",
                     _n(s["device_hours"], ".4f"), _n(s["cost"], ".4f"), _n(t.get("tokens"), ","),
                     _n(t.get("tokens_per_s"), ",.0f"), _n(t.get("mem_peak_gb"), ".3f"),
                     _n(t.get("final_loss"), ".4f"), _notes_text(s)])
        tot_s += s["seconds"] or 0.0
        tot_h += s["device_hours"] or 0.0
        tot_c += s["cost"] or 0.0
    rows.append([M("total"), "", format_duration(tot_s), _n(tot_h, ".4f"),
                 _n(tot_c, ".4f") if data["price_per_hour"] is not None else "–", "", "", "", "", ""])
    out = [(M("stages"), [M(k) for k in ("h_stage", "h_status", "h_time", "h_dev_h", "h_cost", "h_tokens",
                                           "h_tok_s", "h_mem", "h_loss", "h_notes")], rows)]
    keys: list[str] = []
    for m in data["models"]:
        keys += [k for k in m["scores"] if k not in keys]
    if data["models"]:
        heads = [M("h_model"), M("h_loss"), *[M("h_bpb") if k == "val_bits_per_byte" else k for k in keys]]
        mrows = [[m["stage"], _n(m["final_loss"], ".4f"), *[_n(m["scores"].get(k), ".4f") for k in keys]]
                 for m in data["models"]]
        out.append((M("models"), heads, mrows))
    files = [[f"{s['name']}/{f['name']}", human_bytes(f["bytes"])] for s in data["stages"] for f in s["files"]]
    if files:
        out.append((M("outputs"), [M("h_file"), M("h_size")], files))
    return out


def _price(data) -> str:
    p = data["price_per_hour"]
    return M("no_price") if p is None else M("price", price=p)


def render_md(data: dict[str, Any]) -> str:
    lines = [f"# {M('title', name=data['pipeline'])}", "",
             M("intro", path=data["out"], version=data["aura_version"], updated=data["updated"], price=_price(data)),
             "", M("environment", **data["environment"]), ""]
    for title, heads, rows in _tables(data):
        lines += [f"## {title}", "", "| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
        lines.append("")
    if not data["models"]:
        lines += [M("no_models"), ""]
    lines += [f"## {M('commands')}", "", "```bash"]
    lines += [f"# {s['name']}\n{s['command']}" for s in data["stages"] if s["command"]]
    lines += ["```", ""]
    return "\n".join(lines)


def _svg(curve: list[tuple[int, float]]) -> str:
    """A loss curve as an inline SVG polyline (no script, nothing fetched)."""
    if len(curve) < 2:
        return ""
    w, h, pad = 480, 160, 30
    xs, ys = [c[0] for c in curve], [c[1] for c in curve]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    sx = (w - 2 * pad) / ((x1 - x0) or 1)
    sy = (h - 2 * pad) / ((y1 - y0) or 1)
    pts = " ".join(f"{pad + (x - x0) * sx:.1f},{h - pad - (y - y0) * sy:.1f}" for x, y in curve)
    return (f'<svg width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img">'
            f'<rect x="0" y="0" width="{w}" height="{h}" fill="#fafafa" stroke="#ddd"/>'
            f'<polyline fill="none" stroke="#3366cc" stroke-width="1.5" points="{pts}"/>'
            f'<text x="{pad}" y="{pad - 8}" font-size="11">{html.escape(_n(y1, ".3f"))}</text>'
            f'<text x="{pad}" y="{h - 8}" font-size="11">{html.escape(_n(y0, ".3f"))} · {x0}–{x1}</text></svg>')


def render_html(data: dict[str, Any]) -> str:
    e = html.escape
    parts = [f"<!doctype html><html lang=\"{current_lang()}\"><head><meta charset=\"utf-8\">",
             f"<title>{e(M('title', name=data['pipeline']))}</title><style>"
             "body{font-family:system-ui,sans-serif;margin:2em;max-width:70em}table{border-collapse:collapse;"
             "margin:1em 0}td,th{border:1px solid #ccc;padding:.3em .6em;text-align:right}td:first-child,"
             "th:first-child{text-align:left}pre{background:#f4f4f4;padding:1em;overflow-x:auto}"
             "</style></head><body>",
             f"<h1>{e(M('title', name=data['pipeline']))}</h1>",
             f"<p>{e(M('intro', path=data['out'], version=data['aura_version'], updated=data['updated'], price=_price(data)))}</p>",
             f"<p>{e(M('environment', **data['environment']))}</p>"]
    for title, heads, rows in _tables(data):
        parts.append(f"<h2>{e(title)}</h2><table><tr>" + "".join(f"<th>{e(h)}</th>" for h in heads) + "</tr>")
        parts += ["<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>" for r in rows]
        parts.append("</table>")
    if not data["models"]:
        parts.append(f"<p>{e(M('no_models'))}</p>")
    for s in data["stages"]:
        svg = _svg(s["curve"])
        if svg:
            parts.append(f"<h3>{e(M('loss_curve', stage=s['name']))}</h3>{svg}")
    parts.append(f"<h2>{e(M('commands'))}</h2><pre>")
    parts += [e(f"# {s['name']}\n{s['command']}\n") for s in data["stages"] if s["command"]]
    parts.append("</pre></body></html>")
    return "".join(parts)


def write(out: Path, pipeline, state) -> dict[str, Any]:
    """Rewrite the three report files (atomically) from what is on disk now."""
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
