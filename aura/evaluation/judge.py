"""``aura eval --model M --judge URL --baseline B``: a Spanish chat judge, pairwise against a baseline.

The model and the baseline (another model folder, or a file of its answers) answer every prompt of
``--judge-prompts`` (by default Aura's ``aura/resources/eval/judge_es.jsonl``) greedily, through the same
batched path as ``--prompts`` (``aura.evaluation.answers``). Then a judge behind any OpenAI-compatible
server (``aura.evaluation.judge_client``) compares the two answers of each prompt in both orders;
``aura.evaluation.judge_verdicts`` holds the judging prompt, the verdict parser and the rule that turns two
verdicts into a win, a tie or a loss, and the win rate's Wilson interval.

Every judged order is one line of ``--judge-out`` (JSONL), appended and flushed as soon as it is known: an
interrupted run, started again, asks only what is missing. A line is reused when its ``key`` matches: a
digest of the judge model, the judging prompt's version, the prompt, its notes and both answers in their
order; change any of them and that order is asked again (the old line stays, unused). A reply without a
valid verdict is asked again, ``--judge-attempts`` times in all (each time with a reminder of the format),
and then recorded as invalid. The summary (win rate and interval, overall and per category) is written
atomically beside the JSONL, with the same name and ``.json``.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from aura import __version__ as aura_version
from aura.core import console
from aura.core.errors import AuraError
from aura.core.i18n import Messages, num
from aura.evaluation import judge_verdicts as jv

DEFAULT_PROMPTS = Path(__file__).resolve().parents[1] / "resources" / "eval" / "judge_es.jsonl"
CATEGORIES = ("cotidiano", "registro_formal", "variedades", "rechazo")

M = Messages(
    "judge",
    {
        "bad_prompts": (
            '{path}, línea {line}: {error}. Cada línea es un objeto JSON con "id", "category" y "prompt" '
            '(y "notes" opcional).',
            '{path}, line {line}: {error}. Each line is a JSON object with "id", "category" and "prompt" '
            '(and optional "notes").',
        ),
        "dup_id": ("el id {id} ya apareció en la línea {first}", "id {id} already appeared on line {first}"),
        "missing_field": ('falta el campo "{field}" (texto no vacío)', 'field "{field}" is missing (non-empty text)'),
        "not_utf8": ("el byte {offset} no es UTF-8", "byte {offset} is not UTF-8"),
        "no_prompts": ("{path} no contiene preguntas.", "{path} contains no prompts."),
        "no_file": ("No existe {path} ({flag}).", "{path} does not exist ({flag})."),
        "bad_answers": (
            '{path} no es un archivo de respuestas: {error}. Se espera JSONL con "id" (o "prompt") y '
            '"answer" por línea, o el JSON que escribe aura eval --prompts.',
            '{path} is not an answers file: {error}. Expected JSONL with "id" (or "prompt") and "answer" '
            "per line, or the JSON aura eval --prompts writes.",
        ),
        "missing_answer": (
            "{path} no tiene respuesta para la pregunta {id} ({prompt}). Genera las respuestas de la base con "
            "aura eval --model BASE --prompts {prompts} --output FILE.json, o pasa la carpeta del modelo.",
            "{path} has no answer for prompt {id} ({prompt}). Generate the baseline's answers with aura eval "
            "--model BASE --prompts {prompts} --output FILE.json, or pass the model's folder.",
        ),
        "start": (
            "Juez {model} en {url}: {n:pregunta|preguntas} × 2 órdenes; {done} ya en {path}.",
            "Judge {model} at {url}: {n:prompt|prompts} × 2 orders; {done} already in {path}.",
        ),
        "answering": ("Respuestas de {model}…", "Answers of {model}…"),
        "judged": (
            "{id} ({order}): {verdict} ({n:intento|intentos}, {s} s)",
            "{id} ({order}): {verdict} ({n:attempt|attempts}, {s} s)",
        ),
        "invalid": ("sin veredicto válido", "no valid verdict"),
        "w_model": ("{v}: el modelo", "{v}: the model"),
        "w_baseline": ("{v}: la base", "{v}: the baseline"),
        "w_tie": ("{v}", "{v}"),
        "title": (
            "{model} frente a {baseline} (juez {judge}; el modelo gana si ambos órdenes lo prefieren)",
            "{model} against {baseline} (judge {judge}; the model wins when both orders prefer it)",
        ),
        "h_category": ("categoría", "category"),
        "h_prompts": ("preguntas", "prompts"),
        "h_wins": ("victorias", "wins"),
        "h_ties": ("empates", "ties"),
        "h_losses": ("derrotas", "losses"),
        "h_invalid": ("inválidas", "invalid"),
        "h_rate": ("tasa de victorias", "win rate"),
        "h_ci": ("IC 95 % (Wilson)", "95% CI (Wilson)"),
        "all": ("total", "all"),
        "positions": (
            "Veredictos válidos: A {a}, B {b}, empate {tie} (si A domina, el juez prefiere lo que lee primero; "
            "los dos órdenes lo compensan).",
            "Valid verdicts: A {a}, B {b}, tie {tie} (if A dominates, the judge prefers what it reads first; "
            "the two orders make up for it).",
        ),
        "written": ("Veredictos en {jsonl}; resumen en {path}.", "Verdicts in {jsonl}; summary in {path}."),
    },
)


@dataclass
class JudgeItem:
    id: str
    category: str
    prompt: str
    notes: str = ""


def read_judge_prompts(path: str | Path) -> list[JudgeItem]:
    """The prompts of a JSONL file (``id``, ``category``, ``prompt``, optional ``notes``), or of a text file
    (one per line; ids ``p001``..., category ``general``)."""
    path = Path(path)
    if not path.is_file():
        raise AuraError(M("no_file", path=path, flag="--judge-prompts"))
    raw = path.read_bytes()
    try:
        lines = raw.decode("utf-8").splitlines()
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise AuraError(M("bad_prompts", path=path, line=line, error=M("not_utf8", offset=e.start))) from None
    items: list[JudgeItem] = []
    seen: dict[str, int] = {}
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if path.suffix.lower() != ".jsonl":
            items.append(JudgeItem(f"p{len(items) + 1:03d}", "general", line.strip()))
            continue
        try:
            row = json.loads(line)
        except ValueError as e:
            raise AuraError(M("bad_prompts", path=path, line=n, error=e)) from None
        for field in ("id", "prompt"):
            if not isinstance(row, dict) or not isinstance(row.get(field), str) or not row[field].strip():
                raise AuraError(M("bad_prompts", path=path, line=n, error=M("missing_field", field=field)))
        if row["id"] in seen:
            raise AuraError(M("bad_prompts", path=path, line=n, error=M("dup_id", id=row["id"], first=seen[row["id"]])))
        seen[row["id"]] = n
        items.append(
            JudgeItem(row["id"], str(row.get("category") or "general"), row["prompt"], str(row.get("notes") or ""))
        )
    if not items:
        raise AuraError(M("no_prompts", path=path))
    return items


def read_answers(path: Path, items: list[JudgeItem], prompts_file: str) -> list[str]:
    """The baseline's answer to every item, from a JSONL (by ``id``, else by ``prompt``) or from the results
    JSON of ``aura eval --prompts`` (by prompt text)."""
    by_id, by_prompt = {}, {}
    try:
        text = path.read_text(encoding="utf-8")
        if path.suffix.lower() == ".jsonl":
            rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        else:
            data = json.loads(text)
            report = data["results"][0] if isinstance(data.get("results"), list) else data
            rows = report["answers"]
        for row in rows:
            if "id" in row:
                by_id[str(row["id"])] = str(row["answer"])
            if "prompt" in row:
                by_prompt[str(row["prompt"])] = str(row["answer"])
    except (OSError, UnicodeDecodeError, ValueError, KeyError, IndexError, TypeError, AttributeError) as e:
        raise AuraError(M("bad_answers", path=path, error=f"{type(e).__name__}: {e}")) from None
    out = []
    for it in items:
        answer = by_id.get(it.id, by_prompt.get(it.prompt))
        if answer is None:
            raise AuraError(M("missing_answer", path=path, id=it.id, prompt=it.prompt[:60], prompts=prompts_file))
        out.append(answer)
    return out


def judge_paths(cfg) -> tuple[Path, Path]:
    """(verdicts JSONL, summary JSON): ``--judge-out``, else in ``--output-dir``, else beside the model."""
    from aura.evaluation.results import beside_model

    if cfg.judge_out:
        jsonl = Path(cfg.judge_out)
    elif cfg.output_dir:
        jsonl = Path(cfg.output_dir) / "eval-judge.jsonl"
    else:
        jsonl = beside_model(cfg.model[0], "eval-judge").with_suffix(".jsonl")
    summary = jsonl.with_suffix(".json") if jsonl.suffix == ".jsonl" else jsonl.with_name(jsonl.name + ".json")
    return jsonl, summary


def read_records(path: Path) -> dict[str, dict]:
    """Verdicts already in the JSONL, by key (a line cut short by an interruption is skipped)."""
    out: dict[str, dict] = {}
    if not path.is_file():
        return out
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and isinstance(row.get("key"), str):
            out[row["key"]] = row
    return out


def verdicts_file_ours(path: Path) -> bool:
    """Whether an existing ``--judge-out`` file is a verdicts file Aura wrote (its first line a verdict)."""
    try:
        with open(path, encoding="utf-8") as f:
            first = f.readline()
        row = json.loads(first) if first.strip() else {}
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(row, dict) and (not row or {"key", "order", "verdict"} <= row.keys())


def append_record(path: Path, record: dict) -> None:
    """One line, flushed and synced before the next call (a line left incomplete by a crash ends first)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as f:
        f.seek(0, os.SEEK_END)
        if f.tell():
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                f.write(b"\n")
        f.write(json.dumps(record, ensure_ascii=False).encode("utf-8") + b"\n")
        f.flush()
        os.fsync(f.fileno())


