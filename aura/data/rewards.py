"""Rewards for GRPO (``aura finetune --objective grpo --reward SPEC``): built-ins and users' Python functions.

A reward scores the G completions of one prompt; the objective adds the rewards with their weights
(``--reward exact-answer:1.0 --reward format:0.2``). A SPEC is ``NAME[:WEIGHT]`` or ``FILE.py:FUNCTION[:WEIGHT]``:

* ``exact-answer``: 1.0 when the completion's final answer equals the prompt's ``answer`` field, else 0.0.
  The final answer is what follows the last ``Respuesta:``/``Answer:`` (or ``####``, ``\\boxed{}``,
  ``<answer>``), else the last number of the text. Numbers compare by value, written either way
  (``12,5`` = ``12.5``; ``1.234,5`` = ``1,234.5`` = ``1234,5``; currency signs and units after the number
  are ignored); text compares case- and accent-insensitively, without surrounding punctuation.
* ``format``: 1.0 when the whole completion matches ``--format-pattern`` (a regular expression, or
  ``tags:a,b`` for ``<a>...</a>`` then ``<b>...</b>``; default: text ending in a ``Respuesta: N`` line).
* ``length``: minus the completion's share of ``--max-completion-length`` (from 0 to -1): shorter is better.
* ``spanish``: the share of the completion's words that are among Spanish's most common words (from 0 to 1):
  a dense reward that even a tiny model earns in part, so a group's completions rarely score alike (the CPU
  demo's GRPO stage uses it; exact answers to math problems are out of a tiny model's reach).
* ``model:PATH``: a reward model's score (``aura.data.reward_model``: what ``aura finetune --objective reward``
  wrote, full or adapter), loaded once, re-tokenising prompt and completion with its own tokenizer.
* ``FILE.py:FUNCTION``: the user's function, called as TRL calls one (``prompts``, ``completions``,
  ``completion_ids`` and every other field of the dataset, as lists, one entry per completion); it must
  return one number per completion. It is the user's code and runs with the user's rights.

A reward that raises, or returns something that is not a finite number for every completion, stops the
run with an error naming the reward, the prompt's file and line, and the prompt.
"""

from __future__ import annotations

import importlib.util
import math
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from aura.core.errors import AuraError
from aura.core.i18n import Messages

M = Messages(
    "rewards",
    {
        "bad_spec": (
            "--reward {spec}: se esperaba NOMBRE[:PESO] (exact-answer, format, length, spanish), "
            "ARCHIVO.py:FUNCIÓN[:PESO] o 'model:CARPETA[:PESO]' (un modelo de recompensa), "
            "p. ej. --reward exact-answer:1.0 --reward format:0.2.",
            "--reward {spec}: expected NAME[:WEIGHT] (exact-answer, format, length, spanish), "
            "FILE.py:FUNCTION[:WEIGHT] or 'model:FOLDER[:WEIGHT]' (a reward model), "
            "e.g. --reward exact-answer:1.0 --reward format:0.2.",
        ),
        "no_file": (
            "--reward {spec}: no existe el archivo {path}.",
            "--reward {spec}: the file {path} does not exist.",
        ),
        "load_failed": (
            "--reward {spec}: no se pudo cargar {path} ({error}).",
            "--reward {spec}: could not load {path} ({error}).",
        ),
        "no_function": (
            "--reward {spec}: {path} no define una función '{name}'.",
            "--reward {spec}: {path} defines no function '{name}'.",
        ),
        "bad_pattern": (
            "--format-pattern {pattern}: no es una expresión regular válida ({error}).",
            "--format-pattern {pattern}: not a valid regular expression ({error}).",
        ),
        "raised": (
            "La recompensa '{reward}' falló en {where} (prompt: «{prompt}»): {error}",
            "The reward '{reward}' failed on {where} (prompt: «{prompt}»): {error}",
        ),
        "bad_count": (
            "La recompensa '{reward}' devolvió {got:valor|valores} para {n:respuesta|respuestas} de {where} "
            "(prompt: «{prompt}»): debe devolver una lista con un número por respuesta.",
            "The reward '{reward}' returned {got:value|values} for {n:completion|completions} of {where} "
            "(prompt: «{prompt}»): it must return a list with one number per completion.",
        ),
        "not_list": (
            "La recompensa '{reward}' devolvió {kind} para las respuestas de {where} (prompt: «{prompt}»): debe "
            "devolver una lista con un número por respuesta.",
            "The reward '{reward}' returned {kind} for the completions of {where} (prompt: «{prompt}»): it must "
            "return a list with one number per completion.",
        ),
        "bad_value": (
            "La recompensa '{reward}' devolvió {value} para una respuesta de {where} (prompt: «{prompt}»): "
            "debe ser un número finito.",
            "The reward '{reward}' returned {value} for a completion of {where} (prompt: «{prompt}»): it "
            "must be a finite number.",
        ),
    },
)

