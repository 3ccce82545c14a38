"""Contamination: eval items planted in training text are found (as written, and after case, punctuation
and layout change; accents kept), Spanish text that holds none of them gives no false positive, the
pipeline's check follows the stages that made a model, and the report card says it before the scores."""

from __future__ import annotations

import json
import unicodedata

import pytest

from aura.data.contamination import EvalIndex, eval_items, scan, words
from aura.data.training_text import training_texts
from tests.conftest import ROOT

RES = ROOT / "aura" / "resources"
MC_TASKS = ("aura_es_lectura", "aura_es_causa_efecto", "aura_es_conocimiento", "aura_es_gramatica")


def test_normalisation_is_datatroves_with_spanish_marks_and_accents_kept():
    from datatrove.utils.text import PUNCTUATION_SET, TextNormConfig, simplify_text

    keep_accents = TextNormConfig(norm_unicode_diacritics=False, norm_numbers=False)
    texts = [line for p in sorted((RES / "corpus_es").glob("*.txt")) for line in p.read_text().splitlines() if line]
    for text in texts:
        theirs = simplify_text(text, keep_accents)
        # what datatrove's list misses: ¿ ¡ ° €, emoji, zero-width joiners
        missed = {c: " " for c in theirs if c not in PUNCTUATION_SET and unicodedata.category(c)[0] in "PSC"}
        assert words(text) == theirs.translate(str.maketrans(missed)).split(), text
    assert words("¿Él está AQUÍ?") == ["él", "está", "aquí"] and words("el esta aqui") != words("él está aquí")


def _doc_with(text: str) -> str:
    filler = "Ayer llovió en el valle y los caminos quedaron cubiertos de barro hasta la tarde."
    return f"{filler} {text} {filler}"


def test_planted_items_are_found_and_disjoint_spanish_text_gives_none(tmp_path):
    items = eval_items("aura-es")
    index = EvalIndex(items)
    by_task = {t: [i for i in items if i.task == t and len(words(i.text)) >= 13] for t in MC_TASKS[:3]}
    exact, shouted, accented = (
        by_task["aura_es_lectura"][0],
        by_task["aura_es_conocimiento"][0],
        by_task["aura_es_causa_efecto"][0],
    )
    assert any(unicodedata.normalize("NFD", c) != c for c in accented.text + shouted.text)  # accents to keep
    # as written; in capitals with its punctuation changed and its layout broken; decomposed accents (NFD)
    changed = shouted.text.upper().replace(",", " ;").replace(".", "!!").replace(" ", "\n  ", 3)
    planted = tmp_path / "train.jsonl"
    planted.write_text(
        "\n".join(
            json.dumps({"messages": [{"role": "user", "content": c}]}, ensure_ascii=False)
            for c in (
                "Hola, ¿qué tal?",
                _doc_with(exact.text),
                _doc_with(changed),
                _doc_with(unicodedata.normalize("NFD", accented.text)),
            )
        )
        + "\n"
    )
    found = scan(index, training_texts(planted))
    seen = {t: v["seen_ids"] for t, v in found["tasks"].items() if v["seen"]}

    def grams(t):
        w = words(t)
        return {tuple(w[j : j + 13]) for j in range(len(w) - 12)}

    # a reading passage is shared by its questions: every item with one of its 13-grams was seen
    same_passage = sorted(i.id for i in items if i.task == "aura_es_lectura" and grams(i.text) & grams(exact.text))
    assert len(same_passage) > 1
    assert seen == {
        "aura_es_lectura": same_passage,
        "aura_es_conocimiento": [shouted.id],
        "aura_es_causa_efecto": [accented.id],
    }
    assert found["tasks"]["aura_es_lectura"]["examples"][0]["where"] == f"{planted}:2"
    # Spanish text that is not the suite's: the shipped corpus, instructions and preference pairs
    clean = scan(
        index,
        (t for p in ("corpus_es", "instrucciones_es.csv", "preference_es.jsonl") for t in training_texts(RES / p)),
    )
    assert clean["documents"] > 400 and clean["seen"] == 0
    # half an item (fewer words than an n-gram) is not an overlap
    half = " ".join(exact.text.split()[:12])
    assert index.first_hit(_doc_with(half)) is None