def record_key(judge_model: str, item: JudgeItem, first: str, second: str) -> str:
    blob = json.dumps([jv.TEMPLATE_VERSION, judge_model, item.prompt, item.notes, first, second], ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:32]


def ask(client, item: JudgeItem, order: str, answers: tuple[str, str], *, max_tokens: int) -> dict:
    """One order of one prompt: the judge asked until a valid verdict, ``client.attempts`` times at most."""
    model_answer, baseline_answer = answers
    first, second = (model_answer, baseline_answer) if order == "AB" else (baseline_answer, model_answer)
    messages = jv.judge_messages(item.prompt, first, second, item.notes)
    replies: list[str] = []
    verdict, error = None, None
    t0 = time.perf_counter()
    for _ in range(client.attempts):
        reply = client.chat(messages, max_tokens=max_tokens)
        replies.append(reply)
        verdict, error = jv.parse_verdict(reply)
        if verdict is not None:
            break
        messages = [*messages, {"role": "assistant", "content": reply}, {"role": "user", "content": jv.REMINDER}]
    return {
        "key": record_key(client.model, item, first, second),
        "id": item.id,
        "category": item.category,
        "order": order,
        "judge_model": client.model,
        "model_answer": model_answer,
        "baseline_answer": baseline_answer,
        "raw": replies[-1] if replies else "",
        "replies": replies,
        "verdict": verdict,
        "winner": jv.winner(verdict, order),
        "error": error,
        "attempts": len(replies),
        "latency_s": round(time.perf_counter() - t0, 3),
    }


