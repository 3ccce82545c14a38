"""``aura eval --seeds N`` and groups of training seeds (``--model A1,A2``): the merged score is the mean of
the runs lm-eval really makes with each seed, each item is averaged over the runs, and ``--compare`` adds
the spread between seeds to the error, so a difference that one seed's items call significant becomes
noise when another seed moves the score as much."""

from __future__ import annotations

import json
import math
import statistics

import pytest

from tests.conftest import run_aura, run_aura_here
from tests.test_eval_harness import CAPITALS as HARNESS_CAPITALS, OFFLINE

CAPITALS = [  # the harness tests' six, and two more
    *HARNESS_CAPITALS,
    ("Bolivia", "Sucre", ["Asunción", "Lima", "Quito"]),
    ("Panamá", "Panamá", ["San José", "Managua", "Caracas"]),
]


@pytest.fixture
def fewshot_task(tmp_path):
    """A two-shot task of the user's own: lm-eval draws the examples of each prompt with its few-shot seed.
    The answer is a letter, so the context (those examples) decides between one-token choices."""
    data = tmp_path / "capitales.jsonl"
    with data.open("w", encoding="utf-8") as f:
        for i, (country, right, wrong) in enumerate(CAPITALS):
            options = wrong[: i % 4] + [right] + wrong[i % 4 :]
            listed = "\n".join(f"{letter}. {city}" for letter, city in zip("ABCD", options))
            row = {"pregunta": f"¿Cuál es la capital de {country}?\n{listed}", "correcta": i % 4}
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    (tmp_path / "capitales.yaml").write_text(
        "task: capitales_fewshot\n"
        "dataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    test: {data}\n"
        "output_type: multiple_choice\n"
        "test_split: test\n"
        "fewshot_split: test\n"
        "num_fewshot: 2\n"
        'doc_to_text: "{{pregunta}}\\nRespuesta:"\n'
        'doc_to_choice: ["A", "B", "C", "D"]\n'
        "doc_to_target: correcta\n"
        "metric_list:\n  - metric: acc\n"
        "metadata:\n  version: 1.0\n",
        encoding="utf-8",
    )
    return tmp_path


def _reference_runs(model_dir, task_dir, seeds: int) -> list[dict]:
    """lm-eval through ``run_tasks`` once per seed, in this process: {metric: row} of each run."""
    from aura.evaluation.harness import run_tasks
    from aura.inference.loading import load_hf, resolve_model

    model, tok = load_hf(resolve_model(str(model_dir), None), dtype="float32", device="cpu", merge=True)
    runs = []
    for k in range(seeds):
        out = run_tasks(model, tok, ["capitales_fewshot"], include_paths=[str(task_dir)], batch_size=4, seed=k)
        runs.append({r["metric"]: r for r in out["rows"] if r["task"] == "capitales_fewshot"})
    return runs