def test_a_prepared_dir_is_read_back_from_its_shards(prepared_corpus):
    docs = list(training_texts(prepared_corpus))
    corpus = "".join(p.read_text() for p in sorted((RES / "corpus_es").glob("*.txt")))
    assert len(docs) > 10 and all(" ".join(words(t)) in " ".join(words(corpus)) for _, t in docs[:20])


def test_the_pipeline_checks_the_stages_that_made_the_model_and_the_card_says_so(tmp_path, prepared_corpus):
    from aura.pipeline import report_card as report, spec
    from aura.pipeline.pipeline_state import FINISHED, State

    item = next(i for i in eval_items("aura-es", limit=8) if i.task == "aura_es_lectura")
    sft_data = tmp_path / "sft.jsonl"
    sft_data.write_text(json.dumps({"prompt": "Lee:", "completion": _doc_with(item.text)}, ensure_ascii=False) + "\n")
    other = tmp_path / "not-trained-on.txt"  # what the eval measures perplexity on: not training data
    other.write_text(_doc_with(item.text))
    yaml = tmp_path / "p.yaml"
    yaml.write_text(f"""stages:
  - name: pretrain
    command: pretrain
    options: {{data: ["{prepared_corpus}"], model_preset: manual, arch: llama, embed_size: 32, num_layers: 1,
               num_heads: 2, seq_length: 32, max_steps: 1, device: cpu}}
  - name: eval-base
    command: eval
    options: {{model: [pretrain.final], suite: aura-es, limit: 8, data: "{other}"}}
  - name: sft
    command: finetune
    options: {{base_model: pretrain.final, data: "{sft_data}", device: cpu}}
  - name: eval-sft
    command: eval
    options: {{model: [sft.final], suite: aura-es, limit: 8}}
""")
    out = tmp_path / "out"
    pipeline = spec.resolve(spec.load(str(yaml)), out)
    state = State(out)
    for stage in pipeline.stages:
        state.update(stage.name, status=FINISHED)
        (out / stage.name).mkdir(parents=True, exist_ok=True)
    from aura.evaluation.references import annotate

    story = {"task": "xstorycloze_es", "metric": "acc", "num_fewshot": 5, "value": 0.61, "stderr": 0.01, "n": 1511}
    annotate([story])  # as aura eval writes a standard suite's row: with the published scores of its task
    for name, model in (("eval-base", "pretrain"), ("eval-sft", "sft")):
        row = {"task": "aura_es_lectura", "metric": "acc", "value": 0.5, "stderr": 0.19, "n": 8}
        rows = [row, story] if name == "eval-sft" else [row]
        (out / name / "final.eval-aura-es.limit8.json").write_text(
            json.dumps({"results": [{"model": str(out / model / "final"), "rows": rows}]})
        )
    data = report.write(out, pipeline, state)
    base = json.loads((out / "eval-base" / "contamination.json").read_text())
    sft = json.loads((out / "eval-sft" / "contamination.json").read_text())
    assert base["stages"] == ["pretrain"] and base["seen"] == 0 and base["items"] == 40
    seen = sft["tasks"]["aura_es_lectura"]["seen"]  # the item and the questions on the same passage
    assert sft["stages"] == ["sft", "pretrain"] and sft["seen"] == seen >= 1
    assert item.id in sft["tasks"]["aura_es_lectura"]["seen_ids"]
    assert [s["path"] for s in sft["sources"]] == [str(sft_data), str(prepared_corpus)]
    md = (out / "report.md").read_text()
    assert md.index("Contamination: eval items seen in training") < md.index("Models side by side")
    assert "| pretrain | 0 of 40 |" in md and f"| sft | {seen} of 40 |" in md and item.id in md
    # the same difference twice: the card marks it as noise
    assert "Difference or noise?" in md and "≤ 1 standard error); unpaired" in md
    assert "0.5000 ± 0.1900 ≈" in md  # each score with its standard error
    # beside the sft model's standard-suite row, the published score measured the same way (Salamandra's card)
    assert "Published references measured the same way" in md
    assert "| sft | xstorycloze_es/acc | 0.6100 ± 0.0100 | BSC-LT/salamandra-2b | 0.6473 |" in md
    assert {m["stage"]: m["contamination"]["seen"] for m in data["models"]} == {"pretrain": 0, "sft": seen}
    mtime = (out / "eval-sft" / "contamination.json").stat().st_mtime_ns
    report.write(out, pipeline, state)  # nothing changed: the check is not run again
    assert (out / "eval-sft" / "contamination.json").stat().st_mtime_ns == mtime


