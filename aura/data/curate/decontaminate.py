"""``aura data curate --decontaminate aura-es``: documents that share an n-gram with an eval set's items are
dropped, as datatrove's ``NGramsDecontFilter`` drops them (its method, with Aura's Spanish normalisation and
index: ``aura.data.contamination``). Each drop is counted by task in the stage's stats (``contaminated_TASK``)
and the item and n-gram go in the document's metadata (kept with ``--sample``)."""

from __future__ import annotations

from datatrove.data import Document
from datatrove.pipeline.filters.base_filter import BaseFilter

from aura.data.contamination import EvalIndex, eval_items


class EvalDecontFilter(BaseFilter):
    name = "🦠 eval n-grams"

    def __init__(self, eval_sets: tuple[str, ...], exclusion_writer=None):
        super().__init__(exclusion_writer)
        self.eval_sets = tuple(eval_sets)
        self._index: EvalIndex | None = None  # built in the worker: only the names travel in the pickle

    def filter(self, doc: Document) -> bool | tuple[bool, str]:
        if self._index is None:
            self._index = EvalIndex([item for name in self.eval_sets for item in eval_items(name)])
        hit = self._index.first_hit(doc.text)
        if hit is None:
            return True
        item, gram = hit
        doc.metadata.update(contaminated_task=item.task, contaminated_item=item.id, contaminated_ngram=gram)
        self.stat_update(f"contaminated_{item.task}")
        return False, "contaminated"
