"""``aura eval --suite es-estandar-rapida``: lm-evaluation-harness really runs its tasks, on datasets written
here in each task's own hub columns (a ``--suite-data`` folder), and every score is the one lm-eval's own
``simple_evaluate`` gives on the same data (a task YAML that includes lm-eval's and only changes the loader).
Also: every suite entry is a real lm-eval task reporting the suite's metric; an unknown suite, a folder
missing a dataset and the hub unreachable without a folder are clear errors."""

from __future__ import annotations

import json

import pytest

from aura.evaluation.standard_suite import FAST, FULL, SUITES, SuiteTask
from tests.conftest import run_aura, run_aura_here
from tests.test_eval_harness import OFFLINE

PLACES = [
    ("Lima", "Perú", ["Chile", "Bolivia", "Ecuador"]),
    ("Quito", "Ecuador", ["Perú", "Colombia", "Venezuela"]),
    ("Montevideo", "Uruguay", ["Paraguay", "Argentina", "Chile"]),
    ("Asunción", "Paraguay", ["Uruguay", "Bolivia", "Brasil"]),
    ("Managua", "Nicaragua", ["Honduras", "Panamá", "Cuba"]),
    ("La Paz", "Bolivia", ["Perú", "Chile", "Ecuador"]),
    ("Caracas", "Venezuela", ["Colombia", "Cuba", "Panamá"]),
]


def belebele_rows() -> list[dict]:
    rows = []
    for i, (city, country, wrong) in enumerate(PLACES):
        options = wrong[: i % 4] + [country] + wrong[i % 4 :]
        rows.append(
            {
                "link": f"https://example.org/{i}",
                "question_number": 1,
                "flores_passage": f"{city} es la capital de {country}. Tiene un clima templado y mucha historia.",
                "question": f"¿De qué país es capital {city}?",
                **{f"mc_answer{k + 1}": o for k, o in enumerate(options)},
                "correct_answer_num": str(i % 4 + 1),
                "dialect": "spa_Latn",
                "ds": "2023-05-03",
            }
        )
    return rows


def xstorycloze_rows() -> list[dict]:
    return [
        {
            "story_id": f"s{i}",
            "input_sentence_1": f"Ana viajó a {city}.",
            "input_sentence_2": "Llegó de noche al hotel.",
            "input_sentence_3": "Estaba muy cansada.",
            "input_sentence_4": "Se fue a dormir enseguida.",
            "sentence_quiz1": "Al día siguiente visitó la ciudad." if i % 2 else "El hotel se fue volando.",
            "sentence_quiz2": "El hotel se fue volando." if i % 2 else "Al día siguiente visitó la ciudad.",
            "answer_right_ending": 1 if i % 2 else 2,
        }
        for i, (city, _, _) in enumerate(PLACES[:6])
    ]


def xnli_rows() -> list[dict]:
    return [
        {
            "premise": f"{city} es la capital de {country}.",
            "hypothesis": [f"{country} tiene capital.", "Hace frío en la luna.", f"{city} no está en {country}."][
                i % 3
            ],
            "label": i % 3,
        }
        for i, (city, country, _) in enumerate(PLACES[:6])
    ]


def openbookqa_rows() -> list[dict]:
    return [
        {
            "id": f"q{i}",
            "question_stem": f"¿Qué país tiene por capital {city}?",
            "choices": {"text": (wrong[: i % 4] + [country] + wrong[i % 4 :]), "label": ["A", "B", "C", "D"]},
            "answerKey": "ABCD"[i % 4],
        }
        for i, (city, country, wrong) in enumerate(PLACES[:5])
    ]


# (dataset folder under --suite-data, split, rows): the hub dataset each fast-suite task reads, its own columns
DATA = {
    "belebele_spa_Latn": ("facebook/belebele/spa_Latn", "test", belebele_rows),
    "xstorycloze_es": ("juletxara/xstory_cloze/es", "eval", xstorycloze_rows),
    "xnli_es": ("facebook/xnli/es", "validation", xnli_rows),
    "openbookqa_es": ("BSC-LT/openbookqa-es/default", "test", openbookqa_rows),
}
# the split each 5-shot task draws its examples from, when it is not the scored one (lm-eval's order: the
# training split, else the validation split)
FEWSHOT = {"xstorycloze_es": "train", "openbookqa_es": "validation"}