def test_curate_decontaminate_drops_exactly_the_planted_documents(tmp_path):
    pytest.importorskip("datatrove")
    from tests.conftest import run_aura_here
    from tests.test_curate import read_shards, spanish_docs

    items = [i for i in eval_items("aura-es") if i.task in MC_TASKS and len(words(i.text)) >= 13]
    docs = spanish_docs()[:12]
    planted = {2: items[0], 7: items[-1]}  # two documents carry an eval item inside their prose
    for k, item in planted.items():
        half = len(docs[k]) // 2
        docs[k] = docs[k][:half] + " " + item.text.upper() + " " + docs[k][half:]
    src = tmp_path / "in.jsonl"
    src.write_text(
        "".join(json.dumps({"id": f"d{i}", "text": t}, ensure_ascii=False) + "\n" for i, t in enumerate(docs))
    )
    fast = ("--no-minhash", "--no-exact-dedup", "--no-quality", "--no-langid", "--no-pii", "--workers", "1")
    r = run_aura_here(
        "data", "curate", src, "--output-dir", tmp_path / "out", "--decontaminate", "aura-es", "--sample", "5", *fast
    )
    assert r.returncode == 0, r.stdout + r.stderr
    kept = read_shards(tmp_path / "out")
    assert len(kept) == len(docs) - 2 and not any(d["text"] == docs[k] for k in planted for d in kept)
    report = json.loads((tmp_path / "out" / ".curate" / "report.json").read_text())
    stage = next(s for s in report["stages"] if s["stage"] == "decontaminate")
    assert stage["docs_in"] - stage["docs_out"] == 2 and stage["removed"] == {"contaminated": 2}
    assert "eval n-grams" in r.stdout
    removed = [
        json.loads(x)
        for x in (tmp_path / "out" / ".curate" / "removed" / "contaminated.jsonl").read_text().splitlines()
    ]
    for doc in removed:  # the n-gram named is the planted item's (a reading passage may name a sister question)
        item = next(i for i in planted.values() if doc["metadata"]["contaminated_task"] == i.task)
        assert doc["metadata"]["contaminated_ngram"] in " ".join(words(item.text))
    bad = run_aura_here("data", "curate", src, "--output-dir", tmp_path / "o2", "--decontaminate", "mmlu")
    assert bad.returncode != 0 and "'mmlu' is not an eval set Aura knows" in bad.stdout + bad.stderr


def test_the_math_tasks_template_is_not_an_item_and_its_train_split_is_clean():
    """Every math problem ends with the same instruction: found on the whole task, it is left out even when a
    --limit scores two problems. The train split was built without the test problems' 13-grams
    (scripts/build_math_es.py): the problems it dropped, put back, are found again, each one a real overlap."""
    path = RES / "math_es" / "train.jsonl"
    train = list(training_texts(path))
    whole = eval_items("aura-es")
    two = scan(EvalIndex(eval_items("aura-es", limit=2), whole=whole), train)
    assert two["seen"] == 0 and two["tasks"]["aura_es_matematicas"]["items"] == 2
    assert scan(EvalIndex(eval_items("aura-es", limit=2)), train)["seen"] == 2  # without the whole task: the template
    eight = scan(EvalIndex(eval_items("aura-es", limit=8), whole=whole), train)  # the demo's eval-grpo
    assert eight["tasks"]["aura_es_matematicas"]["seen"] == 0
    full = scan(EvalIndex(whole), train)["tasks"]["aura_es_matematicas"]
    assert (full["seen"], full["items"]) == (0, 140)
    # the same templates with the test problems' own words and numbers: what the build leaves out
    import random
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    from build_math_es import SEED, TEST, TOTAL, problems

    kept = {json.loads(line)["id"] for line in path.read_text(encoding="utf-8").splitlines()}
    stream = problems(random.Random(SEED))
    dropped = [row for row in (next(stream) for _ in range(TOTAL)) if row["id"] not in kept]
    test_ids = {json.loads(line)["id"] for line in (RES / "math_es" / "test.jsonl").read_text().splitlines()}
    dropped = [row for row in dropped if row["id"] not in test_ids]
    assert len(test_ids) == TEST and dropped
    back = scan(EvalIndex(whole), [(row["id"], text) for row in dropped for text in row.values()])
    assert back["tasks"]["aura_es_matematicas"]["seen"] > 0


