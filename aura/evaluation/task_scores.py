"""``aura eval --suite aura-es`` / ``--tasks ...``: task accuracy of one or several models, as a table and
a JSON file. The suite runs on Aura's batched scorer; ``--tasks`` runs lm-evaluation-harness tasks
(``aura.evaluation.harness``). Each model's results are written next to it
(``MODEL.eval-aura-es.json`` beside the model directory for the full suite; other configurations get names
of their own, ``aura.evaluation.results``) unless ``--output`` (or ``--output-dir``) names one file for all.
"""

from __future__ import annotations

import math
import re
import time
from pathlib import Path

import torch

from aura import __version__ as aura_version
from aura.core import console
from aura.core.errors import AuraError
from aura.core.i18n import Messages, num
from aura.evaluation.references import annotate as annotate_references, print_references
from aura.evaluation.scorer import model_max_length, prefix_token_id, score_suite
from aura.evaluation.standard_suite import SUITES
from aura.evaluation.suite import SUITE_NAME, Task, load_suite

M = Messages(
    "evalreport",
    {
        "gguf": (
            "aura eval trabaja con modelos de PyTorch; {path} es GGUF. Evalúa el directorio del que se exportó.",
            "aura eval works on PyTorch models; {path} is GGUF. Evaluate the dir it was exported from.",
        ),
        "load_failed": (
            "No se pudo cargar el modelo {model}: {error}. Comprueba que es un directorio de modelo "
            "de Hugging Face completo (config.json y pesos), un adaptador o un checkpoint de Aura.",
            "Could not load model {model}: {error}. Check that it is a complete Hugging Face model "
            "dir (config.json and weights), an adapter or an Aura checkpoint.",
        ),
        "scoring": ("{model}: batería {suite} ({n:pregunta|preguntas})…", "{model}: suite {suite} ({n:item|items})…"),
        "harness": (
            "{model}: tareas de lm-evaluation-harness {tasks}…",
            "{model}: lm-evaluation-harness tasks {tasks}…",
        ),
        "title": ("Evaluación de tareas: {what}", "Task evaluation: {what}"),
        "h_model": ("modelo", "model"),
        "h_task": ("tarea", "task"),
        "h_metric": ("métrica", "metric"),
        "h_value": ("valor", "value"),
        "h_stderr": ("error estándar", "stderr"),
        "h_seeds": ("entre semillas (desv., n)", "between seeds (std, n)"),
        "m_fertility": ("fertilidad (tokens/palabra)", "fertility"),
        "m_bits_per_byte": ("bits por byte", "bits_per_byte"),
        "answers": (
            "Respuestas voraces de {model} ({n:token|tokens} como mucho)",
            "Greedy answers of {model} (at most {n:token|tokens})",
        ),
        "h_prompt": ("pregunta", "prompt"),
        "h_answer": ("respuesta", "answer"),
        "written": ("Resultados en {path}.", "Results written to {path}."),
        "not_written": (
            "No se pudo escribir {path} ({error}); usa --output para elegir otro archivo.",
            "Could not write {path} ({error}); use --output to choose another file.",
        ),
    },
)

# What lm-eval writes to stderr beside its results: `git describe` run outside a repository (its version
# stamp), tqdm bars. Anything else it writes is shown.
HARNESS_NOISE = re.compile(r"^fatal: not a git repository|^\S[^|]*:\s*\d+%\||^\s*\d+%\|")


def suite_texts(tasks: list[Task]) -> list[str]:
    """Spanish text the suite holds, for bits per byte and fertility: every reading passage once, and
    each item's query followed by its right answer (the grammar items: the correct sentence)."""
    texts, seen = [], set()
    for task in tasks:
        for doc in task.docs:
            context, continuation = task.requests(doc)[doc.gold]
            text = (context + continuation).strip()
            if text not in seen:
                seen.add(text)
                texts.append(text)
    return texts