BUILTINS = ("exact-answer", "format", "length", "spanish", "overlong")
MODEL_PREFIX = "model:"  # --reward model:PATH (a reward model)
# Spanish's most common words (function words first, then frequent verbs, nouns and adverbs): ``spanish``
SPANISH_WORDS = frozenset(
    """
de la que el en y a los se del las un por con no una su para es al lo como más o pero sus le ha me si sin sobre
este ya entre cuando todo esta ser son dos también fue había era muy años hasta desde está mi porque qué sólo solo
han yo hay vez puede todos así nos ni parte tiene él uno donde bien tiempo mismo ese ahora cada e vida otro después
te otros aunque esa eso hace otra gobierno tan durante siempre día tanto ella tres sí dijo sido gran país según
menos mundo año antes estado contra sino forma caso nada hacer general estaba poco estos presidente mayor ante unos
les algo hacia casa ellos ayer hecho primera mucho mientras además quien momento millones esto españa hombre están
pues hoy lugar madrid nacional trabajo otras mejor nuevo decir algunos entonces todas días debe política cómo casi
toda tal luego pasado medio estas sea tenía nunca poder aquí ver veces embargo partido personas grupo cuenta pueden
tienen misma nueva cual fueron mujer frente josé tras cosas fin ciudad he social manera tener sistema será historia
muchos juan tipo cuatro dentro nuestro punto dice ello cualquier noche aún agua parece haber situación fuera bajo
grandes nuestra ejemplo acuerdo habían usted estados hizo nadie países horas posible tarde ley importante guerra
desarrollo proceso realidad sentido lado mí tu cambio allí mano eran estar san número sociedad unas centro padre
gente final relación cuerpo obra incluso través último madre mis modo problema cinco carlos hombres información ojos
muerte nombre algunas público mujeres siglo todavía meses mañana esos nosotros hora muchas pueblo alguna dar
problemas don da tú derecho verdad maría unidos podría sería junto cabeza aquel luis cuanto tierra equipo segundo
director dicho cierto casos manos nivel podía familia largo partir falta llegar propio ministro cosa primero seguridad
hemos mal trata algún tuvo respecto semana varios real sé voz paso señor mil quienes proyecto mercado mayoría luz
claro iba éste pesetas orden español buena quiere aquella programa palabras internacional van esas segunda empresa
puesto ahí propia libro igual político persona últimos ellas total creo tengo dios española condiciones méxico
fuerza solo único acción amor policía puerta pesar zona sabe calle interior tampoco música ningún vista campo buen
hubiera saber obras razón ex niños presencia tema dinero comisión antonio servicio hijo última ciento estoy hablar
dio minutos producción camino seis quién fondo dirección papel demás barcelona idea especial diferentes dado base
capital ambos europa libertad relaciones espacio medios ir actual población empresas estudio salud servicios haya
principio siendo cultura anterior alto media mediante primeros arte paz sector imagen medida deben datos consejo
personal interés julio grupos miembro nueve cuyo ministerio responder respuesta número resultado
""".split()
)