def write_jsonl(path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


@pytest.fixture
def suite_data(tmp_path):
    root = tmp_path / "datos"
    for task, (folder, split, rows) in DATA.items():
        write_jsonl(root / folder / f"{split}.jsonl", rows())
        if task in FEWSHOT:  # the examples: the same rows, another split
            write_jsonl(root / folder / f"{FEWSHOT[task]}.jsonl", rows())
    return root


def reference_scores(model_dir, root, tmp_path) -> dict:
    """lm-eval alone on the same files: a task YAML per suite task that includes lm-eval's own and changes only
    the loader (and sets the suite's few-shot count), run by ``simple_evaluate`` with its own TaskManager."""
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager
    from transformers import AutoModelForCausalLM, AutoTokenizer

    index = TaskManager().task_index
    ref_dir = tmp_path / "ref"
    ref_dir.mkdir()
    for t in FAST:
        folder, split, _ = DATA[t.task]
        splits = [split, *([FEWSHOT[t.task]] if t.task in FEWSHOT else [])]
        cfg = {
            "include": str(index[t.task].yaml_path),
            "task": f"ref_{t.task}",
            "dataset_path": "json",
            "dataset_name": None,
            "dataset_kwargs": {"data_files": {s: str(root / folder / f"{s}.jsonl") for s in splits}},
            "training_split": "train" if "train" in splits else None,
            "validation_split": next((s for s in splits if s in ("validation", "eval")), None),
            "num_fewshot": t.num_fewshot,
        }
        (ref_dir / f"ref_{t.task}.yaml").write_text(json.dumps(cfg), encoding="utf-8")  # JSON is YAML
    model = AutoModelForCausalLM.from_pretrained(str(model_dir)).eval()
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    out = simple_evaluate(
        model=HFLM(pretrained=model, tokenizer=tok, batch_size=4, max_length=model.config.max_position_embeddings),
        tasks=[f"ref_{t.task}" for t in FAST],
        task_manager=TaskManager(include_path=[str(ref_dir)], include_defaults=False),
        bootstrap_iters=1000,
    )
    return {name.removeprefix("ref_"): metrics for name, metrics in out["results"].items()} | {
        "n-shot": {k.removeprefix("ref_"): v for k, v in out["n-shot"].items()}
    }


def test_fast_suite_runs_lm_eval_on_a_local_folder_and_matches_lm_eval(tiny_zoo, suite_data, tmp_path):
    out = tmp_path / "suite.json"
    r = run_aura(
        "eval",
        "--model",
        tiny_zoo["llama"],
        "--suite",
        "es-estandar-rapida",
        "--suite-data",
        suite_data,
        "--batch-size",
        "4",
        "--output",
        out,
        env=OFFLINE,
    )
    assert r.returncode == 0, r.stderr
    report = json.loads(out.read_text())["results"][0]
    assert report["suite"]["name"] == "es-estandar-rapida" and report["suite"]["data"] == str(suite_data)
    rows = {row["task"]: row for row in report["rows"]}
    assert list(rows) == [t.task for t in FAST]  # one row per task: the suite's metric, in the suite's order
    ref = reference_scores(tiny_zoo["llama"], suite_data, tmp_path)
    for t in FAST:
        row = rows[t.task]
        assert row["metric"] == t.metric and row["suite"] == "es-estandar-rapida"
        assert row["num_fewshot"] == t.num_fewshot == ref["n-shot"][t.task]
        assert row["n"] == len(DATA[t.task][2]())  # every row written (fewer than the suite's limit)
        assert 0.0 <= row["value"] <= 1.0
        # lm-eval's stderr of a mean of 0/1 scores: > 0 unless every item scored the same
        assert row["stderr"] > 0 if 0 < row["value"] < 1 else row["stderr"] == 0
        assert row["value"] == ref[t.task][f"{t.metric},none"], t.task
        assert row["stderr"] == pytest.approx(ref[t.task][f"{t.metric}_stderr,none"]), t.task
        assert len(row["items"]["scores"]) == row["n"]  # per-item scores for paired comparisons
    assert "belebele_spa_Latn" in r.stdout and "es-estandar-rapida" in r.stdout


def test_suites_name_real_lm_eval_tasks_and_metrics():
    """Every entry is a task lm-eval knows, whose YAML lists the suite's metric (what published scores are
    matched on), and the fast suite keeps the full suite's settings."""
    from lm_eval.tasks import TaskManager

    from aura.evaluation.standard_suite import task_config

    manager = TaskManager()
    for t in FULL:
        cfg = task_config(manager, t.task)
        assert t.metric in [m["metric"] for m in cfg["metric_list"]], t.task
        assert t.filter == "none" or t.filter in [f["name"] for f in cfg.get("filter_list", [])], t.task
    full = {t.task: t for t in FULL}
    assert all(isinstance(t, SuiteTask) and t.limit > 0 for t in FAST)
    assert all((t.num_fewshot, t.metric) == (full[t.task].num_fewshot, full[t.task].metric) for t in FAST)
    assert set(SUITES) == {"es-estandar", "es-estandar-rapida"}


def test_unknown_suite_lists_every_suite(tiny_zoo):
    r = run_aura_here("eval", "--model", tiny_zoo["llama"], "--suite", "es-estandard")
    assert r.returncode == 2
    assert "--suite es-estandard does not exist. Suites: aura-es, es-estandar, es-estandar-rapida." in r.stderr


def test_folder_missing_a_dataset_names_it_and_its_path(tiny_zoo, suite_data):
    (suite_data / "facebook" / "xnli" / "es" / "validation.jsonl").unlink()
    r = run_aura_here(
        "eval", "--model", tiny_zoo["llama"], "--suite", "es-estandar-rapida", "--suite-data", suite_data, env=OFFLINE
    )
    assert r.returncode == 2, r.stderr
    expected = suite_data / "facebook" / "xnli" / "es" / "validation.jsonl"
    assert f"the dataset facebook/xnli (es) is missing (task xnli_es, split validation). Expected {expected}" in (
        r.stderr
    )


def test_without_folder_offline_names_the_datasets_and_the_folder_option(tiny_zoo, tmp_path):
    r = run_aura_here(
        "eval",
        "--model",
        tiny_zoo["llama"],
        "--suite",
        "es-estandar-rapida",
        env={**OFFLINE, "HF_HOME": str(tmp_path / "hf")},
    )
    assert r.returncode == 2, r.stderr
    assert "facebook/belebele" in r.stderr and "--suite-data DIR" in r.stderr


def test_download_refused_offline(tmp_path):
    r = run_aura_here("eval", "--suite", "es-estandar", "--download-to", tmp_path / "d", env=OFFLINE)
    assert r.returncode == 2 and "--download-to: cannot download without the Hugging Face hub" in r.stderr
    assert not (tmp_path / "d").exists()


def test_each_task_keeps_its_own_limit(tiny_zoo, monkeypatch):
    """``run_tasks`` with a limit per task (how a suite sets its own): lm-eval runs once per limit, each task
    scores its own number of documents, and every row says the few-shot count lm-eval used."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from aura.evaluation.harness import run_tasks

    for var, value in OFFLINE.items():
        monkeypatch.setenv(var, value)
    model = AutoModelForCausalLM.from_pretrained(str(tiny_zoo["llama"])).eval()
    tok = AutoTokenizer.from_pretrained(str(tiny_zoo["llama"]))
    out = run_tasks(model, tok, ["aura_es_causa_efecto", "aura_es_gramatica"], limits=[3, 5], batch_size=4)
    seen = {(r["task"], r["metric"]): (r["n"], r["num_fewshot"], len(r["items"]["scores"])) for r in out["rows"]}
    assert seen[("aura_es_causa_efecto", "acc")] == (3, 0, 3)
    assert seen[("aura_es_gramatica", "acc")] == (5, 0, 5)


def copa_rows() -> list[dict]:
    """COPA-es's hub columns: a premise, two choices, whether the cause or the effect is asked, the label."""
    rows = []
    for i, (city, country, _) in enumerate(PLACES):
        right, wrong = f"La gente visitó {city}.", "El río subió al cielo."
        first, second = (right, wrong) if i % 2 else (wrong, right)
        rows.append(
            {
                "premise": f"{city} celebró una gran fiesta en {country}.",
                "choice1": first,
                "choice2": second,
                "question": "effect" if i % 3 else "cause",
                "label": 0 if i % 2 else 1,
                "idx": i,
            }
        )
    return rows


def test_copa_es_loads_despite_transformers_5_and_matches_lm_eval(tiny_zoo, tmp_path, monkeypatch):
    """spanish_bench's utils.py imports ``transformers.data.metrics.squad_metrics``, which transformers 5
    removed: with Aura's module of that name (``aura.evaluation.squad_metrics``) the full suite's copa_es
    (5-shot acc) loads and scores what lm-eval's own ``simple_evaluate`` gives on the same files."""
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from aura.evaluation.harness import task_manager
    from aura.evaluation.standard_suite import SuitePlan, run_suite, task_specs

    for var, value in OFFLINE.items():
        monkeypatch.setenv(var, value)
    [copa] = [t for t in FULL if t.task == "copa_es"]
    assert (copa.num_fewshot, copa.metric) == (5, "acc")
    root = tmp_path / "datos"
    for split in ("validation", "test"):
        write_jsonl(root / "BSC-LT/COPA-es/default" / f"{split}.jsonl", copa_rows())
    manager = task_manager(["copa_es"], [])  # registers the stand-in; lm-eval alone would fail to import utils.py
    plan = SuitePlan(
        "es-estandar", (copa,), tuple(task_specs(manager, (copa,), suite="es-estandar", data_dir=root)), manager
    )
    model = AutoModelForCausalLM.from_pretrained(str(tiny_zoo["llama"])).eval()
    tok = AutoTokenizer.from_pretrained(str(tiny_zoo["llama"]))
    [row] = run_suite(model, tok, plan, batch_size=4)["rows"]

    ref_dir = tmp_path / "ref"
    ref_dir.mkdir()
    files = {s: str(root / "BSC-LT/COPA-es/default" / f"{s}.jsonl") for s in ("validation", "test")}
    yaml = {"include": str(TaskManager().task_index["copa_es"].yaml_path), "task": "ref_copa_es", "num_fewshot": 5}
    yaml |= {"dataset_path": "json", "dataset_name": None, "dataset_kwargs": {"data_files": files}}
    (ref_dir / "ref_copa_es.yaml").write_text(json.dumps(yaml), encoding="utf-8")
    out = simple_evaluate(
        model=HFLM(pretrained=model, tokenizer=tok, batch_size=4, max_length=model.config.max_position_embeddings),
        tasks=["ref_copa_es"],
        task_manager=TaskManager(include_path=[str(ref_dir)], include_defaults=False),
    )["results"]["ref_copa_es"]
    assert row["n"] == len(PLACES) and row["num_fewshot"] == 5
    assert row["value"] == out["acc,none"] and row["stderr"] == pytest.approx(out["acc_stderr,none"])

    # the stand-in is the SQuAD definitions (xquad_es, coqa... score with them), worked by hand
    import transformers.data.metrics.squad_metrics as squad

    assert squad.compute_exact("The Gato.", "gato") == 1 and squad.compute_exact("el gato", "gato") == 0
    assert squad.compute_f1("El gato negro", "el gato") == pytest.approx(0.8)  # P 2/2, R 2/3
    assert (squad.compute_f1("", ""), squad.compute_f1("", "algo"), squad.compute_f1("sí", "no")) == (1.0, 0.0, 0.0)