def test_an_lm_eval_task_with_local_data_is_checked_and_one_on_the_hub_is_named(tmp_path, monkeypatch):
    pytest.importorskip("lm_eval")
    from aura.pipeline import spec
    from aura.pipeline.eval_contamination import check_stage

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    rows = [
        (
            "El río que cruza la ciudad vieja nace en la sierra y llega al mar tras muchos meandros, ¿cuál es?",
            "Montevideo",
            ["Asunción", "Quito", "Lima"],
        ),
        (
            (
                "Un texto largo sobre Perú que explica con detalle cuál es su capital y por qué la gente que vive "
                "allí la quiere tanto, ¿cuál es?"
            ),
            "Lima",
            ["Quito", "Bogotá", "Caracas"],
        ),
    ]
    data = tmp_path / "capitales.jsonl"
    data.write_text(
        "".join(
            json.dumps({"texto": t, "opciones": [r, *w], "correcta": 0}, ensure_ascii=False) + "\n" for t, r, w in rows
        )
    )
    tasks = tmp_path / "tareas"
    tasks.mkdir()
    (tasks / "capitales.yaml").write_text(
        f"task: mis_capitales_largas\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {data}\n"
        'output_type: multiple_choice\ntest_split: test\ndoc_to_text: "{{texto}}\\nRespuesta:"\n'
        "doc_to_choice: opciones\ndoc_to_target: correcta\nmetric_list:\n  - metric: acc\n",
        encoding="utf-8",
    )
    sft = tmp_path / "sft.jsonl"  # the second document, copied into the training data
    sft.write_text(
        json.dumps(
            {
                "prompt": "Pregunta",
                "completion": "Un texto largo sobre Perú que explica con detalle "
                "cuál es su capital y por qué la gente que vive allí la quiere tanto",
            },
            ensure_ascii=False,
        )
        + "\n"
    )
    yaml = tmp_path / "p.yaml"
    yaml.write_text(f"""stages:
  - name: sft
    command: finetune
    options: {{base_model: "{tmp_path}", data: "{sft}", device: cpu}}
  - name: eval
    command: eval
    options: {{model: [sft.final], tasks: "mis_capitales_largas,xnli_es", include_path: ["{tasks}"]}}
""")
    pipeline = spec.resolve(spec.load(str(yaml)), tmp_path / "out")
    (tmp_path / "out" / "eval").mkdir(parents=True)
    found = check_stage(tmp_path / "out", pipeline, pipeline.stage("eval"))
    assert found["tasks"]["mis_capitales_largas"]["seen_ids"] == ["1"] and found["items"] == 2
    assert found["tasks_not_read"] == {"xnli_es": ["facebook/xnli"]}


def test_a_standard_suite_stage_is_checked_as_its_lm_eval_tasks(tmp_path, monkeypatch):
    """An eval stage with ``suite: es-estandar-rapida`` is checked as the suite's lm-eval tasks: offline, with no
    data here, each task is named with its hub dataset instead of failing the report."""
    pytest.importorskip("lm_eval")
    from aura.evaluation.standard_suite import SUITES
    from aura.pipeline import spec
    from aura.pipeline.eval_contamination import check_stage

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    sft = tmp_path / "sft.jsonl"
    sft.write_text(json.dumps({"prompt": "Hola", "completion": "Buenos días"}) + "\n")
    yaml = tmp_path / "p.yaml"
    yaml.write_text(f"""stages:
  - name: sft
    command: finetune
    options: {{base_model: "{tmp_path}", data: "{sft}", device: cpu}}
  - name: eval
    command: eval
    options: {{model: [sft.final], suite: es-estandar-rapida}}
""")
    pipeline = spec.resolve(spec.load(str(yaml)), tmp_path / "out")
    (tmp_path / "out" / "eval").mkdir(parents=True)
    found = check_stage(tmp_path / "out", pipeline, pipeline.stage("eval"))
    assert set(found["tasks_not_read"]) == {t.task for t in SUITES["es-estandar-rapida"]}
    assert found["tasks_not_read"]["belebele_spa_Latn"] == ["facebook/belebele"] and found["items"] == 0
