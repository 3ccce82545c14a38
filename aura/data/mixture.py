"""Weighted mixtures of prepared directories: ``--data es=0.8:DIR1 en=0.2:DIR2``.

Each source is ``NAME=WEIGHT:PATH``: a prepared directory (``aura data prepare``), all with the same
tokenizer. ``MixtureBatches`` hands out micro-batches drawn from the sources in proportion to their weights
by smooth weighted round-robin: draw ``k`` takes the source whose quota ``w_i (k + 1) - drawn_i`` is
largest, so after any number of draws every source is within one micro-batch of its share, the same on
every rank and in every run. Each source is a ``PretrainBatches`` (its own shuffled windows, rank split
and epochs); a source that runs out starts its next epoch. A mixture epoch ends when the source that runs
out first (smallest ``batches / weight``) has been seen once. The state (draws and tokens per source, each
source's position) resumes exactly, mid-epoch included.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from aura.core.errors import AuraError
from aura.core.i18n import Messages

M = Messages(
    "mixture",
    {
        "syntax": (
            "--data {item!r}: en una mezcla cada fuente se escribe NOMBRE=PESO:DIRECTORIO (p. ej. "
            "es=0.8:datos/es en=0.2:datos/en); no mezcles esa forma con rutas sueltas.",
            "--data {item!r}: in a mixture every source is written NAME=WEIGHT:DIRECTORY (e.g. "
            "es=0.8:data/es en=0.2:data/en); do not mix that form with plain paths.",
        ),
        "weight": (
            "--data {item!r}: el peso {weight!r} no es un número finito mayor o igual que 0.",
            "--data {item!r}: the weight {weight!r} is not a finite number greater than or equal to 0.",
        ),
        "sum": (
            "--data: los pesos suman {total}; deben sumar un número positivo (p. ej. es=0.8 en=0.2).",
            "--data: the weights add up to {total}; they must add up to a positive number (e.g. es=0.8 en=0.2).",
        ),
        "dup": (
            "--data: el nombre de fuente '{name}' aparece dos veces; usa nombres distintos.",
            "--data: the source name '{name}' appears twice; use different names.",
        ),
        "not_prepared": (
            "--data {name}={path}: no es un directorio preparado (falta meta.json). En una mezcla cada "
            "fuente se prepara antes en un directorio nuevo, p. ej. 'aura data prepare {texts} --tokenizer "
            "TOK --output-dir {target}', y se da como {name}={weight}:{target}.",
            "--data {name}={path}: not a prepared directory (no meta.json). In a mixture every source is "
            "prepared first into a new directory, e.g. 'aura data prepare {texts} --tokenizer TOK "
            "--output-dir {target}', and given as {name}={weight}:{target}.",
        ),
        "other_tok": (
            "--data: la fuente '{name}' ({path}) se tokenizó con {tok} (hash {hash}) y '{first}' ({first_path}) "
            "con {first_tok} (hash {first_hash}). Todas las fuentes deben usar el mismo tokenizador: "
            "prepara '{name}' con --tokenizer {first_tok}.",
            "--data: source '{name}' ({path}) was tokenised with {tok} (hash {hash}) and '{first}' "
            "({first_path}) with {first_tok} (hash {first_hash}). Every source must use the same "
            "tokenizer: prepare '{name}' with --tokenizer {first_tok}.",
        ),
        "normalised": (
            "--data: los pesos suman {total}, no 1: se normalizan, y cada fuente pesa su parte del total.",
            "--data: the weights add up to {total}, not 1: they are normalised, each source weighs its share "
            "of the total.",
        ),
        "proportions": (
            "Mezcla efectiva de este plan ({tokens:token|tokens} en {steps:paso|pasos}):",
            "Effective mixture of this plan ({tokens:token|tokens} over {steps:step|steps}):",
        ),
        "source": (
            "  {name}: peso {weight} → {pct:.1f} %: ~{planned:token|tokens} y ~{pdocs:documento|documentos} de "
            "{tokens:token|tokens} y {docs:documento|documentos} de entrenamiento (pasadas: {passes:.2f})",
            "  {name}: weight {weight} → {pct:.1f} %: ~{planned:token|tokens} and ~{pdocs:document|documents} "
            "of {tokens:token|tokens} and {docs:document|documents} for training (passes: {passes:.2f})",
        ),
        "incompatible": (
            "El estado de datos guardado es de otra mezcla (guardada: {saved}; ahora: {now}). Reanuda con "
            "las mismas fuentes y pesos en --data.",
            "The saved data state is of another mixture (saved: {saved}; now: {now}). Resume with the "
            "same sources and weights in --data.",
        ),
    },
)

_SPEC = re.compile(r"^([A-Za-z0-9_.-]+)=([^:=]+):(.+)$")


@dataclass(frozen=True)
class SourceSpec:
    name: str
    weight: float  # normalised: the weights of a mixture sum to 1
    path: Path
    given: float | None = None  # the weight as written in --data


def prepared_target(path: Path, name: str) -> Path:
    """Where to prepare the raw texts of a mixture source: a new directory beside them, never inside them
    (``aura data prepare`` refuses an output that holds its inputs, and the texts stay the user's)."""
    base = path if path.suffix == "" else path.with_suffix("")
    target = base.with_name(f"{base.name}-{name}-tokens")
    n = 2
    while target.exists():
        target, n = base.with_name(f"{base.name}-{name}-tokens-{n}"), n + 1
    return target


def is_mixture(entries: list[str]) -> bool:
    """Whether ``--data`` uses the ``NAME=WEIGHT:PATH`` form (a lone existing path is never a mixture)."""
    return any(_SPEC.match(str(e)) and not Path(str(e)).exists() for e in entries)


def parse_sources(entries: list[str]) -> list[SourceSpec]:
    """The sources of ``--data NAME=WEIGHT:PATH ...``, weights normalised; every mistake named."""
    from aura.data.tokens import is_prepared_dir

    raw: list[tuple[str, float, Path]] = []
    for item in entries:
        m = _SPEC.match(str(item))
        if m is None:
            raise AuraError(M("syntax", item=item))
        name, weight_text, path = m.groups()
        try:
            weight = float(weight_text)
        except ValueError:
            weight = float("nan")
        if not math.isfinite(weight) or weight < 0:
            raise AuraError(M("weight", item=item, weight=weight_text))
        if any(name == r[0] for r in raw):
            raise AuraError(M("dup", name=name))
        raw.append((name, weight, Path(path)))
    total = sum(w for _, w, _ in raw)
    if not total > 0:
        raise AuraError(M("sum", total=total))
    for name, weight, path in raw:
        if not is_prepared_dir(path):
            texts = f"{path}/*.txt" if path.is_dir() else str(path) if path.exists() else "TEXTS"
            raise AuraError(
                M(
                    "not_prepared",
                    name=name,
                    path=path,
                    texts=texts,
                    weight=f"{weight:g}",
                    target=prepared_target(path, name),
                )
            )
    return [SourceSpec(name, w / total, p, w) for name, w, p in raw]


def check_same_tokenizer(sources: list[SourceSpec]) -> None:
    from aura.data.tokens import load_meta

    first = load_meta(sources[0].path)["tokenizer"]
    for s in sources[1:]:
        tok = load_meta(s.path)["tokenizer"]
        if tok["hash"] != first["hash"]:
            raise AuraError(
                M(
                    "other_tok",
                    name=s.name,
                    path=s.path,
                    tok=tok.get("name_or_path"),
                    hash=tok["hash"][:12],
                    first=sources[0].name,
                    first_path=sources[0].path,
                    first_tok=first.get("name_or_path"),
                    first_hash=first["hash"][:12],
                )
            )


def input_paths(entries: list[str]) -> list[str]:
    """The paths ``--data`` names (for the --output-dir checks), mixture or not."""
    if not is_mixture(entries):
        return list(entries)
    return [m.group(3) if (m := _SPEC.match(str(e))) else str(e) for e in entries]


class MixtureBatches:
    """One rank's micro-batches of a weighted mixture (see the module docstring); a ``BatchSource``."""

    def __init__(self, sources: list[tuple[SourceSpec, object]], *, world_size: int = 1):
        self.specs = [s for s, _ in sources]
        self.sources = [b for _, b in sources]  # PretrainBatches, one per spec
        self.weights = [s.weight for s in self.specs]
        self.names = [s.name for s in self.specs]
        self.world_size = world_size
        self.batches_per_epoch = max(
            1, int(min(b.batches_per_epoch / w for b, w in zip(self.sources, self.weights) if w > 0))
        )
        self.epoch = 0
        self.position = 0
        self.drawn = [0] * len(self.sources)  # micro-batches handed out per source since the start
        self.tokens = [0] * len(self.sources)  # input tokens per source, all ranks

    def pick(self) -> int:
        """The source of the next draw (smooth weighted round-robin; ties go to the first listed)."""
        k = sum(self.drawn)
        quota = [w * (k + 1) - n if w > 0 else -math.inf for w, n in zip(self.weights, self.drawn)]
        return max(range(len(quota)), key=lambda i: (quota[i], -i))

    def next_batch(self) -> dict[str, torch.Tensor] | None:
        if self.position >= self.batches_per_epoch:
            return None
        i = self.pick()
        source = self.sources[i]
        batch = source.next_batch()
        if batch is None:  # this source ran out before the mixture's epoch ended: its next epoch
            source.start_epoch(source.epoch + 1)
            batch = source.next_batch()
        self.drawn[i] += 1
        self.tokens[i] += batch["input_ids"].numel() * self.world_size
        self.position += 1
        return batch

    def start_epoch(self, epoch: int) -> None:
        self.epoch, self.position = epoch, 0

    def tokens_seen(self) -> dict[str, int]:
        return dict(zip(self.names, self.tokens))

    def _identity(self) -> list:
        return [[n, round(w, 12)] for n, w in zip(self.names, self.weights)]

    def state_dict(self) -> dict:
        return {
            "mixture": self._identity(),
            "epoch": self.epoch,
            "position": self.position,
            "drawn": list(self.drawn),
            "tokens": list(self.tokens),
            "sources": [s.state_dict() for s in self.sources],
        }

    def load_state_dict(self, state: dict) -> None:
        if state.get("mixture") != self._identity():

            def show(x):
                return ", ".join(f"{n}={w:g}" for n, w in x or [])

            raise AuraError(M("incompatible", saved=show(state.get("mixture")) or "-", now=show(self._identity())))
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self.drawn = [int(x) for x in state["drawn"]]
        self.tokens = [int(x) for x in state["tokens"]]
        for source, sub in zip(self.sources, state["sources"]):
            source.load_state_dict(sub)


class ChainedEval:
    """The validation batches of several sources, one after the other (the mixture's overall val loss)."""

    def __init__(self, parts: list):
        self.parts = parts

    def __len__(self) -> int:
        return sum(len(p) for p in self.parts)

    def __iter__(self):
        for p in self.parts:
            yield from p
