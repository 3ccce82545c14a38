"""The aura-es suite as a periodic evaluator of the training loop (``--eval-suite aura-es
--eval-suite-interval N``): accuracy per task every N optimizer steps, logged like any evaluator
(console, ``training_log.csv`` columns ``aura-es/<task>``, TensorBoard).

Under DDP (or a single process) each rank scores its own slice of every task's documents on its local
replica and the correct counts are summed over the ranks; with FSDP or DeepSpeed the parameters are
sharded, so every rank runs the same forward passes over the whole suite. The evaluator reads no random
numbers and changes nothing in the model, so the training losses and an exact resume are unaffected.
"""

from __future__ import annotations

from pathlib import Path

import torch

from aura.evaluation.scorer import choice_scores, correct_counts
from aura.evaluation.suite import SUITE_NAME, load_suite


def column(task_name: str) -> str:
    return f"{SUITE_NAME}/{task_name.removeprefix('aura_es_')}"


class SuiteEvaluator:
    """``aura.train.objectives.objective.Evaluator`` over the aura-es suite."""

    def __init__(self, tok, *, interval: int, limit: int = 0, batch_size: int = 16):
        self.tok = tok
        self.interval = interval
        self.batch_size = batch_size
        self.tasks = load_suite(limit)
        self.names = (*(column(t.name) for t in self.tasks), f"{SUITE_NAME}/mean")

    def __call__(self, model, *, dist) -> dict[str, float]:
        from aura.distributed import strategy_of, unwrap

        strategy = strategy_of(model)
        shard = dist.is_distributed and strategy in ("ddp", "none")
        inner = unwrap(model) if strategy in ("ddp", "none") else (model.module if strategy == "deepspeed" else model)
        rank, world = (dist.rank, dist.world_size) if shard else (0, 1)
        counts = []
        for task in self.tasks:
            docs = task.docs[rank::world]
            hits = (
                correct_counts(task, choice_scores(inner, self.tok, task, batch_size=self.batch_size, docs=docs), docs)[
                    0
                ]
                if docs
                else 0
            )
            counts.append(hits)
        total = torch.tensor(counts, dtype=torch.float64)
        if shard:
            total = total.to(dist.comm_device)
            dist.all_reduce(total, "sum")
        accs = [float(c) / len(t.docs) for c, t in zip(total.cpu().tolist(), self.tasks)]
        values = {column(t.name): a for t, a in zip(self.tasks, accs)}
        values[f"{SUITE_NAME}/mean"] = sum(accs) / len(accs)
        return values


def build_suite_evaluator(cfg, job) -> SuiteEvaluator | None:
    """The evaluator ``--eval-suite`` asks for, with the run's tokenizer (read back from the files the run
    writes beside its weights), or None."""
    if not getattr(cfg, "eval_suite", ""):
        return None
    import tempfile

    from transformers import AutoTokenizer

    with tempfile.TemporaryDirectory(prefix="aura-eval-suite-") as tmp:
        job.write_extras(Path(tmp))
        tok = AutoTokenizer.from_pretrained(tmp)
    return SuiteEvaluator(tok, interval=cfg.eval_suite_interval, limit=cfg.eval_suite_limit)