def test_seeds_and_training_seed_groups_merge_the_real_runs(tiny_zoo, fewshot_task, tmp_path):
    out = tmp_path / "seeds.json"
    group = f"{tiny_zoo['llama']},{tiny_zoo['gpt2']}"
    r = run_aura(
        "eval",
        "--model",
        group,
        "--compare",
        tiny_zoo["gpt2"],
        "--tasks",
        "capitales_fewshot",
        "--include-path",
        fewshot_task,
        "--seeds",
        "2",
        "--batch-size",
        "4",
        "--output",
        out,
        env=OFFLINE,
    )
    assert r.returncode == 0, r.stderr
    assert "between seeds" in r.stdout and "plus the spread between seeds" in r.stdout
    results = json.loads(out.read_text())
    grouped, single = results["results"]
    assert grouped["model"] == group and grouped["models"] == [str(tiny_zoo["llama"]), str(tiny_zoo["gpt2"])]
    assert single["harness"]["seeds"] == 2

    refs = {name: _reference_runs(tiny_zoo[name], fewshot_task, 2) for name in ("llama", "gpt2")}
    # the single model: the mean of lm-eval's two seeded runs, each item averaged over them
    row = next(x for x in single["rows"] if x["metric"] == "acc")
    per_seed = [run["acc"]["value"] for run in refs["gpt2"]]
    assert row["seeds"]["values"] == pytest.approx(per_seed)
    assert row["value"] == pytest.approx(statistics.mean(per_seed))
    items = [dict(zip(run["acc"]["items"]["ids"], run["acc"]["items"]["scores"])) for run in refs["gpt2"]]
    assert any(len({m[i] for m in items}) > 1 for i in items[0]), "the few-shot seed changed no answer"
    averaged = [statistics.mean(m[i] for m in items) for i in row["items"]["ids"]]
    assert row["items"]["scores"] == pytest.approx(averaged)
    assert row["stderr"] == pytest.approx(statistics.stdev(averaged) / math.sqrt(len(averaged)))
    assert row["n"] == len(CAPITALS)
    # seed 0 is lm-eval's default: the first run equals a plain run without --seeds
    plain = tmp_path / "plain.json"
    r = run_aura(
        "eval",
        "--model",
        tiny_zoo["gpt2"],
        "--tasks",
        "capitales_fewshot",
        "--include-path",
        fewshot_task,
        "--batch-size",
        "4",
        "--output",
        plain,
        env=OFFLINE,
    )
    assert r.returncode == 0, r.stderr
    plain_acc = next(x for x in json.loads(plain.read_text())["results"][0]["rows"] if x["metric"] == "acc")
    assert plain_acc["value"] == pytest.approx(per_seed[0])
    # the group: each model's two seeds first, then the two models, every value the reference's
    grow = next(x for x in grouped["rows"] if x["metric"] == "acc")
    model_means = [statistics.mean(run["acc"]["value"] for run in refs[name]) for name in ("llama", "gpt2")]
    assert grow["seeds"]["values"] == pytest.approx(model_means)
    assert grow["value"] == pytest.approx(statistics.mean(model_means))
    # --compare: the group against the single model, with the training seeds' spread in the error
    (comparison,) = results["comparisons"]
    (c,) = [x for x in comparison["rows"] if x["metric"] == "acc"]
    assert c["seed_stderr"] == pytest.approx(
        math.sqrt(
            (statistics.stdev(model_means) / math.sqrt(2)) ** 2 + (statistics.stdev(per_seed) / math.sqrt(2)) ** 2
        )
    )


def test_seed_spread_turns_an_item_level_difference_into_noise():
    from aura.evaluation.seeds import merge_rows
    from aura.evaluation.significance import compare_rows

    ids = [str(i) for i in range(40)]

    def run(value_ones: int) -> dict:
        scores = [1.0] * value_ones + [0.0] * (40 - value_ones)
        return {"task": "t", "metric": "acc", "value": value_ones / 40, "stderr": 0.07, "n": 40,
                "items": {"ids": ids, "scores": scores}}  # fmt: skip

    a = run(10)
    b_one = run(22)  # one seed of b: 12 more items right, every one of them an a-miss
    alone = compare_rows(a, b_one)
    assert alone["verdict"] == "significant" and "seed_stderr" not in alone
    # b's seeds disagree as much as b and a do: the same difference is now within its noise
    b = merge_rows([run(22), run(8), run(30), run(6)], ["s0", "s1", "s2", "s3"])
    spread = statistics.stdev([22 / 40, 8 / 40, 30 / 40, 6 / 40]) / 2
    assert b["seeds"]["seed_stderr"] == pytest.approx(spread)
    merged = compare_rows(a, b)
    assert merged["seed_stderr"] == pytest.approx(spread)
    assert merged["verdict"] in ("noise", "weak")
    assert abs(merged["diff"]) < abs(alone["diff"])


def test_seeds_without_lm_eval_tasks_are_refused(tiny_zoo):
    r = run_aura_here("eval", "--model", tiny_zoo["gpt2"], "--suite", "aura-es", "--seeds", "3")
    assert r.returncode == 2 and "--seeds" in r.stderr and "--tasks" in r.stderr
    group = f"{tiny_zoo['llama']},{tiny_zoo['gpt2']}"
    r = run_aura_here("eval", "--model", group, "--data", tiny_zoo["tokenizer"])
    assert r.returncode == 2 and group in r.stderr and "perplexity" in r.stderr
