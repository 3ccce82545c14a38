"""Prompts for GRPO (``aura finetune --objective grpo``): every format -> prompt messages (+ answer) -> token ids.

A record needs a ``prompt`` (text, or a list of chat messages ending with a user turn) or a ``question``
(GSM8K's name); ``answer`` is the reference the ``exact-answer`` reward compares with (GSM8K's full
solutions ending in ``#### N`` work as they are). Every other field is kept and handed to a user's reward
function under its own name (TRL's convention). Any file ``aura.data.sft`` reads works: CSV/TSV,
JSON/JSONL, Parquet, a ``save_to_disk`` directory or a hub dataset.

Without ``--data`` the training split of Aura's Spanish math set is used (``aura/resources/math_es/``,
built by ``scripts/build_math_es.py``).

Encoding: the prompt messages in the chat template with the generation prompt (the template opens the
assistant turn); without a template, the prompt text itself. A prompt longer than ``--max-prompt-length``
keeps its last tokens (the question's end and the template's opening of the answer), as DPO does.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from aura.core import console
from aura.core.errors import AuraError
from aura.core.files import loads_json
from aura.core.i18n import Messages
from aura.data.sft import check_messages, iter_records

MATH_DIR = Path(__file__).resolve().parents[1] / "resources" / "math_es"
DEFAULT_PROMPTS = MATH_DIR / "train.jsonl"

M = Messages(
    "prompts",
    {
        "no_prompt": (
            "{where}: falta el prompt: se esperaba un campo 'prompt' (texto o lista de mensajes) o "
            "'question'. Campos encontrados: {found}.",
            "{where}: the prompt is missing: expected a 'prompt' field (text or a list of messages) or "
            "'question'. Fields found: {found}.",
        ),
        "bad_prompt": (
            "{where}, campo '{field}': se esperaba texto o una lista de mensajes que termine con uno del "
            "usuario (es {kind}).",
            "{where}, field '{field}': expected text or a list of messages ending with a user message (it is {kind}).",
        ),
        "empty": ("{where}: el prompt está vacío.", "{where}: the prompt is empty."),
        "no_answer": (
            "--reward exact-answer compara con el campo 'answer' de cada prompt, pero {where} no lo tiene. "
            "Añade 'answer' a los datos o quita esa recompensa.",
            "--reward exact-answer compares with each prompt's 'answer' field, but {where} has none. Add "
            "'answer' to the data or drop that reward.",
        ),
        "no_prompts": ("{path} no contiene ningún prompt.", "{path} holds no prompt."),
        "loaded": (
            "Cargando prompts: {path} -> {count:prompt|prompts}.",
            "Loading prompts: {path} -> {count:prompt|prompts}.",
        ),
        "cut": (
            "Prompts recortados por el principio a --max-prompt-length {n:token|tokens}: {count}.",
            "Prompts cut at their start to --max-prompt-length {n:token|tokens}: {count}.",
        ),
    },
)


@dataclass
class PromptItem:
    """One prompt: its messages, the reference answer (or None) and the record's other fields."""

    messages: list[dict[str, str]]
    answer: object = None
    fields: dict = field(default_factory=dict)
    where: str = ""

    @property
    def text(self) -> str:
        """The last user message (what error messages quote)."""
        return self.messages[-1]["content"]


@dataclass
class EncodedPrompt:
    input_ids: list[int]  # the rendered prompt (generation prompt included)
    item: PromptItem


def _messages(value, where: str, name: str) -> list[dict[str, str]]:
    if isinstance(value, str) and value.lstrip().startswith("[") and value.rstrip().endswith("]"):
        try:
            value = loads_json(value)
        except ValueError:
            pass
    if hasattr(value, "tolist"):  # numpy arrays from Parquet
        value = value.tolist()
    if isinstance(value, str):
        if not value.strip():
            raise AuraError(M("empty", where=where))
        return [{"role": "user", "content": value.strip()}]
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(m, dict) for m in value)
        or value[-1].get("role") != "user"
    ):
        raise AuraError(M("bad_prompt", where=where, field=name, kind=type(value).__name__))
    # the SFT checks (roles, alternation, text contents) on the prompt plus a placeholder answer
    return check_messages(list(value) + [{"role": "assistant", "content": "-"}], where)[:-1]


def record_to_prompt(record, where: str) -> PromptItem:
    if not isinstance(record, dict):
        raise AuraError(M("no_prompt", where=where, found=type(record).__name__))
    rec = {k.strip().lower() if isinstance(k, str) else k: v for k, v in record.items()}
    name = "prompt" if "prompt" in rec else "question" if "question" in rec else None
    if name is None:
        raise AuraError(M("no_prompt", where=where, found=", ".join(map(str, record)) or "-"))
    messages = _messages(rec[name], where, name)
    system = rec.get("system")
    if isinstance(system, str) and system.strip() and messages[0]["role"] != "system":
        messages.insert(0, {"role": "system", "content": system.strip()})
    answer = rec.get("answer")
    fields = {k: v for k, v in rec.items() if k not in (name, "system")}
    return PromptItem(messages=messages, answer=None if answer in (None, "") else answer, fields=fields, where=where)


def load_prompts(
    data: str | os.PathLike | None = None, *, split: str = "train", need_answer: bool = False
) -> list[PromptItem]:
    """Every prompt of ``data`` (None: the Spanish math set's training split)."""
    items = [
        record_to_prompt(record, where)
        for where, record in iter_records(
            data, split=split, default=DEFAULT_PROMPTS, header_check=lambda path, header: None
        )
    ]
    name = data or DEFAULT_PROMPTS
    if not items:
        raise AuraError(M("no_prompts", path=name))
    if need_answer:
        missing = next((p for p in items if p.answer is None), None)
        if missing is not None:
            raise AuraError(M("no_answer", where=missing.where))
    console.info(M("loaded", path=name, count=len(items)))
    return items


def encode_prompts(
    items: list[PromptItem],
    tokenizer,
    *,
    templated: bool,
    max_prompt_length: int | None = None,
    tools: list[dict] | None = None,
) -> list[EncodedPrompt]:
    """Token ids of every prompt: chat template with the generation prompt (and the tools' schemas offered,
    GRPO's ``--tools``), or the plain text."""
    from aura.data.sft_batches import render_chat

    out, cut = [], 0
    for item in items:
        if templated:
            text = render_chat(tokenizer, item.messages, generation_prompt=True, where=item.where, tools=tools)
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        else:
            ids = tokenizer("\n\n".join(m["content"] for m in item.messages))["input_ids"]
        if max_prompt_length and len(ids) > max_prompt_length:
            ids, cut = ids[-max_prompt_length:], cut + 1
        out.append(EncodedPrompt(list(ids), item))
    if cut:
        console.warn(M("cut", n=max_prompt_length, count=cut))
    return out
