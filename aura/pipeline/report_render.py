"""The report card's pages: the numbers ``report.collect`` read, as Markdown and as one self-contained HTML page
(inline CSS and SVG, nothing fetched), in the reader's language (Spanish numbers with a decimal comma)."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

from aura.core.atomic import human_bytes
from aura.core.console import format_duration
from aura.core.i18n import Messages, current_lang, num
from aura.pipeline.report_trust import marked, trust_tables

M = Messages(
    "pipeline.report",
    {
        "plain_ddp": ("DDP normal", "plain DDP"),
        "title": ("Informe del pipeline '{name}'", "Pipeline report '{name}'"),
        "intro": (
            "Carpeta: {path}. Aura {version}. Actualizado: {updated}. Precio: {price}.",
            "Folder: {path}. Aura {version}. Updated: {updated}. Price: {price}.",
        ),
        "no_price": ("sin precio (--price-per-hour)", "no price (--price-per-hour)"),
        "scaled": (
            "Ejecutado con --scale {scale}: sus presupuestos (horas, pasos, tokens, documentos) multiplicados por "
            "{scale}; las cifras son de una prueba, no del pipeline completo.",
            "Run with --scale {scale}: its budgets (hours, steps, tokens, documents) multiplied by {scale}; the "
            "figures are a trial's, not the full pipeline's.",
        ),
        "price": ("{price} €/hora de dispositivo", "€{price} per device-hour"),
        "stages": ("Etapas", "Stages"),
        "models": ("Modelos lado a lado", "Models side by side"),
        "commands": ("Comandos equivalentes", "Equivalent commands"),
        "outputs": ("Archivos exportados", "Exported files"),
        "h_stage": ("etapa", "stage"),
        "h_status": ("estado", "status"),
        "h_time": ("tiempo", "wall time"),
        "h_dev_h": ("horas-dispositivo", "device-hours"),
        "h_cost": ("coste €", "cost €"),
        "h_tokens": ("tokens", "tokens"),
        "h_tok_s": ("tokens/s", "tokens/s"),
        "h_mfu": ("MFU", "MFU"),
        "h_mem": ("memoria GPU pico GB (reservada)", "peak GPU memory GB (reserved)"),
        "h_loss": ("resultado final", "final result"),
        "loss": ("pérdida {v}", "loss {v}"),
        "val": (" (val.)", " (val)"),
        "h_val": ("pérdida val.", "val loss"),
        "h_model": ("modelo (etapa)", "model (stage)"),
        "h_bpb": ("bits/byte (val.)", "bits/byte (val)"),
        "h_file": ("archivo", "file"),
        "h_size": ("tamaño", "size"),
        "h_top1": ("top-1 igual a PyTorch", "top-1 equal to PyTorch"),
        "h_diff": ("máx. dif. de logits", "max logit diff"),
        "h_gen": ("generación voraz igual", "greedy generation equal"),
        "not_verified": ("sin verificar", "not verified"),
        "unverified_note": (
            "sin verificar en llama.cpp ({why}). Para verificarlo: {command} (el verificador: "
            'pip install -e ".[llamacpp]" en la carpeta de Aura, que compila llama.cpp: unos 30 minutos '
            "en 2 núcleos)",
            "not verified in llama.cpp ({why}). To verify it: {command} (the verifier: "
            'pip install -e ".[llamacpp]" in Aura\'s folder, which compiles llama.cpp: about 30 minutes '
            "on 2 cores)",
        ),
        "why_no_llama_cpp": ("llama-cpp-python no está instalado", "llama-cpp-python is not installed"),
        "why_no_verify": ("exportado con --no-verify", "exported with --no-verify"),
        "n_missing_module": ("falta el módulo {module}", "missing module {module}"),
        "answers": (
            "Las mismas preguntas a cada modelo (respuestas voraces, como mucho {n:token|tokens})",
            "The same prompts to each model (greedy answers, at most {n:token|tokens})",
        ),
        "h_prompt": ("pregunta", "prompt"),
        "judge": (
            "Juez de chat en español (aura eval --judge): una victoria necesita los dos órdenes; las dudas son "
            "empates (medio punto); intervalo de Wilson al 95 %",
            "Spanish chat judge (aura eval --judge): a win needs both orders; doubts are ties (half a point); "
            "Wilson interval at 95 %",
        ),
        "h_baseline": ("frente a", "against"),
        "h_judge": ("juez", "judge"),
        "h_judged": ("preguntas", "prompts"),
        "h_wlt": ("victorias / empates / derrotas / inválidas", "wins / ties / losses / invalid"),
        "h_win_rate": ("tasa de victorias [IC 95 %]", "win rate [95 % CI]"),
        "total": ("en total", "total"),
        "s_finished": ("terminada", "finished"),
        "s_running": ("en curso o cortada", "running or cut off"),
        "s_interrupted": ("interrumpida", "interrupted"),
        "s_failed": ("fallida", "failed"),
        "s_skipped": ("saltada", "skipped"),
        "s_pending": ("pendiente", "pending"),
        "s_elsewhere": ("en el nodo 0", "on node 0"),
        "n_comm": (
            "enlace medido: latencia {lat:.3f} ms, {gbit:.2f} Gbit/s; {advice} Aplicado: {flags}",
            "link measured: latency {lat:.3f} ms, {gbit:.2f} Gbit/s; {advice} Applied: {flags}",
        ),
        "n_made_by": ("hecha por el nodo {node} en la carpeta compartida", "made by node {node} in the shared folder"),
        "no_models": ("Aún no hay evaluaciones.", "No evaluations yet."),
        "h_notes": ("notas", "notes"),
        "n_fertility": (
            "vocabulario {vocab}, fertilidad {fert:.3f} tokens/palabra",
            "vocabulary {vocab}, fertility {fert:.3f} tokens/word",
        ),
        "n_data": (
            "documentos {read} → {kept}, tokens {train:,} + {val:,} (val.)",
            "documents {read} → {kept}, tokens {train:,} + {val:,} (val)",
        ),
        "n_no_signal": (
            "0 de {n:grupo|grupos} tuvieron señal de recompensa: el modelo no cambió",
            "0 of {n:group|groups} had a reward signal: the model did not change",
        ),
        "n_signal": ("{k} de {n:grupo|grupos} con señal de recompensa", "{k} of {n:group|groups} with a reward signal"),
        "n_skipped": ("saltada: {reason}", "skipped: {reason}"),
        "environment": (
            "Entorno: Aura {aura} (commit {commit}), Python {python}, torch {torch}, CUDA {cuda}, "
            "dispositivos: {devices}; {platform}.",
            "Environment: Aura {aura} (commit {commit}), Python {python}, torch {torch}, CUDA {cuda}, "
            "devices: {devices}; {platform}.",
        ),
        "loss_curve": ("Pérdida de entrenamiento por paso: {stage}", "Training loss per step: {stage}"),
    },
)


def environment_text(env: dict[str, Any]) -> str:
    """The environment line; a report written before commit, CUDA and devices were recorded shows "–"."""
    return M(
        "environment",
        **{k: env.get(k, "–") for k in ("aura", "commit", "python", "torch", "cuda", "devices", "platform")},
    )


def comm_flags_text(flags: dict[str, Any]) -> str:
    """The communication flags `comm: auto` applied, as typed (`--local-steps 8`, `--ddp-comm powersgd`)."""
    if flags.get("local_steps"):
        return f"--local-steps {flags['local_steps']}"
    mode = flags.get("ddp_comm") or "none"
    return M("plain_ddp") if mode == "none" else f"--ddp-comm {mode}"


def _notes_text(s: dict[str, Any]) -> str:
    n = s.get("notes") or {}
    parts = []
    if n.get("fertility") is not None:
        parts.append(M("n_fertility", vocab=n.get("vocab_size"), fert=n["fertility"]))
    if n.get("train_tokens") is not None:
        parts.append(
            M(
                "n_data",
                read=n.get("documents_read"),
                kept=n.get("documents_kept"),
                train=n["train_tokens"],
                val=n.get("val_tokens") or 0,
            )
        )
    if n.get("groups"):
        parts.append(
            M("n_no_signal", n=n["groups"])
            if not n.get("groups_with_signal")
            else M("n_signal", k=n["groups_with_signal"], n=n["groups"])
        )
    if s["status"] == "skipped" and s.get("reason"):
        # the runner records "missing module X": said in the report's language
        missing = re.fullmatch(r"missing module (\S+)", s["reason"])
        parts.append(M("n_skipped", reason=M("n_missing_module", module=missing[1]) if missing else s["reason"]))
    comm = s.get("comm")
    if comm:
        parts.append(
            M(
                "n_comm",
                lat=comm.get("latency_ms") or 0.0,
                gbit=comm.get("gbit") or 0.0,
                advice=comm.get("advice") or "",
                flags=comm_flags_text(comm.get("flags") or {}),
            )
        )
    if s.get("made_by") is not None:
        parts.append(M("n_made_by", node=s["made_by"]))
    return "; ".join(parts)


def _n(v, spec: str = ",.2f") -> str:
    if v is None:
        return "–"
    if isinstance(v, float) and v.is_integer() and spec.startswith(",") and "e" not in spec:
        return num(int(v), ",")
    return num(v, spec)


def headline_text(t: dict[str, Any]) -> str:
    """A training stage's headline: its objective's own numbers (DPO's validation reward accuracy and margin,
    GRPO's mean reward and its change), or its final loss where the objective declares none."""
    heads = t.get("headline")
    if not heads:
        return "–" if t.get("final_loss") is None else M("loss", v=_n(t["final_loss"], ".4f"))
    parts = []
    for h in heads:
        v = h.get("value")
        shown = "–" if v is None else (("+" if v >= 0 else "") + _n(v, ".4f")) if h.get("change") else _n(v, ".4f")
        name = h.get("es" if current_lang() == "es" else "en") or h.get("metric")
        parts.append(f"{name}{M('val') if h.get('val') else ''} {shown}")
    return "; ".join(parts)


def _stage_rows(data: dict[str, Any]) -> list[list[str]]:
    rows = []
    tot_s = tot_h = tot_c = 0.0
    for s in data["stages"]:
        t = s["training"] or {}
        gpu = t.get("gpu_mem_peak_gb")
        mem = "–" if gpu is None else f"{_n(gpu, '.2f')} ({_n(t.get('gpu_mem_reserved_gb'), '.2f')})"
        rows.append(
            [
                s["name"],
                M("s_" + s["status"]) if ("s_" + s["status"]) in M.table else s["status"],
                format_duration(s["seconds"]) if s["seconds"] is not None else "–",
                _n(s["device_hours"], ".4f"),
                _n(s["cost"], ".4f"),
                _n(t.get("tokens"), ","),
                _n(t.get("tokens_per_s"), ",.0f"),
                "–" if t.get("mfu") is None else f"{_n(100 * t['mfu'], '.1f')} %",
                mem,
                headline_text(t) if s["training"] else "–",
                _notes_text(s),
            ]
        )
        tot_s += s["seconds"] or 0.0
        tot_h += s["device_hours"] or 0.0
        tot_c += s["cost"] or 0.0
    rows.append(
        [
            M("total"),
            "",
            format_duration(tot_s),
            _n(tot_h, ".4f"),
            _n(tot_c, ".4f") if data["price_per_hour"] is not None else "–",
            "",
            "",
            "",
            "",
            "",
            "",
        ]
    )
    return rows


def _answer_table(data: dict[str, Any]) -> tuple[str, list[str], list[list[str]]] | None:
    """One row per prompt, one column per model stage (the stages that answered, in pipeline order)."""
    from aura.evaluation.answers import shown

    answered = [m for m in data["models"] if m.get("answers")]
    if not answered:
        return None
    prompts: list[str] = []
    for m in answered:
        prompts += [a["prompt"] for a in m["answers"] if a["prompt"] not in prompts]
    rows = [
        [
            shown(str(p)),
            *[shown(str(next((a["answer"] for a in m["answers"] if a["prompt"] == p), "–"))) for m in answered],
        ]
        for p in prompts
    ]
    longest = max((m.get("max_new_tokens") or 0) for m in answered)
    return M("answers", n=longest), [M("h_prompt"), *[m["stage"] for m in answered]], rows


def _judge_table(data: dict[str, Any]) -> tuple[str, list[str], list[list[str]]] | None:
    """One row per judged model: its tally against the baseline and the win rate with its interval."""
    rows = []
    for j in data.get("judges") or []:
        t = j["overall"]
        rate = "–"
        if isinstance(t.get("win_rate"), (int, float)):
            rate = f"{_n(t['win_rate'], '.3f')} [{_n(t['ci_low'], '.3f')}, {_n(t['ci_high'], '.3f')}]"
        wlt = " / ".join(_n(t.get(k), ",.0f") for k in ("wins", "ties", "losses", "invalid"))
        rows.append([j["model"], Path(j["baseline"]).name, str(j["judge"]), _n(t.get("prompts"), ",.0f"), wlt, rate])
    heads = [M(h) for h in ("h_model", "h_baseline", "h_judge", "h_judged", "h_wlt", "h_win_rate")]
    return (M("judge"), heads, rows) if rows else None


def _file_rows(data: dict[str, Any]) -> list[list[str]]:
    import shlex

    rows = []
    for s in data["stages"]:
        for f in s["files"]:
            v = f.get("verify")
            note = ""
            if v is None or v.get("verified") is False:
                check = ["–", "–", M("not_verified")]
                if v is not None:  # the export said why; the command names the file where the report finds it
                    why = M(f"why_{v.get('reason')}") if f"why_{v.get('reason')}" in M.table else str(v.get("reason"))
                    gguf = f"{data['out']}/{s['name']}/{f['name']}"
                    note = M("unverified_note", why=why, command=f"aura export gguf --verify-only {shlex.quote(gguf)}")
            else:
                check = [
                    f"{_n(100 * v['top1'], '.1f')} %",
                    _n(v["max_abs_diff"], ".3g"),
                    f"{v['agreeing']}/{v['generated']}",
                ]
            rows.append([f"{s['name']}/{f['name']}", human_bytes(f["bytes"]), *check, note])
    return rows


def _score(m: dict[str, Any], key: str) -> str:
    """A model's score with its standard error when it has one (``0.5000 ± 0.1890``)."""
    value, se = m["scores"].get(key), (m.get("stderr") or {}).get(key)
    return _n(value, ".4f") + (f" ± {_n(se, '.4f')}" if value is not None and se is not None else "")


def _tables(data: dict[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, headers, rows) of the report's tables, numbers formatted in the reader's language."""
    out = [
        (
            M("stages"),
            [
                M(k)
                for k in (
                    "h_stage",
                    "h_status",
                    "h_time",
                    "h_dev_h",
                    "h_cost",
                    "h_tokens",
                    "h_tok_s",
                    "h_mfu",
                    "h_mem",
                    "h_loss",
                    "h_notes",
                )
            ],
            _stage_rows(data),
        )
    ]
    keys: list[str] = []
    for m in data["models"]:
        keys += [k for k in m["scores"] if k not in keys]
    before, after = trust_tables(data)  # contamination before the scores; difference or noise after
    out += before
    if data["models"]:
        heads = [M("h_model"), M("h_loss"), *[M("h_bpb") if k == "val_bits_per_byte" else k for k in keys]]
        mrows = [
            [
                m["stage"],
                headline_text(m) if m.get("final_loss") is not None or m.get("headline") else "–",
                *[marked(m, k, _score(m, k)) for k in keys],
            ]
            for m in data["models"]
        ]
        out.append((M("models"), heads, mrows))
    out += after
    judged = _judge_table(data)
    if judged:
        out.append(judged)
    answers = _answer_table(data)
    if answers:
        out.append(answers)
    files = _file_rows(data)
    if files:
        out.append(
            (M("outputs"), [M("h_file"), M("h_size"), M("h_top1"), M("h_diff"), M("h_gen"), M("h_notes")], files)
        )
    return out


def _price(data) -> str:
    p = data["price_per_hour"]
    return M("no_price") if p is None else M("price", price=p)


def _intro(data: dict[str, Any]) -> str:
    """The card's first line: folder, Aura's version, when it was updated, the price."""
    return M("intro", path=data["out"], version=data["aura_version"], updated=data["updated"], price=_price(data))


def _scaled(data: dict[str, Any]) -> str:
    """The line that says a report's pipeline ran with its budgets scaled (``--scale``)."""
    return M("scaled", scale=f"{data['scale']:g}")


def render_md(data: dict[str, Any]) -> str:
    lines = [
        f"# {M('title', name=data['pipeline'])}",
        "",
        _intro(data),
        "",
        environment_text(data["environment"]),
        "",
    ]
    if data.get("scale", 1) != 1:
        lines[-1:-1] = ["", _scaled(data)]
    for title, heads, rows in _tables(data):
        lines += [
            f"## {title}",
            "",
            "| " + " | ".join(h.replace("|", "\\|") for h in heads) + " |",
            "|" + "---|" * len(heads),
        ]
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
    return (
        f'<svg width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img">'
        f'<rect x="0" y="0" width="{w}" height="{h}" fill="#fafafa" stroke="#ddd"/>'
        f'<polyline fill="none" stroke="#3366cc" stroke-width="1.5" points="{pts}"/>'
        f'<text x="{pad}" y="{pad - 8}" font-size="11">{html.escape(_n(y1, ".3f"))}</text>'
        f'<text x="{pad}" y="{h - 8}" font-size="11">{html.escape(_n(y0, ".3f"))} · {x0}–{x1}</text></svg>'
    )


_NUMERIC = re.compile(r"–|(?=.*\d)[\d\s.,:%/()+\-\u202fe]+")  # a figure (right-aligned); other cells are text


def render_html(data: dict[str, Any]) -> str:
    e = html.escape
    parts = [
        f'<!doctype html><html lang="{current_lang()}"><head><meta charset="utf-8">',
        f"<title>{e(M('title', name=data['pipeline']))}</title><style>"
        "body{font-family:system-ui,sans-serif;margin:2em;max-width:70em}table{border-collapse:collapse;"
        "margin:1em 0}td,th{border:1px solid #ccc;padding:.3em .6em;text-align:right}td:first-child,"
        "th:first-child{text-align:left}td.t{text-align:left;max-width:24em}pre{background:#f4f4f4;padding:1em;overflow-x:auto}"
        "</style></head><body>",
        f"<h1>{e(M('title', name=data['pipeline']))}</h1>",
        f"<p>{e(_intro(data))}</p>",
        f"<p>{e(environment_text(data['environment']))}</p>",
    ]
    if data.get("scale", 1) != 1:
        parts.append(f"<p><strong>{e(_scaled(data))}</strong></p>")
    for title, heads, rows in _tables(data):
        # a long task name may break after its "/" (aura_es_lectura/<wbr>acc), nowhere else
        parts.append(
            f"<h2>{e(title)}</h2><table><tr>"
            + "".join(f"<th>{e(h).replace('/', '/<wbr>') if len(h) > 12 else e(h)}</th>" for h in heads)
            + "</tr>"
        )
        parts += [
            "<tr>"
            + "".join(f"<td>{e(c)}</td>" if _NUMERIC.fullmatch(c) else f'<td class="t">{e(c)}</td>' for c in r)
            + "</tr>"
            for r in rows
        ]
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
