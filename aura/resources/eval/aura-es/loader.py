"""Dataset loader of the aura-es tasks for lm-evaluation-harness (``custom_dataset: !function
loader.load``): reads the task's JSONL file next to this one, so the suite needs no network."""

import json
from pathlib import Path


def load(task: str, **_metadata):
    from datasets import Dataset, DatasetDict

    path = Path(__file__).resolve().parent / f"{task}.jsonl"
    with open(path, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return DatasetDict({"test": Dataset.from_list(rows)})