def judge_all(client, items, model_answers, baseline_answers, *, jsonl: Path, max_tokens: int) -> tuple[list, int]:
    """Every (prompt, order) judged or read back from ``jsonl``: (records in order, how many were asked)."""
    done = read_records(jsonl)
    todo = []  # (item, order, (model's answer, baseline's), key)
    for item, mine, base in zip(items, model_answers, baseline_answers):
        for order in jv.ORDERS:
            first, second = (mine, base) if order == "AB" else (base, mine)
            todo.append((item, order, (mine, base), record_key(client.model, item, first, second)))
    reused = sum(key in done for *_, key in todo)
    console.info(M("start", model=client.model, url=client.url, n=len(items), done=reused, path=jsonl))
    records = []
    for item, order, answers, key in todo:
        rec = done.get(key)
        if rec is None:
            rec = ask(client, item, order, answers, max_tokens=max_tokens)
            append_record(jsonl, rec)
            shown = M(f"w_{rec['winner']}", v=rec["verdict"]) if rec["winner"] else M("invalid")
            s = num(rec["latency_s"], ".1f")
            console.info(M("judged", id=item.id, order=order, verdict=shown, n=rec["attempts"], s=s))
        records.append(rec)
    return records, len(todo) - reused


def summarize(records: list[dict]) -> dict:
    """Overall and per-category tallies, and how often each position was picked (the judge's bias)."""
    by_item: dict[str, dict] = {}
    for r in records:
        by_item.setdefault(r["id"], {"category": r["category"]})[r["order"]] = r["winner"]
    outcomes = {i: jv.outcome(v.get("AB"), v.get("BA")) for i, v in by_item.items()}
    cats = sorted(
        {v["category"] for v in by_item.values()},
        key=lambda c: (c not in CATEGORIES, CATEGORIES.index(c) if c in CATEGORIES else 0, c),
    )
    return {
        "overall": jv.tally(list(outcomes.values())),
        "categories": {c: jv.tally([o for i, o in outcomes.items() if by_item[i]["category"] == c]) for c in cats},
        "positions": {v: sum(r["verdict"] == v for r in records) for v in ("A", "B", "empate")},
        "outcomes": outcomes,
    }