DEFAULT_FORMAT = r"(?s)\s*\S.*?\n\s*Respuesta:\s*-?\d[\d.,]*\s*"
_SPACES = "[ \u00a0\u202f]"  # thousands grouped by (no-break) spaces: "12 345"
_NUMBER = re.compile(rf"-?\d{{1,3}}(?:{_SPACES}\d{{3}})+(?:[.,]\d+)?(?!\d)|-?\d[\d.,]*\d|-?\d")
_MARKERS = (
    re.compile(r"(?:respuesta|answer)\s*(?:final)?\s*[:=]\s*(.+)", re.IGNORECASE),
    re.compile(r"####\s*(.+)"),
    re.compile(r"\\boxed\{([^{}]*)\}"),
    re.compile(r"<(?:answer|respuesta)>(.*?)</(?:answer|respuesta)>", re.IGNORECASE | re.DOTALL),
)


# ---------------------------------------------------------------------------------------------------
# Answers: extraction and normalisation (the math task of `aura eval` uses them too)


def number_values(text: str) -> set[float]:
    """The values a written number may mean ({} when ``text`` is not one number): Spanish or English
    separators, a decimal comma, thousands grouped by points, commas or spaces (``1.234`` may be either)."""
    t = re.sub(_SPACES, " ", text.strip())
    t = re.sub(r"^[€$£]\s*|\s*(?:€|\$|£|euros?|%|[a-zA-Záéíóú/²³]+\.?)$", "", t).strip()
    if re.fullmatch(r"[-−]?\d{1,3}( \d{3})+([.,]\d+)?", t):
        t = t.replace(" ", "")  # the space groups thousands: the remaining sign, if any, is the decimal one
        return {float(t.replace("−", "-").replace(",", "."))}
    if not re.fullmatch(r"[-−]?\d[\d.,]*", t) or not t[-1].isdigit():
        return set()
    sign = -1.0 if t[0] in "-−" else 1.0
    t = t.lstrip("-−")
    out = set()
    for decimal in (",", "."):
        thousands = "." if decimal == "," else ","
        if t.count(decimal) > 1:
            continue
        whole, _, frac = t.partition(decimal)
        groups = whole.split(thousands)
        if len(groups) > 1 and not (1 <= len(groups[0]) <= 3 and all(len(g) == 3 for g in groups[1:])):
            continue
        digits = "".join(groups) + ("." + frac if frac else "")
        if re.fullmatch(r"\d+(\.\d+)?", digits):
            out.add(sign * float(digits))
    return out


def normalise_text(text: str) -> str:
    """Lower case, no accents, no surrounding punctuation or quotes, single spaces."""
    t = unicodedata.normalize("NFKD", text.casefold())
    t = "".join(ch for ch in t if not unicodedata.combining(ch))
    return " ".join(t.strip(" \t\n.,;:!?¡¿\"'«»()[]*").split())


