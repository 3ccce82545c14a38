"""``aura eval --tasks``: the real lm-evaluation-harness code path (its HFLM on the model Aura loaded, its
task loader and metrics) on tasks defined by local files, offline; it agrees with Aura's own scorer; an
unknown task and a task that needs the network are clear errors."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_aura, run_aura_here

OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}

CAPITALS = [
    ("Chile", "Santiago", ["Lima", "Quito", "Bogotá"]),
    ("Perú", "Lima", ["Santiago", "La Paz", "Caracas"]),
    ("Cuba", "La Habana", ["Managua", "San José", "Quito"]),
    ("Uruguay", "Montevideo", ["Asunción", "Buenos Aires", "Lima"]),
    ("Ecuador", "Quito", ["Bogotá", "Caracas", "Montevideo"]),
    ("Honduras", "Tegucigalpa", ["Managua", "San Salvador", "La Habana"]),
]


@pytest.fixture
def local_task(tmp_path):
    """A task of the user's own, as lm-eval defines one: a YAML file and a JSONL data file."""
    data = tmp_path / "capitales.jsonl"
    with data.open("w", encoding="utf-8") as f:
        for i, (country, right, wrong) in enumerate(CAPITALS):
            options = wrong[: i % 4] + [right] + wrong[i % 4 :]
            f.write(json.dumps({"pais": country, "opciones": options, "correcta": i % 4}, ensure_ascii=False) + "\n")
    (tmp_path / "capitales.yaml").write_text(
        "task: mis_capitales\n"
        "dataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    test: {data}\n"
        "output_type: multiple_choice\n"
        "test_split: test\n"
        'doc_to_text: "¿Cuál es la capital de {{pais}}?\\nRespuesta:"\n'
        "doc_to_choice: opciones\n"
        "doc_to_target: correcta\n"
        "metric_list:\n  - metric: acc\n"
        "metadata:\n  version: 2.0\n",
        encoding="utf-8",
    )
    return tmp_path


def test_local_tasks_run_through_lm_eval_offline_and_match_aura_scorer(tiny_zoo, local_task, tmp_path):
    import lm_eval
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from aura.evaluation.scorer import score_suite
    from aura.evaluation.suite import Doc, Task, TaskSpec, load_suite

    out = tmp_path / "harness.json"
    r = run_aura(
        "eval",
        "--model",
        tiny_zoo["gpt2"],
        "--tasks",
        "mis_capitales,aura_es_causa_efecto",
        "--include-path",
        local_task,
        "--limit",
        "8",
        "--batch-size",
        "3",
        "--output",
        out,
        env=OFFLINE,
    )
    assert r.returncode == 0, r.stderr
    assert "mis_capitales" in r.stdout and "acc" in r.stdout
    report = json.loads(out.read_text())["results"][0]
    assert report["harness"]["version"] == lm_eval.__version__
    assert report["harness"]["versions"]["mis_capitales"] == "2.0"
    rows = {(row["task"], row["metric"]): row for row in report["rows"]}
    assert rows[("mis_capitales", "acc")]["n"] == len(CAPITALS)
    assert rows[("aura_es_causa_efecto", "acc")]["n"] == 8

    # Aura's batched scorer on the same requests gives the same accuracies as lm-eval's HF backend.
    model = AutoModelForCausalLM.from_pretrained(str(tiny_zoo["gpt2"])).eval()
    tok = AutoTokenizer.from_pretrained(str(tiny_zoo["gpt2"]))
    copa = next(t for t in load_suite(8) if t.name == "aura_es_causa_efecto")
    capitals = Task(
        TaskSpec("mis_capitales", 4, " "),
        tuple(
            Doc(str(i), f"¿Cuál es la capital de {c}?\nRespuesta:", tuple(w[: i % 4] + [r] + w[i % 4 :]), i % 4)
            for i, (c, r, w) in enumerate(CAPITALS)
        ),
    )
    for res in score_suite(model, tok, [copa, capitals], batch_size=4):
        assert rows[(res["task"], "acc")]["value"] == res["acc"], res["task"]
        # each document's score, from lm-eval's logged samples: Aura's per-item hits, in the same order
        assert rows[(res["task"], "acc")]["items"]["scores"] == res["acc_items"], res["task"]
        if (res["task"], "acc_norm") in rows:
            assert rows[(res["task"], "acc_norm")]["value"] == res["acc_norm"]
            assert rows[(res["task"], "acc")]["stderr"] == pytest.approx(res["acc_stderr"])


def test_task_needing_the_network_offline_is_a_clear_error(tiny_zoo, tmp_path):
    """A task whose data lives on the Hugging Face hub (as most of lm-eval's do), run with no network."""
    (tmp_path / "hub.yaml").write_text(
        "task: tarea_del_hub\ndataset_path: facebook/xnli\ndataset_name: es\noutput_type: multiple_choice\n"
        'test_split: test\ndoc_to_text: premise\ndoc_to_choice: "{{[hypothesis, premise]}}"\n'
        "doc_to_target: label\nmetric_list:\n  - metric: acc\n",
        encoding="utf-8",
    )
    r = run_aura(
        "eval",
        "--model",
        tiny_zoo["llama"],
        "--tasks",
        "tarea_del_hub",
        "--include-path",
        tmp_path,
        "--limit",
        "2",
        env=OFFLINE,
    )
    assert r.returncode == 2
    assert "'tarea_del_hub'" in r.stderr and "Hugging Face hub" in r.stderr
    assert "--suite aura-es works offline" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow
