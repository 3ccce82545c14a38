"""Dataset loader of the aura-es tasks for lm-evaluation-harness (``custom_dataset: !function
loader.load``): reads the task's JSONL file next to this one, so the suite needs no network. The math
task reads the test split of Aura's Spanish math set and scores answers by the ``exact-answer`` rule."""

import json
from pathlib import Path


def load(task: str, **_metadata):
    from datasets import Dataset, DatasetDict

    path = Path(__file__).resolve().parent / f"{task}.jsonl"
    with open(path, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return DatasetDict({"test": Dataset.from_list(rows)})


def load_math(**_metadata):
    from datasets import Dataset, DatasetDict

    path = Path(__file__).resolve().parents[2] / "math_es" / "test.jsonl"
    with open(path, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return DatasetDict({"test": Dataset.from_list(rows)})


def process_math(doc, results):
    """1 when the completion's final number equals the reference by value (``12,5`` = ``12.5``)."""
    from aura.data.rewards import answers_match, final_answer

    return {"exact_match": float(answers_match(final_answer(results[0]), doc["answer"]))}