def _rate(t: dict) -> tuple[str, str]:
    if t["win_rate"] is None:
        return "–", "–"
    return num(t["win_rate"], ".3f"), f"[{num(t['ci_low'], '.3f')}, {num(t['ci_high'], '.3f')}]"


def print_summary(summary: dict, *, model: str, baseline: str, judge: str) -> None:
    rows = []
    for name, t in [*summary["categories"].items(), (M("all"), summary["overall"])]:
        rows.append(
            [name, num(t["prompts"]), num(t["wins"]), num(t["ties"]), num(t["losses"]), num(t["invalid"]), *_rate(t)]
        )
    headers = [M(h) for h in ("h_category", "h_prompts", "h_wins", "h_ties", "h_losses", "h_invalid", "h_rate", "h_ci")]
    console.table(M("title", model=model, baseline=baseline, judge=judge), headers, rows)
    pos = summary["positions"]
    console.info(M("positions", a=pos["A"], b=pos["B"], tie=pos["empate"]))


def _answers_of(cfg, name: str, items: list[JudgeItem], device: str) -> list[str]:
    from aura.evaluation.answers import answer_prompts
    from aura.evaluation.task_scores import load_model

    console.info(M("answering", model=name))
    model, tok = load_model(name, adapter="", allow_other_base=False, dtype=cfg.dtype, device=device)
    out = answer_prompts(model, tok, [it.prompt for it in items], max_new_tokens=cfg.max_new_tokens)
    del model
    return [a["answer"] for a in out]


def run_judge(cfg) -> dict:
    """The whole ``--judge`` evaluation of ``cfg.model[0]`` against ``cfg.baseline``; returns the summary."""
    import torch

    from aura.core.atomic import atomic_write_json
    from aura.evaluation.judge_client import JudgeClient, api_root

    prompts_file = cfg.judge_prompts or str(DEFAULT_PROMPTS)
    items = read_judge_prompts(prompts_file)
    client = JudgeClient(
        api_root(cfg.judge), model=cfg.judge_model, timeout=cfg.judge_timeout, attempts=cfg.judge_attempts
    )
    client.choose_model()  # a judge that is down, refuses the key or lacks the model stops here, before any loading
    baseline_file = Path(cfg.baseline).is_file()
    baseline_answers = read_answers(Path(cfg.baseline), items, prompts_file) if baseline_file else None
    device = (
        "cuda"
        if cfg.device == "auto" and torch.cuda.is_available()
        else ("cpu" if cfg.device == "auto" else cfg.device)
    )
    model_answers = _answers_of(cfg, cfg.model[0], items, device)
    if baseline_answers is None:
        baseline_answers = _answers_of(cfg, cfg.baseline, items, device)
    jsonl, summary_path = judge_paths(cfg)
    if jsonl.exists() and not verdicts_file_ours(jsonl):  # only past the output check with --overwrite: replaced
        jsonl.unlink()
    records, asked = judge_all(
        client, items, model_answers, baseline_answers, jsonl=jsonl, max_tokens=cfg.judge_max_tokens
    )
    summary = summarize(records)
    print_summary(summary, model=cfg.model[0], baseline=cfg.baseline, judge=client.model)
    out = {
        "aura_version": aura_version,
        "model": cfg.model[0],
        "baseline": cfg.baseline,
        "baseline_kind": "answers" if baseline_file else "model",
        "judge": {
            "url": client.url,
            "model": client.model,
            "attempts": cfg.judge_attempts,
            "max_tokens": cfg.judge_max_tokens,
        },
        "prompts": {"file": prompts_file, "n": len(items), "max_new_tokens": cfg.max_new_tokens, "decoding": "greedy"},
        "template": jv.TEMPLATE_VERSION,
        "rule": "win: both orders prefer the model; loss: both prefer the baseline; tie: they disagree or either "
        "says tie; invalid: either order has no valid verdict (left out of the rate)",
        "interval": "Wilson score, 95 %, n = valid prompts, ties count as half a win",
        "verdicts_file": str(jsonl),
        "calls": {"asked": asked, "reused": len(records) - asked, "requests": client.requests},
        **summary,
    }
    atomic_write_json(summary_path, out)
    console.success(M("written", jsonl=jsonl, path=summary_path))
    return out