def test_unknown_task_suggests_close_names(tiny_zoo):
    r = run_aura("eval", "--model", tiny_zoo["llama"], "--tasks", "aura_es_gramatika", env=OFFLINE)
    assert r.returncode == 2
    assert "no task 'aura_es_gramatika'" in r.stderr and "Did you mean: aura_es_gramatica" in r.stderr
    assert "Traceback" not in r.stderr


UNREACHABLE = {
    "HF_ENDPOINT": "http://127.0.0.1:9",
    "HF_HUB_OFFLINE": "",
    "HF_DATASETS_OFFLINE": "",
    "TRANSFORMERS_OFFLINE": "",
}  # a hub that refuses every connection


def _hub_task(folder):
    (folder / "hub.yaml").write_text(
        "task: tarea_del_hub\ndataset_path: facebook/xnli\ndataset_name: es\noutput_type: multiple_choice\n"
        'test_split: test\ndoc_to_text: premise\ndoc_to_choice: "{{[hypothesis, premise]}}"\n'
        "doc_to_target: label\nmetric_list:\n  - metric: acc\n",
        encoding="utf-8",
    )
    return folder


def test_hub_data_with_no_network_is_refused_at_once_naming_the_offline_suite(tiny_zoo, tmp_path, monkeypatch):
    """Issue 25.12: with the hub unreachable, a task whose data is not cached failed after a minute of
    English retry lines; now the task index and the local caches are checked first."""
    env = {**UNREACHABLE, "HF_HOME": str(tmp_path / "hf"), "AURA_LANG": "es"}
    r = run_aura_here(
        "eval",
        "--model",
        tiny_zoo["llama"],
        "--tasks",
        "tarea_del_hub",
        "--include-path",
        _hub_task(tmp_path),
        "--limit",
        "2",
        env=env,
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "tarea_del_hub" in r.stderr and "facebook/xnli" in r.stderr and "127.0.0.1:9" in r.stderr, r.stderr
    assert "no en la caché de este equipo" in r.stderr and "--suite aura-es" in r.stderr
    assert "Retrying" not in r.stdout + r.stderr  # nothing was asked of the hub
    # data already in a local cache is not refused up front (lm-eval reads the cache)
    from aura.evaluation.task_data import is_cached

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert not is_cached("facebook/xnli")
    (tmp_path / "hf" / "datasets" / "facebook___xnli").mkdir(parents=True)
    assert is_cached("facebook/xnli")


@pytest.mark.slow
def test_builtin_group_offline_is_refused_before_any_download(tiny_zoo, tmp_path):
    """`--tasks spanish_bench` offline: lm-eval's own group, its member tasks' hub datasets named."""
    r = run_aura_here(
        "eval",
        "--model",
        tiny_zoo["llama"],
        "--tasks",
        "spanish_bench",
        env={**UNREACHABLE, "HF_HOME": str(tmp_path / "hf")},
    )
    assert r.returncode == 2 and "--tasks 'spanish_bench': their data is on the Hugging Face hub" in r.stderr, r.stderr
    assert "facebook/belebele" in r.stderr or "BSC-LT/COPA-es" in r.stderr
    assert "--suite aura-es" in r.stderr and "Retrying" not in r.stdout + r.stderr


def test_shipped_math_task_runs_through_lm_eval_offline(tiny_zoo, tmp_path):
    """The aura-es math task as an lm-eval YAML (generate_until + the exact-answer rule): lm-eval loads the
    shipped test split offline, generates and scores every item."""
    import importlib.util

    from aura.evaluation.math_task import load_problems
    from aura.evaluation.suite import SUITE_DIR

    spec = importlib.util.spec_from_file_location("aura_es_loader", SUITE_DIR / "loader.py")
    loader = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loader)
    assert list(loader.load_math()["test"]) == load_problems()
    doc = {"answer": "12.5"}
    assert loader.process_math(doc, ["Son 10 + 2,5.\nRespuesta: 12,5"]) == {"exact_match": 1.0}
    assert loader.process_math(doc, ["Respuesta: 13"]) == {"exact_match": 0.0}

    from tests.tiny_models import build_llama

    # lm-eval needs room for its 256 generated tokens: a context longer than the zoo's 256
    model = build_llama(tmp_path / "llama1k", tiny_zoo["tokenizer"], ctx=1024)
    out = tmp_path / "math.json"
    r = run_aura(
        "eval", "--model", model, "--tasks", "aura_es_matematicas", "--limit", "3", "--output", out, env=OFFLINE
    )
    assert r.returncode == 0, r.stderr
    rows = {(row["task"], row["metric"]): row for row in json.loads(out.read_text())["results"][0]["rows"]}
    row = rows[("aura_es_matematicas", "exact_match")]
    assert row["n"] == 3
    # The reference: the same three problems generated greedily by transformers from the YAML's prompt
    # ("Usuario: {prompt}\nAsistente:", at most 256 tokens, cut at "\nUsuario:" or the end of text) and
    # scored by the task's own rule; lm-eval's mean must be that fraction, not any of 0, 1/3, 2/3 or 1.
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    lm = AutoModelForCausalLM.from_pretrained(model).eval()
    scores = []
    for doc in load_problems()[:3]:
        ids = tok(f"Usuario: {doc['prompt']}\nAsistente:", return_tensors="pt").input_ids
        with torch.no_grad():
            out = lm.generate(
                ids,
                max_new_tokens=256,
                do_sample=False,
                pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id,
            )
        text = tok.decode(out[0, ids.shape[1] :], skip_special_tokens=False)
        for stop in ("\nUsuario:", *([tok.eos_token] if tok.eos_token else [])):
            text = text.split(stop)[0]
        scores.append(loader.process_math(doc, [text])["exact_match"])
    assert row["value"] == pytest.approx(sum(scores) / 3), (row, scores)
