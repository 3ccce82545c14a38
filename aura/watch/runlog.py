"""``training_log.csv`` read back: whole (``aura runs``, ``aura plot``) or followed as it grows (``aura studio``).

Rows come back as dicts with numbers as floats and empty cells as None; a damaged file (not UTF-8, not CSV, a
number that is not one, a non-finite counter) is an ``AuraError`` naming the file, the line and the column.
``LogSummary`` keeps what the run list shows (best validation loss, last step, tokens, speed, seconds per
step), row by row.
"""

from __future__ import annotations

import csv
import io
import math
import os
from pathlib import Path

from aura.core.errors import AuraError
from aura.core.i18n import Messages

M = Messages(
    "runlog",
    {
        "no_log": (
            "{run} no tiene training_log.csv: la ejecución aún no ha registrado ningún paso, o no "
            "es un directorio de ejecución de Aura.",
            "{run} has no training_log.csv: the run has not logged a step yet, or it is not an Aura run directory.",
        ),
        "bad_log_text": (
            "{path}: no es texto UTF-8 (byte {offset}, línea {line}). Aura escribe training_log.csv en "
            "UTF-8: el archivo se dañó o se editó; restáuralo o borra las líneas dañadas.",
            "{path}: not UTF-8 text (byte {offset}, line {line}). Aura writes training_log.csv in UTF-8: "
            "the file was damaged or edited; restore it or delete the damaged lines.",
        ),
        "bad_log_csv": (
            "{path}, línea {line}: no es CSV válido ({err}). Restaura el archivo o borra las líneas dañadas.",
            "{path}, line {line}: not valid CSV ({err}). Restore the file or delete the damaged lines.",
        ),
        "not_finite": (
            "{path}, línea {line}: la columna '{column}' debería ser un número finito y es {value!r}. "
            "Corrige o borra esa línea.",
            "{path}, line {line}: column '{column}' should be a finite number and is {value!r}. Fix or "
            "delete that line.",
        ),
        "bad_cell": (
            "{path}, línea {line}: la columna '{column}' debería ser un número y es {value!r}.",
            "{path}, line {line}: column '{column}' should be a number and is {value!r}.",
        ),
    },
)


NUMERIC_COLUMNS = (
    "epoch",
    "step",
    "tokens",
    "train_loss",
    "val_loss",
    "lr",
    "grad_norm",
    "tokens_per_s",
    "mfu",
    "seconds",
)


REWARD_COLUMNS = ("rewards/margin", "rewards/accuracy")  # preference tuning (aura.train.objectives.preference)
KTO_COLUMNS = ("rewards/chosen", "rewards/rejected", "kl")  # KTO (aura.train.objectives.kto): per kind, the KL
RL_REWARD_COLUMNS = ("reward", "val_reward")  # GRPO: mean reward per step, of greedy validation completions
DISTILL_COLUMNS = ("on_policy",)  # distillation (aura.train.objectives.distill): share of the student's own answers


SUITE_PREFIX = "aura-es/"  # task accuracy during training (--eval-suite aura-es, aura.evaluation)
SOURCE_VAL_PREFIX = "val_loss_"  # validation loss per source of a mixture (aura.train.continued)

# The one catalogue of the log's column names as a person reads them: the Studio's panels and legends (served
# with the page's session, both languages) and `aura plot`'s legends.
COLUMN_LABELS = Messages(
    "columns",
    {
        "step": ("Paso", "Step"),
        "tokens": ("Tokens vistos", "Tokens seen"),
        "epoch": ("Época", "Epoch"),
        "train_loss": ("Pérdida de entrenamiento", "Training loss"),
        "val_loss": ("Pérdida de validación", "Validation loss"),
        "lr": ("Tasa de aprendizaje", "Learning rate"),
        "grad_norm": ("Norma del gradiente", "Gradient norm"),
        "tokens_per_s": ("Velocidad (tokens/s)", "Speed (tokens/s)"),
        "mfu": ("Uso del cómputo (MFU)", "Compute use (MFU)"),
        "seconds": ("Segundos", "Seconds"),
        "rewards/margin": ("Margen de recompensa", "Reward margin"),
        "rewards/accuracy": ("Acierto de preferencia", "Preference accuracy"),
        "rewards/chosen": ("Recompensa de las respuestas buenas", "Reward of good answers"),
        "rewards/rejected": ("Recompensa de las respuestas malas", "Reward of bad answers"),
        "kl": ("Estimación del KL", "KL estimate"),
        "reward": ("Recompensa media", "Mean reward"),
        "val_reward": ("Recompensa en validación", "Validation reward"),
        "on_policy": ("Respuestas propias del alumno (fracción)", "Student's own answers (share)"),
        "_source": ("Validación: {source}", "Validation: {source}"),
        "_suite": ("Acierto en aura-es: {task}", "aura-es accuracy: {task}"),
        "_epoch_avg": ("{label} (media de la época)", "{label} (epoch average)"),
    },
)


def column_label(column: str, *, lang: str | None = None, epoch_avg: bool = False) -> str:
    """A log column as a person reads it, in ``lang`` (the current language when None): ``train_loss`` ->
    ``Pérdida de entrenamiento``; a column the catalogue does not know keeps its name."""
    from aura.core.i18n import current_lang

    pick = 0 if (lang or current_lang()) == "es" else 1
    table = COLUMN_LABELS.table
    if column in table and not column.startswith("_"):
        text = table[column][pick]
    elif column.startswith(SOURCE_VAL_PREFIX):
        text = table["_source"][pick].format(source=column.removeprefix(SOURCE_VAL_PREFIX))
    elif column.startswith(SUITE_PREFIX):
        text = table["_suite"][pick].format(task=column.removeprefix(SUITE_PREFIX))
    else:
        text = column
    return table["_epoch_avg"][pick].format(label=text) if epoch_avg else text