@torch.no_grad()
def text_stats(model, tok, texts: list[str], *, batch_size: int = 16) -> dict:
    """Bits per byte (NLL of every token after a BOS/EOS, over UTF-8 bytes), tokens per word (fertility)
    and bytes per token of ``texts``, each text scored on its own."""
    device = next(model.parameters()).device
    max_len = model_max_length(model)
    ids = [[prefix_token_id(tok)] + tok.encode(t, add_special_tokens=False)[: max_len - 1] for t in texts]
    nll, n_tokens = 0.0, 0
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    for start in range(0, len(order), batch_size):
        rows = [ids[i] for i in order[start : start + batch_size]]
        width = max(len(r) for r in rows)
        inp = torch.tensor([r + [r[-1]] * (width - len(r)) for r in rows], device=device)  # (B, T)
        logp = torch.log_softmax(model(input_ids=inp).logits[:, :-1].float(), -1)  # (B, T-1, V)
        keep = torch.tensor([[1.0] * (len(r) - 1) + [0.0] * (width - len(r)) for r in rows], device=device)
        nll -= float((logp.gather(2, inp[:, 1:, None])[..., 0] * keep).double().sum())
        n_tokens += sum(len(r) - 1 for r in rows)
    n_bytes = sum(len(t.encode("utf-8")) for t in texts)
    n_words = sum(len(t.split()) for t in texts)
    return {
        "bits_per_byte": nll / (math.log(2) * n_bytes),
        "fertility": n_tokens / n_words,
        "bytes_per_token": n_bytes / n_tokens,
        "tokens": n_tokens,
        "bytes": n_bytes,
        "words": n_words,
    }


def load_model(name: str, *, adapter: str, allow_other_base: bool, dtype: str, device: str):
    from aura.inference.loading import load_hf, resolve_model

    source = resolve_model(name, adapter or None, allow_other_base=allow_other_base)
    if source.kind == "gguf":
        raise AuraError(M("gguf", path=source.path))
    try:
        return load_hf(source, dtype=dtype, device=device, merge=True)
    except AuraError:
        raise
    except Exception as e:  # noqa: BLE001 - a damaged or foreign model dir: say which and why
        raise AuraError(
            M("load_failed", model=name, error=str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__)
        ) from e


def suite_rows(model, tok, *, limit: int, batch_size: int) -> tuple[list[dict], dict]:
    tasks = load_suite(limit)
    rows = []
    for r in score_suite(model, tok, tasks, batch_size=batch_size):
        for metric in ("acc", "acc_norm"):
            rows.append(
                {
                    "task": r["task"],
                    "metric": metric,
                    "value": r[metric],
                    "stderr": r[f"{metric}_stderr"],
                    "n": r["n"],
                    "items": {"ids": r["ids"], "scores": r[f"{metric}_items"]},
                }
            )
    from aura.evaluation.math_task import MATH_TASK, math_row

    rows.append(math_row(model, tok, limit=limit, batch_size=batch_size))  # generation: exact answer
    stats = text_stats(model, tok, suite_texts(tasks), batch_size=batch_size)
    n_text = len(suite_texts(tasks))
    rows.append(
        {"task": SUITE_NAME, "metric": "bits_per_byte", "value": stats["bits_per_byte"], "stderr": None, "n": n_text}
    )
    rows.append({"task": SUITE_NAME, "metric": "fertility", "value": stats["fertility"], "stderr": None, "n": n_text})
    versions = {**{t.name: t.spec.version for t in tasks}, MATH_TASK: "1.0"}
    return rows, {"versions": versions, "text_stats": stats}


def standard_suite_report(model, tok, plan, *, name: str, batch_size: int, seeds: int = 1) -> tuple[list[dict], dict]:
    """A standard suite's rows (``aura.evaluation.standard_suite``; with ``seeds`` > 1 each task run with lm-eval's
    seeds of every run and merged, ``aura.evaluation.seeds``) and what the report says of the run."""
    from dataclasses import asdict

    from aura.evaluation.seeds import lm_eval_seeds, merge_row_lists
    from aura.evaluation.standard_suite import run_suite

    console.info(M("harness", model=name, tasks=plan.name))
    runs = []
    for k in range(seeds):
        with console.library_stderr(drop=HARNESS_NOISE):
            runs.append(run_suite(model, tok, plan, batch_size=batch_size, max_length=model_max_length(model), seed=k))
    out = runs[0]
    if seeds > 1:
        labels = [f"seed {lm_eval_seeds(k)['fewshot_random_seed']}" for k in range(seeds)]
        out = {**out, "rows": merge_row_lists([r["rows"] for r in runs], labels)}
    info = {
        "name": plan.name,
        "scorer": "lm-evaluation-harness",
        "harness_version": out["harness_version"],
        "versions": out["versions"],
        "n_samples": out["n_samples"],
        "tasks": [asdict(t) for t in plan.tasks],
        "data": plan.data_dir or "huggingface",
        "seeds": seeds,
    }
    return out["rows"], info


