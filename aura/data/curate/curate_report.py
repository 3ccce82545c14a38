"""What the curation did, per stage: documents and characters in and out, reasons for removal.

Read from datatrove's per-task stats files (``logs/<stage>/stats/NNNNN.json``, written when a task
completes, so a resumed run reports every task), written as ``report.json``, printed as a table and
drawn as ``report.png``; the removed samples of ``--sample`` are gathered into one file per reason.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from aura.core import console
from aura.core.atomic import atomic_write_json, atomic_write_text
from aura.core.i18n import Messages, num
from aura.data.curate.steps import METER

M = Messages(
    "curate_report",
    {
        "title": ("Depuración por etapas", "Curation by stage"),
        "col_stage": ("Etapa", "Stage"),
        "col_docs_in": ("Docs. entrada", "Docs in"),
        "col_docs_out": ("Docs. salida", "Docs out"),
        "col_removed": ("Quitados", "Removed"),
        "col_chars": ("Caracteres salida", "Chars out"),
        "col_reasons": ("Motivos principales", "Top reasons"),
        "plot_docs": ("Documentos tras cada etapa", "Documents after each stage"),
        "plot_chars": ("Caracteres tras cada etapa (millones)", "Characters after each stage (millions)"),
    },
)

# Stage names as shown in the table and the plot.
STAGES = Messages(
    "curate_stages",
    {
        "read": ("lectura", "read"),
        "extract": ("extracción HTML", "HTML extraction"),
        "ftfy": ("reparación Unicode", "Unicode repair"),
        "langid": ("idioma", "language"),
        "boilerplate": ("líneas de plantilla", "boilerplate lines"),
        "gopher_repetition": ("repetición (Gopher)", "repetition (Gopher)"),
        "gopher_quality": ("calidad (Gopher)", "quality (Gopher)"),
        "c4": ("líneas (C4)", "lines (C4)"),
        "fineweb": ("calidad (FineWeb)", "quality (FineWeb)"),
        "spanish": ("estadística del español", "Spanish statistics"),
        "exact_dedup": ("duplicados exactos", "exact duplicates"),
        "minhash_dedup": ("casi duplicados (MinHash)", "near duplicates (MinHash)"),
        "pii": ("datos personales", "personal data"),
        "decontaminate": ("n-gramas de evaluación", "eval n-grams"),
    },
)
_DEFAULT_REASON = {"exact_dedup": "exact_duplicate", "minhash_dedup": "near_duplicate", "extract": "extract_empty"}


def _total(value) -> float:
    return value if isinstance(value, (int, float)) else value.get("total", 0)


def collect(work: Path, stage_names: list[str]) -> dict:
    """Per-stage rows from the stats files of the executor stages ``stage_names``, in pipeline order."""
    rows: dict[str, dict] = {}
    languages: Counter = Counter()
    pii: Counter = Counter()
    order: list[str] = []
    for executor_stage in stage_names:
        files = sorted((work / "logs" / executor_stage / "stats").glob("*.json"))
        for path in files:
            pending_reasons: Counter = Counter()
            pending_dropped = 0.0
            pending_time = 0.0
            for step in json.loads(path.read_text(encoding="utf-8")):
                stats = {k: _total(v) for k, v in step.get("stats", {}).items()}
                if step["name"].startswith(METER):
                    name = step["name"].split(": ", 1)[1]
                    row = rows.setdefault(
                        name, {"stage": name, "docs_out": 0, "chars_out": 0, "removed": Counter(), "seconds": 0.0}
                    )
                    if name not in order:
                        order.append(name)
                    row["docs_out"] += int(stats.get("docs", 0))
                    row["chars_out"] += int(stats.get("chars", 0))
                    reasons = Counter({k: int(v) for k, v in pending_reasons.items()})
                    if pending_dropped > sum(reasons.values()):
                        reasons[_DEFAULT_REASON.get(name, "other")] += int(pending_dropped - sum(reasons.values()))
                    row["removed"].update(reasons)
                    row["seconds"] += pending_time
                    pending_reasons, pending_dropped, pending_time = Counter(), 0.0, 0.0
                    continue
                pending_time += float(_total(step.get("time_stats") or 0))
                for key, value in stats.items():
                    if key.startswith("dropped_"):
                        pending_reasons[key[len("dropped_") :]] += value
                    elif key == "dropped":
                        pending_dropped += value
                    elif key.startswith("lang_"):
                        languages[key[5:]] += int(value)
                    elif key.startswith("masked_"):
                        pii[key[7:]] += int(value)
    stages = []
    docs_in = chars_in = None
    for name in order:
        row = rows[name]
        row["docs_in"] = row["docs_out"] if docs_in is None else docs_in
        row["chars_in"] = row["chars_out"] if chars_in is None else chars_in
        row["removed"] = dict(row["removed"].most_common())
        row["seconds"] = round(row["seconds"], 3)
        docs_in, chars_in = row["docs_out"], row["chars_out"]
        stages.append(row)
    return {"stages": stages, "languages_removed": dict(languages.most_common()), "pii_masked": dict(pii)}


def stage_label(name: str) -> str:
    return STAGES(name) if name in STAGES.table else name


def print_table(report: dict) -> None:
    rows = []
    for r in report["stages"]:
        removed = r["docs_in"] - r["docs_out"]
        share = f"{100 * removed / r['docs_in']:.1f} %" if r["docs_in"] else "-"
        reasons = ", ".join(f"{k} {num(v)}" for k, v in list(r["removed"].items())[:3])
        if r["stage"] == "pii" and report.get("pii_masked"):
            reasons = ", ".join(f"{k} {num(v)}" for k, v in report["pii_masked"].items())
        rows.append(
            [stage_label(r["stage"]), num(r["docs_in"]), num(r["docs_out"]), share, num(r["chars_out"]), reasons]
        )
    console.table(
        M("title"),
        [M("col_stage"), M("col_docs_in"), M("col_docs_out"), M("col_removed"), M("col_chars"), M("col_reasons")],
        rows,
    )


def _font(size: int):
    """DejaVu Sans from matplotlib's package data (found without importing matplotlib: it has every
    Spanish letter, which Pillow's built-in font lacks), else Pillow's built-in font."""
    import importlib.util

    from PIL import ImageFont

    spec = importlib.util.find_spec("matplotlib")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        ttf = Path(folder) / "mpl-data" / "fonts" / "ttf" / "DejaVuSans.ttf"
        if ttf.is_file():
            return ImageFont.truetype(str(ttf), size)
    return ImageFont.load_default(size=size)


def plot(report: dict, path: Path) -> None:
    """Documents and characters after each stage as two horizontal bar charts, stages top to bottom,
    each bar with its value. Drawn with Pillow (which matplotlib installs): a few hundredths of a second,
    where importing matplotlib alone costs more than half a second of CPU at the end of every run."""
    from PIL import Image, ImageDraw

    rows = report["stages"]
    font, bold = _font(13), _font(15)
    row_h, top, label_w, panel_w, gap = 26, 44, 220, 360, 110
    width = label_w + 2 * (panel_w + gap)
    img = Image.new("RGB", (width, top + row_h * max(1, len(rows)) + 16), "white")
    draw = ImageDraw.Draw(img)
    panels = (
        (M("plot_docs"), [r["docs_out"] for r in rows], "#3b7dd8", num),
        (M("plot_chars"), [r["chars_out"] / 1e6 for r in rows], "#d8893b", lambda v: num(v, ",.2f")),
    )
    for i, r in enumerate(rows):
        name = stage_label(r["stage"])
        y = top + i * row_h + row_h // 2
        draw.text((label_w - 10 - draw.textlength(name, font=font), y - 8), name, font=font, fill="#222222")
    for k, (title, values, colour, fmt) in enumerate(panels):
        x0 = label_w + k * (panel_w + gap)
        draw.text((x0, 12), title, font=bold, fill="#111111")
        draw.line([(x0, top - 4), (x0, top + row_h * len(rows))], fill="#888888")
        high = max(values, default=0) or 1
        for i, v in enumerate(values):
            y = top + i * row_h
            x1 = x0 + round(panel_w * v / high)
            if x1 > x0:
                draw.rectangle([x0 + 1, y + 4, x1, y + row_h - 4], fill=colour)
            draw.text((x1 + 6, y + row_h // 2 - 8), fmt(v), font=font, fill="#333333")
    tmp = path.with_name(f".{path.name}.tmp.png")
    img.save(tmp, format="PNG")
    tmp.replace(path)


def gather_samples(work: Path, dest: Path, per_reason: int) -> dict[str, int]:
    """First ``per_reason`` removed documents of each reason, in task order, one JSONL file per reason."""
    written: dict[str, int] = {}
    root = work / "samples"
    if not root.is_dir():
        return written
    dest.mkdir(parents=True, exist_ok=True)
    for reason_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        lines: list[str] = []
        for shard in sorted(reason_dir.glob("*.jsonl")):
            for line in shard.read_text(encoding="utf-8").splitlines():
                if len(lines) < per_reason:
                    lines.append(line)
        if lines:
            atomic_write_text(dest / f"{reason_dir.name}.jsonl", "\n".join(lines) + "\n")
            written[reason_dir.name] = len(lines)
    return written


def write_report(report: dict, path: Path) -> None:
    atomic_write_json(path, report)