def column_labels() -> dict[str, dict[str, str]]:
    """The catalogue for the page: {lang: {column or template key: text}} (templates keep their {fields})."""
    return {lang: {k: pair[i] for k, pair in COLUMN_LABELS.table.items()} for i, lang in enumerate(("es", "en"))}


def read_log(run_dir: Path) -> list[dict]:
    """Rows of ``training_log.csv`` with numbers as floats and empty cells as None."""
    path = run_dir / "training_log.csv"
    if not path.is_file():
        raise AuraError(M("no_log", run=run_dir))
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise AuraError(M("bad_log_text", path=path, offset=e.start, line=data.count(b"\n", 0, e.start) + 1)) from None
    return _parse_rows(text, path)[0]


def _parse_rows(
    text: str, path: Path, fieldnames: list[str] | None = None, first_line: int = 0
) -> tuple[list[dict], list[str]]:
    """The rows of CSV ``text`` (a whole log, or its continuation after ``fieldnames``' header)."""
    rows: list[dict] = []
    reader = csv.reader(io.StringIO(text, newline=""))  # by index: a DictReader per row costs twice the time
    try:
        names = list(fieldnames) if fieldnames is not None else next((r for r in reader if r), [])
        idx = {c: i for i, c in enumerate(names)}  # a repeated name: the last one, as csv.DictReader
        cols = [
            (c, idx.get(c), c in FINITE_COLUMNS)
            for c in NUMERIC_COLUMNS
            + tuple(
                c
                for c in idx
                if c in REWARD_COLUMNS + KTO_COLUMNS + RL_REWARD_COLUMNS + DISTILL_COLUMNS
                or c.startswith((SUITE_PREFIX, SOURCE_VAL_PREFIX))
            )
        ]
        kind_i, time_i = idx.get("kind"), idx.get("time")
        for raw in reader:
            if not raw:
                continue
            n = len(raw)
            row: dict = {
                "kind": (raw[kind_i] if kind_i is not None and kind_i < n else "").strip() or "step",
                "time": raw[time_i] if time_i is not None and time_i < n else None,
            }
            for col, i, finite in cols:
                cell = raw[i].strip() if i is not None and i < n else ""
                try:
                    row[col] = v = float(cell) if cell else None
                except ValueError:
                    raise AuraError(
                        M("bad_cell", path=path, line=first_line + reader.line_num, column=col, value=cell)
                    ) from None
                # a diverged run logs inf/nan losses; counters and rates are always finite
                if finite and v is not None and not math.isfinite(v):
                    raise AuraError(
                        M("not_finite", path=path, line=first_line + reader.line_num, column=col, value=cell)
                    )
            rows.append(row)
    except csv.Error as e:
        raise AuraError(M("bad_log_csv", path=path, line=first_line + reader.line_num, err=e)) from None
    return rows, names


def read_log_since(
    run_dir: Path, offset: int = 0, fieldnames: list[str] | None = None, lines: int = 0
) -> tuple[list[dict], int, list[str], int]:
    """The complete rows appended to ``training_log.csv`` after byte ``offset`` (0: the whole log), for
    readers that follow a live log (``aura studio``): (rows, next offset, header, lines read so far). A
    line still being written (no newline yet) is left for the next call; a log that shrank (a run
    started over) is read again from the start."""
    path = run_dir / "training_log.csv"
    if not path.is_file():
        raise AuraError(M("no_log", run=run_dir))
    with open(path, "rb") as f:
        if f.seek(0, os.SEEK_END) < offset:
            offset, fieldnames, lines = 0, None, 0
        f.seek(offset)
        data = f.read()
    data = data[: data.rfind(b"\n") + 1]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise AuraError(
            M("bad_log_text", path=path, offset=offset + e.start, line=lines + data.count(b"\n", 0, e.start) + 1)
        ) from None
    rows, header = _parse_rows(text, path, fieldnames or None, lines)
    return rows, offset + len(data), header, lines + data.count(b"\n")


FINITE_COLUMNS = ("epoch", "step", "tokens", "lr", "tokens_per_s", "mfu", "seconds")


class LogSummary:
    """What ``aura runs`` shows from a run's log, built row by row: ``describe_run`` adds the whole log, a
    poller (``aura studio``) keeps one per run and adds only the rows appended since its last read."""

    def __init__(self):
        self.best_val = self.last_step = self.tokens = self.tokens_per_s = self.step_seconds = None
        self._mark: tuple[float, float] | None = None  # (step, seconds) of the last step row

    def add(self, rows: list[dict]) -> "LogSummary":
        for r in rows:
            v, s, t, sec = r.get("val_loss"), r.get("step"), r.get("tokens"), r.get("seconds")
            if v is not None and math.isfinite(v) and (self.best_val is None or v < self.best_val):
                self.best_val = v
            if s is not None and (self.last_step is None or s > self.last_step):
                self.last_step = s
            if t is not None and (self.tokens is None or t > self.tokens):
                self.tokens = t
            if r.get("kind") != "step" or s is None:
                continue
            if r.get("tokens_per_s") is not None:
                self.tokens_per_s = r["tokens_per_s"]
            if sec is not None:  # seconds per step between the last two step rows (a resume restarts the clock)
                if self._mark is not None and s > self._mark[0] and sec > self._mark[1]:
                    self.step_seconds = (sec - self._mark[1]) / (s - self._mark[0])
                self._mark = (s, sec)
        return self