def _evaluate_model(cfg, model, tok, *, name: str, device: str, tasks: list[str], prompts: list, plan=None) -> dict:
    """One model's report: the suite's rows, lm-eval's tasks and the answers to ``--prompts``, as configured."""
    report = {
        "model": name,
        "adapter": cfg.adapter or None,
        "aura_version": aura_version,
        "device": device,
        "dtype": cfg.dtype,
        "limit": cfg.limit,
        "rows": [],
    }
    if plan is not None:  # a standard suite of lm-eval tasks
        report["rows"], report["suite"] = standard_suite_report(
            model, tok, plan, name=name, batch_size=cfg.batch_size, seeds=getattr(cfg, "seeds", 1)
        )
    elif cfg.suite:
        console.info(M("scoring", model=name, suite=cfg.suite, n=sum(len(t.docs) for t in load_suite(cfg.limit))))
        rows, extra = suite_rows(model, tok, limit=cfg.limit, batch_size=cfg.batch_size)
        report["rows"] += rows
        report["suite"] = {"name": cfg.suite, "scorer": "aura", **extra}
    if tasks:
        from aura.evaluation.harness import run_tasks

        console.info(M("harness", model=name, tasks=",".join(tasks)))
        runs = []
        for k in range(getattr(cfg, "seeds", 1)):  # --seeds: the same tasks with lm-eval's seeds of run k
            with console.library_stderr(drop=HARNESS_NOISE):
                runs.append(
                    run_tasks(
                        model,
                        tok,
                        tasks,
                        include_paths=cfg.include_path,
                        limit=cfg.limit,
                        batch_size=cfg.batch_size,
                        max_length=model_max_length(model),
                        trust_task_code=cfg.trust_task_code,
                        seed=k,
                    )
                )
        out = runs[0]
        if len(runs) > 1:
            from aura.evaluation.seeds import lm_eval_seeds, merge_row_lists

            labels = [f"seed {lm_eval_seeds(k)['fewshot_random_seed']}" for k in range(len(runs))]
            report["rows"] += merge_row_lists([r["rows"] for r in runs], labels)
        else:
            report["rows"] += out["rows"]
        report["harness"] = {
            "tasks": tasks,
            "version": out["harness_version"],
            "versions": out["versions"],
            "n_samples": out["n_samples"],
            "seeds": len(runs),
        }
    if prompts:
        from aura.evaluation.answers import answer_prompts, shown

        t_answers = time.perf_counter()
        report["answers"] = answer_prompts(model, tok, prompts, max_new_tokens=cfg.max_new_tokens)
        report["prompts"] = {
            "file": cfg.prompts,
            "max_new_tokens": cfg.max_new_tokens,
            "decoding": "greedy",
            "seconds": time.perf_counter() - t_answers,
        }
        console.table(
            M("answers", model=name, n=cfg.max_new_tokens),
            [M("h_prompt"), M("h_answer")],
            [[shown(a["prompt"]), shown(a["answer"])] for a in report["answers"]],
        )
    return report


def _evaluate_entry(cfg, name: str, *, device: str, tasks: list[str], prompts: list, plan=None) -> dict:
    """One ``--model`` entry's report; a group of training seeds (``A1,A2,A3``) scored model by model and
    merged into one (``aura.evaluation.seeds``), each model's answers to --prompts kept apart."""
    from aura.evaluation.results import group_members

    members = group_members(name)
    reports = []
    for member in members:
        model, tok = load_model(
            member, adapter=cfg.adapter, allow_other_base=cfg.allow_other_base, dtype=cfg.dtype, device=device
        )
        t0 = time.perf_counter()
        report = _evaluate_model(cfg, model, tok, name=member, device=device, tasks=tasks, prompts=prompts, plan=plan)
        report["seconds"] = time.perf_counter() - t0
        reports.append(report)
        del model
    if len(reports) == 1:
        return reports[0]
    from aura.evaluation.seeds import merge_reports

    merged = merge_reports(reports, members, name=name, kind="training")
    merged["seconds"] = sum(r["seconds"] for r in reports)
    merged.pop("answers", None)
    if prompts:
        merged["answers_by_model"] = {r["model"]: r.get("answers") for r in reports}
    return merged


