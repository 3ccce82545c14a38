"""The aura-es suite: Aura's own offline Spanish benchmark (aura/resources/eval/aura-es/).

Four multiple-choice tasks scored by log-likelihood, in lm-evaluation-harness's task format: one JSONL
file per task (``{"id", "query", "choices", "gold"}``) and one YAML task file beside it, so the same
files run through ``lm_eval --include_path`` and through Aura's batched scorer (``aura.evaluation.scorer``).
A request is lm-eval's: context ``query``, continuation ``target_delimiter + choice``.
How the items were written and checked: the README.md in the suite directory.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aura.core.errors import AuraError
from aura.core.files import loads_json
from aura.core.i18n import Messages

M = Messages(
    "evalsuite",
    {
        "bad_item": ("{path}, línea {line}: {problem}.", "{path}, line {line}: {problem}."),
        "missing": (
            "Falta el archivo {path} de la batería aura-es; reinstala Aura.",
            "The aura-es suite file {path} is missing; reinstall Aura.",
        ),
    },
)

SUITE_NAME = "aura-es"
SUITE_DIR = Path(__file__).resolve().parents[1] / "resources" / "eval" / SUITE_NAME


@dataclass(frozen=True)
class TaskSpec:
    name: str
    n_choices: int
    target_delimiter: str  # put between the context and each choice, as lm-eval does
    version: str = "1.0"


TASKS: dict[str, TaskSpec] = {
    t.name: t
    for t in (
        TaskSpec("aura_es_lectura", 4, " "),  # reading comprehension: passage, question, answer
        TaskSpec("aura_es_causa_efecto", 2, " "),  # COPA-style cause or effect
        TaskSpec("aura_es_gramatica", 2, ""),  # minimal pairs: the whole sentence is the continuation
        TaskSpec("aura_es_conocimiento", 4, " "),  # world knowledge of the Spanish-speaking world
    )
}


@dataclass(frozen=True)
class Doc:
    id: str
    query: str
    choices: tuple[str, ...]
    gold: int


@dataclass(frozen=True)
class Task:
    spec: TaskSpec
    docs: tuple[Doc, ...]

    @property
    def name(self) -> str:
        return self.spec.name

    def requests(self, doc: Doc) -> list[tuple[str, str]]:
        """lm-eval's (context, continuation) pairs for one document."""
        return [(doc.query, self.spec.target_delimiter + c) for c in doc.choices]


def item_problem(item: dict, n_choices: int) -> str | None:
    """What is wrong with one item of a task file, or None."""
    for key, kind in (("id", str), ("query", str), ("choices", list), ("gold", int)):
        if not isinstance(item.get(key), kind):
            return f"'{key}' is missing or not a {kind.__name__}"
    choices = item["choices"]
    if len(choices) != n_choices or not all(isinstance(c, str) and c.strip() for c in choices):
        return f"'choices' must be {n_choices} non-empty strings"
    if len(set(choices)) != len(choices):
        return "'choices' has repeated answers"
    if not 0 <= item["gold"] < n_choices:
        return f"'gold' must be between 0 and {n_choices - 1}"
    return None


def load_task(name: str, *, directory: Path = SUITE_DIR) -> Task:
    spec = TASKS[name]
    path = directory / f"{name}.jsonl"
    if not path.exists():
        raise AuraError(M("missing", path=path))
    docs, seen = [], set()
    for line_no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        item = loads_json(line)
        problem = item_problem(item, spec.n_choices) or ("repeated 'id'" if item["id"] in seen else None)
        if problem:
            raise AuraError(M("bad_item", path=path, line=line_no, problem=problem))
        seen.add(item["id"])
        docs.append(Doc(item["id"], item["query"], tuple(item["choices"]), item["gold"]))
    return Task(spec, tuple(docs))


def load_suite(limit: int = 0) -> list[Task]:
    """Every task of the suite; ``limit`` keeps the first N documents of each (lm-eval's --limit)."""
    tasks = [load_task(name) for name in TASKS]
    if limit:
        tasks = [Task(t.spec, t.docs[:limit]) for t in tasks]
    return tasks