def final_answer(completion: str) -> str:
    """The completion's final answer: after its last answer marker, else its last number, else its last line."""
    for pattern in _MARKERS:
        found = pattern.findall(completion)
        if found:
            answer = found[-1].strip().splitlines()[0] if found[-1].strip() else ""
            numbers = _NUMBER.findall(answer)
            if numbers and number_values(answer) == set():  # "42 euros en total." -> "42"
                return numbers[0].strip()
            return answer
    numbers = _NUMBER.findall(completion)
    if numbers:
        return numbers[-1].strip()
    lines = [ln for ln in completion.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def answers_match(predicted: str, gold) -> bool:
    """Whether a final answer equals the gold answer (numbers by value, text normalised). A gold answer
    in GSM8K's form (a solution ending in ``#### N``) is reduced to N."""
    gold = str(gold)
    if "####" in gold:
        gold = gold.rsplit("####", 1)[1]
    gold_values = number_values(gold)
    if gold_values:
        return any(
            math.isclose(p, g, rel_tol=1e-9, abs_tol=1e-9) for p in number_values(predicted) for g in gold_values
        )
    return bool(normalise_text(gold)) and normalise_text(predicted) == normalise_text(gold)


# ---------------------------------------------------------------------------------------------------
# Reward functions


@dataclass
class Reward:
    """One weighted reward: ``fn(prompts, completions, completion_ids, **fields) -> list of numbers``."""

    name: str
    weight: float
    fn: Callable
    needs_answer: bool = False
    user: bool = False
    model: bool = False  # a reward model (``aura.data.reward_model``): it also reads the prompt's messages


def exact_answer(*, completions: list[str], answer: list, **_) -> list[float]:
    return [1.0 if answers_match(final_answer(c), a) else 0.0 for c, a in zip(completions, answer)]


def format_reward(pattern: str) -> Callable:
    if pattern.startswith("tags:"):
        tags = [t.strip() for t in pattern[5:].split(",") if t.strip()]
        pattern = r"(?s)\s*" + r"\s*".join(rf"<{re.escape(t)}>.*?</{re.escape(t)}>" for t in tags) + r"\s*"
    try:
        regex = re.compile(pattern)
    except re.error as e:
        raise AuraError(M("bad_pattern", pattern=pattern, error=e)) from None

    def format_(*, completions: list[str], **_) -> list[float]:
        return [1.0 if regex.fullmatch(c) else 0.0 for c in completions]

    return format_


def length_reward(max_tokens: int) -> Callable:
    def length(*, completion_ids: list[list[int]], **_) -> list[float]:
        return [-len(ids) / max_tokens for ids in completion_ids]

    return length


def overlong_reward(max_tokens: int, buffer: int) -> Callable:
    """DAPO's soft overlong punishment (Yu et al. 2025, eq. 13; TRL's ``get_soft_overlong_punishment``): 0 up
    to ``max_tokens - buffer`` tokens, then falling linearly to -1 at ``max_tokens``, -1 beyond."""
    start = max_tokens - buffer

    def overlong(*, completion_ids: list[list[int]], **_) -> list[float]:
        return [
            0.0 if len(ids) <= start else -1.0 if len(ids) > max_tokens else (start - len(ids)) / buffer
            for ids in completion_ids
        ]

    return overlong


def spanish_reward(*, completions: list[str], **_) -> list[float]:
    words = [re.findall(r"[^\W\d_]+", c.lower()) for c in completions]
    return [sum(w in SPANISH_WORDS for w in ws) / len(ws) if ws else 0.0 for ws in words]


def _split_weight(spec: str) -> tuple[str, float]:
    head, sep, tail = spec.rpartition(":")
    if sep:
        try:
            return head, float(tail)
        except ValueError:
            pass
    return spec, 1.0


def check_spec(spec: str) -> None:
    """A --reward SPEC's syntax and, for a user's function, that its file exists (nothing is imported); a
    reward model's folder is checked by ``model_paths`` when the run starts."""
    body, weight = _split_weight(spec.strip())
    if not body or not math.isfinite(weight):
        raise AuraError(M("bad_spec", spec=spec))
    if body in BUILTINS:
        return
    if body.startswith(MODEL_PREFIX):  # its folder is checked when the run starts (``model_paths``): a
        if not body[len(MODEL_PREFIX) :]:  # pipeline's earlier stage may write it after this check
            raise AuraError(M("bad_spec", spec=spec))
        return
    path, sep, name = body.rpartition(":")
    if not sep or not path.endswith(".py") or not name.isidentifier():
        raise AuraError(M("bad_spec", spec=spec))
    if not Path(path).is_file():
        raise AuraError(M("no_file", spec=spec, path=path))


def model_paths(specs: list[str]) -> list[Path]:
    """The reward model folders of ``--reward model:PATH`` specs, each checked to exist and hold a model."""
    from aura.data.reward_model import check_reward_model

    out = []
    for spec in specs:
        body, _ = _split_weight(spec.strip())
        if body.startswith(MODEL_PREFIX):
            check_reward_model(spec, Path(body[len(MODEL_PREFIX) :]))
            out.append(Path(body[len(MODEL_PREFIX) :]))
    return out


def parse_reward(
    spec: str, *, format_pattern: str = DEFAULT_FORMAT, max_completion_length: int = 256, overlong_buffer: int = 0
) -> Reward:
    """A ``--reward`` SPEC -> Reward (a user's file is imported here: its top-level code runs now);
    ``overlong_buffer`` 0: a fifth of ``max_completion_length`` (DAPO's 4,096 of 20,480)."""
    check_spec(spec)
    body, weight = _split_weight(spec.strip())
    if body == "exact-answer":
        return Reward(body, weight, exact_answer, needs_answer=True)
    if body == "format":
        return Reward(body, weight, format_reward(format_pattern))
    if body == "length":
        return Reward(body, weight, length_reward(max_completion_length))
    if body == "spanish":
        return Reward(body, weight, spanish_reward)
    if body == "overlong":
        buffer = overlong_buffer or max(1, max_completion_length // 5)
        return Reward(body, weight, overlong_reward(max_completion_length, buffer))
    if body.startswith(MODEL_PREFIX):
        from aura.data.reward_model import RewardModel

        path = Path(body[len(MODEL_PREFIX) :])
        run = path.parent if path.name in ("final", "best") else path  # runs/rm/final -> "model.rm"
        return Reward(f"model.{run.resolve().name}", weight, RewardModel(path, spec=spec), model=True)
    path, _, name = body.rpartition(":")
    return Reward(f"{Path(path).stem}.{name}", weight, load_user_function(spec, Path(path), name), user=True)


def load_user_function(spec: str, path: Path, name: str) -> Callable:
    module_name = f"aura_user_reward_{abs(hash(str(path.resolve())))}"
    try:
        module_spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
    except Exception as e:  # the user's code: any error, reported with its type
        raise AuraError(M("load_failed", spec=spec, path=path, error=f"{type(e).__name__}: {e}")) from e
    fn = getattr(module, name, None)
    if not callable(fn):
        raise AuraError(M("no_function", spec=spec, path=path, name=name))
    return fn


def score(
    reward: Reward,
    *,
    prompt_text: str,
    where: str,
    completions: list[str],
    completion_ids: list[list[int]],
    fields: dict,
    prompt_messages: list | None = None,
) -> list[float]:
    """The reward of each completion of one prompt (checked: one finite number per completion); a reward model
    also gets the prompt's messages (``prompt_messages``, one copy per completion)."""
    n = len(completions)
    short = prompt_text if len(prompt_text) <= 80 else prompt_text[:77] + "..."
    kwargs = {k: [v] * n for k, v in fields.items()}
    kwargs.update(prompts=[prompt_text] * n, completions=completions, completion_ids=completion_ids)
    if reward.model:
        kwargs["prompt_messages"] = [prompt_messages or [{"role": "user", "content": prompt_text}]] * n
    try:
        values = reward.fn(**kwargs)
    except Exception as e:  # a user's function may raise anything: name the prompt
        raise AuraError(
            M("raised", reward=reward.name, where=where, prompt=short, error=f"{type(e).__name__}: {e}")
        ) from e
    if hasattr(values, "tolist"):
        values = values.tolist()
    if not isinstance(values, (list, tuple)):
        raise AuraError(M("not_list", reward=reward.name, where=where, prompt=short, kind=type(values).__name__))
    if len(values) != n:
        raise AuraError(M("bad_count", reward=reward.name, where=where, prompt=short, n=n, got=len(values)))
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise AuraError(M("bad_value", reward=reward.name, where=where, prompt=short, value=repr(v)))
        out.append(float(v))
    return out


@dataclass
class RewardSet:
    """The weighted rewards of a run, in --reward order."""

    rewards: list[Reward] = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        return [r.name for r in self.rewards]

    def scores(
        self,
        *,
        prompt_text: str,
        where: str,
        completions: list[str],
        completion_ids: list[list[int]],
        fields: dict,
        prompt_messages: list | None = None,
    ) -> list[list[float]]:
        """(number of rewards, G) raw scores of one prompt's completions."""
        return [
            score(
                r,
                prompt_text=prompt_text,
                where=where,
                completions=completions,
                completion_ids=completion_ids,
                fields=fields,
                prompt_messages=prompt_messages,
            )
            for r in self.rewards
        ]

    def to(self, device) -> None:
        """The reward models onto the training device."""
        for r in self.rewards:
            if r.model:
                r.fn.to(device)