def evaluate_tasks(cfg) -> list[dict]:
    """Run ``cfg.suite`` and/or ``cfg.tasks`` on every model of ``cfg``; print one table; write JSON."""
    from aura.core.atomic import atomic_write_json
    from aura.evaluation.results import beside_entry, stem_of

    label = cfg.suite or ("tasks" if cfg.tasks else "prompts")
    prompts = []
    if cfg.prompts:  # read (and refused) before any model is loaded
        from aura.evaluation.answers import read_prompt_file

        prompts = read_prompt_file(cfg.prompts)
    # one file for all models: --output (unless --data's perplexity table takes it), or in --output-dir;
    # else one beside each model. Every name says the configuration (aura.evaluation.results).
    output = (
        Path(cfg.output)
        if cfg.output and not cfg.data
        else Path(cfg.output_dir) / f"{stem_of(cfg)}.json"
        if cfg.output_dir
        else None
    )
    tasks = [t.strip() for t in cfg.tasks.split(",") if t.strip()] if cfg.tasks else []
    plan = None
    if cfg.suite in SUITES:  # its tasks and data are checked before any model is loaded
        from aura.evaluation.standard_suite import plan_suite

        plan = plan_suite(cfg.suite, data_dir=cfg.suite_data, limit=cfg.limit)
    device = (
        "cuda"
        if cfg.device == "auto" and torch.cuda.is_available()
        else ("cpu" if cfg.device == "auto" else cfg.device)
    )
    reports = []
    for name in cfg.models:
        report = _evaluate_entry(cfg, name, device=device, tasks=tasks, prompts=prompts, plan=plan)
        annotate_references(report["rows"])  # published scores of the same tasks, comparable or not
        reports.append(report)
        if output is not None:
            continue
        path = beside_entry(name, stem_of(cfg))
        try:
            atomic_write_json(path, report)
            console.success(M("written", path=path))
        except OSError as e:
            console.warn(M("not_written", path=path, error=e.strerror or e))
    comparisons = []
    if cfg.suite or tasks:
        _print_table(cfg, reports, label, tasks)
        print_references(reports)
        from aura.evaluation.significance import print_comparisons

        comparisons = print_comparisons(reports)  # --compare: each difference against its noise
    if output is not None:
        atomic_write_json(output, {"aura_version": aura_version, "results": reports, "comparisons": comparisons})
        console.success(M("written", path=output))
    return reports


def _fmt(value) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else num(value, ".4f")


def _metric_name(metric: str) -> str:
    """Aura's own metrics in the user's language (the JSON keeps the name); lm-eval's (acc...) as they are."""
    return M(f"m_{metric}") if f"m_{metric}" in M.table else metric


def _seed_spread(row: dict) -> str:
    """``±0.0123 (3)``: the standard deviation of a merged row's value between its seeds, and how many."""
    seeds = row.get("seeds") if isinstance(row.get("seeds"), dict) else None
    if seeds is None:
        return ""
    return f"±{_fmt(seeds.get('std')) or '–'} ({len(seeds.get('runs') or [])})"


def _print_table(cfg, reports: list[dict], label: str, tasks: list[str]) -> None:
    what = ", ".join([*([cfg.suite] if cfg.suite else []), *tasks])
    several = len(reports) > 1
    seeds = any(isinstance(row.get("seeds"), dict) for r in reports for row in r["rows"])
    headers = [*([M("h_model")] if several else []), M("h_task"), M("h_metric"), M("h_value"), M("h_stderr"), "n"]
    headers += [M("h_seeds")] if seeds else []
    rows = [
        [
            *([r["model"]] if several else []),
            row["task"],
            _metric_name(row["metric"]),
            _fmt(row["value"]),
            _fmt(row["stderr"]),
            num(row["n"]),
            *([_seed_spread(row)] if seeds else []),
        ]
        for r in reports
        for row in r["rows"]
    ]
    console.table(M("title", what=what or label), headers, rows)
