"""The aura-es suite: its files are valid and not solvable by trivial heuristics; ``aura eval --suite
aura-es`` scores exactly what an independent log-likelihood computation gives; clear errors."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import torch

from tests.conftest import run_aura_here

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


def _tasks():
    from aura.evaluation.suite import load_suite

    return load_suite()


def test_suite_items_are_valid_balanced_and_not_solvable_by_length():
    from aura.evaluation.suite import SUITE_DIR, TASKS, item_problem

    tasks = _tasks()
    assert sum(len(t.docs) for t in tasks) >= 300
    assert {t.name for t in tasks} == set(TASKS)
    for task in tasks:
        n, k = len(task.docs), task.spec.n_choices
        assert n >= 50
        assert len({d.id for d in task.docs}) == n
        for d in task.docs:  # one gold index in range, distinct non-empty choices
            assert item_problem({"id": d.id, "query": d.query, "choices": list(d.choices), "gold": d.gold}, k) is None
        chance = 1 / k
        by_position = [sum(d.gold == i for d in task.docs) / n for i in range(k)]
        assert max(by_position) <= chance + 0.05, (task.name, by_position)  # no favourite position
        for pick in (min, max):  # "always the shortest/longest answer" is near chance
            hits = sum(pick(range(k), key=lambda i, d=d: len(d.choices[i])) == d.gold for d in task.docs) / n
            assert hits <= chance + 0.10, (task.name, pick.__name__, hits)
    grammar = next(t for t in tasks if t.name == "aura_es_gramatica")
    kinds = {json.loads(line)["phenomenon"] for line in (SUITE_DIR / "aura_es_gramatica.jsonl").open(encoding="utf-8")}
    assert kinds == {"concordancia", "subjuntivo", "ser_estar", "tildes"} and grammar.docs[0].query == ""
    # every answer key points at the answer the item's author marked right in the source files
    sys.path.insert(0, str(ROOT))
    from scripts.aura_es_items import causa_efecto, conocimiento, gramatica, lectura

    right = {
        "aura_es_lectura": [q[1] for _, qs in lectura.PASSAGES for q in qs],
        "aura_es_causa_efecto": [it[2] for it in causa_efecto.ITEMS],
        "aura_es_gramatica": [it[1] for it in gramatica.ITEMS],
        "aura_es_conocimiento": [it[1] for it in conocimiento.ITEMS],
    }
    for task in tasks:
        assert [d.choices[d.gold] for d in task.docs] == right[task.name], task.name
    # the shipped files are exactly what the hand-written items render to
    check = subprocess.run(
        [sys.executable, "scripts/build_aura_es.py", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr


def _independent_scores(model_dir, task, docs):
    """Per document and choice: log P(continuation | context) from one plain forward over the whole
    sequence, tokenised as lm-eval does (context, then what context + continuation adds)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(model_dir)).eval()
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    out = []
    for doc in docs:
        pairs = []
        for choice in doc.choices:
            cont_text = task.spec.target_delimiter + choice
            if doc.query:
                ctx = tok(doc.query)["input_ids"]
                pairs.append((ctx, tok(doc.query + cont_text)["input_ids"][len(ctx) :]))
            else:
                pairs.append(([tok.eos_token_id], tok(cont_text, add_special_tokens=False)["input_ids"]))
        width = max(len(c) + len(k) for c, k in pairs)  # full sequences, one row per choice, padded at the end
        ids = torch.tensor([c + k + [0] * (width - len(c) - len(k)) for c, k in pairs])
        with torch.no_grad():
            logp = torch.log_softmax(model(ids).logits.double(), -1)  # (k, T, V)
        out.append([sum(float(logp[r, len(c) - 1 + j, t]) for j, t in enumerate(k)) for r, (c, k) in enumerate(pairs)])
    return out


def test_suite_accuracy_equals_independent_loglikelihood(tiny_zoo, tmp_path):
    from transformers import AutoTokenizer

    out = tmp_path / "suite.json"
    r = run_aura_here(
        "eval",
        "--model",
        tiny_zoo["llama"],
        "--compare",
        tiny_zoo["gpt2"],
        "--suite",
        "aura-es",
        "--limit",
        "7",
        "--batch-size",
        "3",
        "--output",
        out,
    )
    assert r.returncode == 0, r.stderr
    assert "aura_es_lectura" in r.stdout and "bits_per_byte" in r.stdout and "fertility" in r.stdout
    reports = {rep["model"]: rep for rep in json.loads(out.read_text())["results"]}
    tasks = [type(t)(t.spec, t.docs[:7]) for t in _tasks()]
    for name in ("llama", "gpt2"):
        rows = {(row["task"], row["metric"]): row for row in reports[str(tiny_zoo[name])]["rows"]}
        for task in tasks:
            scores = _independent_scores(tiny_zoo[name], task, task.docs)
            acc = sum(max(range(len(s)), key=s.__getitem__) == d.gold for s, d in zip(scores, task.docs))
            norm = sum(
                max(range(len(s)), key=lambda i, s=s, d=d: s[i] / len(d.choices[i])) == d.gold
                for s, d in zip(scores, task.docs)
            )
            assert rows[(task.name, "acc")]["value"] == acc / 7, (name, task.name)
            assert rows[(task.name, "acc_norm")]["value"] == norm / 7, (name, task.name)
            assert rows[(task.name, "acc")]["n"] == 7
        from aura.evaluation.task_scores import suite_texts

        tok = AutoTokenizer.from_pretrained(str(tiny_zoo[name]))
        texts = suite_texts(tasks)
        tokens = sum(len(tok(t, add_special_tokens=False)["input_ids"]) for t in texts)
        assert rows[("aura-es", "fertility")]["value"] == pytest.approx(tokens / sum(len(t.split()) for t in texts))
        assert 0 < rows[("aura-es", "bits_per_byte")]["value"] < 20
    assert reports[str(tiny_zoo["llama"])]["suite"]["versions"]["aura_es_lectura"] == "1.0"


def test_suite_results_are_written_next_to_the_model_and_in_spanish(tiny_zoo, tmp_path):
    model = shutil.copytree(tiny_zoo["llama"], tmp_path / "mi-modelo")
    r = run_aura_here("eval", "--model", model, "--suite", "aura-es", "--limit", "3", env={"AURA_LANG": "es"})
    assert r.returncode == 0, r.stderr
    assert "tarea" in r.stdout and "error estándar" in r.stdout and "preguntas" in r.stdout
    saved = json.loads((tmp_path / "mi-modelo.eval-aura-es.limit3.json").read_text())  # a partial run, so named
    assert not (tmp_path / "mi-modelo.eval-aura-es.json").exists()
    assert saved["suite"]["scorer"] == "aura" and len(saved["rows"]) == 4 * 2 + 1 + 2  # + aura_es_matematicas


def test_model_that_does_not_load_is_a_clear_error(tiny_zoo, tmp_path):
    broken = shutil.copytree(tiny_zoo["llama"], tmp_path / "roto")
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    r = run_aura_here("eval", "--model", broken, "--suite", "aura-es", "--limit", "2")
    assert r.returncode == 2
    # named before loading: the file, and what is wrong with it
    assert "model.safetensors is damaged or incomplete" in r.stderr and str(broken) in r.stderr
    assert "Traceback" not in r.stderr
    r = run_aura_here("eval", "--model", broken)
    assert r.returncode == 2 and "--suite (aura-es" in r.stderr
