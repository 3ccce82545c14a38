"""Tools a model may call while it answers (GRPO's ``--tools``): declared, offered, parsed and run.

* **Declared** in ``--tools FILE``: a Python file whose public top-level functions (type hints and a docstring
  with an ``Args:`` section, as ``transformers.utils.get_json_schema`` reads them) are the tools; or a YAML
  file whose ``tools`` list names ``FILE.py:FUNCTION`` entries (paths relative to the YAML file).
* **Offered** through the chat template's own tool format: the prompt is rendered with
  ``apply_chat_template(messages, tools=[schemas])``. A template that cannot render a tool-calling
  conversation (its tool call's name and arguments and the tool's output all visible; TRL's
  ``supports_tool_calling`` rule) is refused before training.
* **Parsed** from the generated text in the Hermes/Qwen format that Qwen2.5 and Qwen3 templates emit:
  ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (TRL's Qwen response schema reads the same
  blocks). A block that is not such JSON is a failed call whose output tells the model what was expected.
* **Run** each in a sandboxed subprocess (``aura.inference.sandbox``: time and memory limits, no network, writes
  only in a fresh temporary folder); the calls of one turn run in parallel threads. A tool's result becomes a
  ``{"role": "tool", "name": ..., "content": ...}`` message; the tokens of that tool turn are the difference
  between the conversation rendered with and without it (``tool_turn_ids``), as TRL computes them.
"""

from __future__ import annotations

import json
import queue
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from aura.core.errors import AuraError
from aura.core.i18n import Messages
from aura.inference.sandbox import Limits, Result, Sandbox

M = Messages(
    "tools",
    {
        "no_file": ("--tools {path}: el archivo no existe.", "--tools {path}: the file does not exist."),
        "kind": (
            "--tools {path}: se esperaba un archivo .py (sus funciones públicas son las herramientas) o .yaml "
            "(una lista 'tools' de ARCHIVO.py:FUNCIÓN).",
            "--tools {path}: expected a .py file (its public functions are the tools) or a .yaml file (a "
            "'tools' list of FILE.py:FUNCTION).",
        ),
        "yaml": (
            "--tools {path}: la entrada {entry!r} de 'tools' no es ARCHIVO.py:FUNCIÓN con un archivo que exista.",
            "--tools {path}: the 'tools' entry {entry!r} is not FILE.py:FUNCTION with a file that exists.",
        ),
        "load_failed": ("--tools {path}: no se pudo cargar ({error}).", "--tools {path}: could not load it ({error})."),
        "no_function": (
            "--tools {path}: no define una función '{name}'.",
            "--tools {path}: defines no function '{name}'.",
        ),
        "none": (
            "--tools {path}: no define ninguna función pública (las que empiezan por _ no cuentan).",
            "--tools {path}: defines no public function (those starting with _ do not count).",
        ),
        "schema": (
            "--tools {path}: la función '{name}' no se puede describir como herramienta ({error}). Cada "
            "argumento necesita una anotación de tipo y una línea en la sección 'Args:' del docstring.",
            "--tools {path}: the function '{name}' cannot be described as a tool ({error}). Every argument "
            "needs a type hint and a line in the docstring's 'Args:' section.",
        ),
        "duplicate": (
            "--tools {path}: la herramienta '{name}' aparece dos veces.",
            "--tools {path}: the tool '{name}' appears twice.",
        ),
        "template": (
            "La plantilla de chat de {model} no admite herramientas: al renderizar una conversación con una "
            "llamada a herramienta y su resultado, {missing} no aparece. Usa un modelo cuya plantilla admita "
            "tools (Qwen2.5, Qwen3...) o pon en el tokenizer_config.json del modelo una chat_template que las "
            "muestre.",
            "The chat template of {model} does not support tools: rendering a conversation with a tool call and "
            "its result, {missing} does not appear. Use a model whose template supports tools (Qwen2.5, "
            "Qwen3...) or put in the model's tokenizer_config.json a chat_template that renders them.",
        ),
        "bad_call": (
            "llamada no válida; se esperaba <tool_call>, un objeto JSON con 'name' y 'arguments' (otro objeto) "
            "y </tool_call>",
            "invalid call; expected <tool_call>, a JSON object with 'name' and 'arguments' (another object) and "
            "</tool_call>",
        ),
        "unknown": (
            "no existe la herramienta '{name}' (hay: {names})",
            "there is no tool '{name}' (there are: {names})",
        ),
    },
)

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


@dataclass(frozen=True)
class Tool:
    name: str
    file: str  # the Python file that defines it (imported again in each sandboxed call)
    schema: dict = field(hash=False, compare=False)  # the JSON schema offered to the chat template


def load_tools(path: str | Path) -> list[Tool]:
    """The tools of ``--tools PATH`` (a .py file, or a .yaml list of FILE.py:FUNCTION): the user's files are
    imported here, in this process, to read their schemas (their top-level code runs now, with the user's
    rights, as a reward file's does); calls run only in the sandbox."""
    path = Path(path)
    if not path.is_file():
        raise AuraError(M("no_file", path=path))
    if path.suffix == ".py":
        module = _import(path, where=path)
        names = [
            n
            for n, f in vars(module).items()
            if callable(f) and not n.startswith("_") and getattr(f, "__module__", None) == module.__name__
        ]
        if not names:
            raise AuraError(M("none", path=path))
        entries = [(path, n) for n in names if isinstance(vars(module)[n], type(load_tools))]
    elif path.suffix in (".yaml", ".yml"):
        entries = _yaml_entries(path)
    else:
        raise AuraError(M("kind", path=path))
    tools: list[Tool] = []
    modules: dict[Path, object] = {}
    for file, name in entries:
        module = modules.get(file) or modules.setdefault(file, _import(file, where=path))
        fn = getattr(module, name, None)
        if not callable(fn):
            raise AuraError(M("no_function", path=file, name=name))
        tools.append(Tool(name, str(file.resolve()), _schema(fn, name=name, path=file)))
        if [t.name for t in tools].count(name) > 1:
            raise AuraError(M("duplicate", path=path, name=name))
    return tools


def _yaml_entries(path: Path) -> list[tuple[Path, str]]:
    import yaml

    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    listed = data.get("tools") if isinstance(data, dict) else data
    if not isinstance(listed, list) or not listed:
        raise AuraError(M("kind", path=path))
    entries = []
    for entry in listed:
        file, sep, name = str(entry).rpartition(":")
        target = (path.parent / file).resolve() if sep else None
        if target is None or target.suffix != ".py" or not target.is_file() or not name.isidentifier():
            raise AuraError(M("yaml", path=path, entry=entry))
        entries.append((target, name))
    return entries


def _import(file: Path, *, where: Path):
    import importlib.util

    try:
        spec = importlib.util.spec_from_file_location(f"aura_tools_{abs(hash(str(file)))}", file)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except Exception as e:  # the user's code: any error, reported with its type
        raise AuraError(M("load_failed", path=where, error=f"{type(e).__name__}: {e}")) from e
    return module


def _schema(fn, *, name: str, path: Path) -> dict:
    from transformers.utils import get_json_schema

    try:
        return get_json_schema(fn)
    except Exception as e:  # transformers' DocstringParsingException / TypeHintParsingException
        raise AuraError(M("schema", path=path, name=name, error=e)) from None


def check_template(tokenizer, *, model: str) -> None:
    """Refuse a chat template that cannot render a tool call and its result (TRL's ``supports_tool_calling``)."""
    name, key, value, content = "tool_name_a8f3", "tool_arg_b9d4", "tool_val_d6e7", "tool_out_c4f9"
    messages = [
        {"role": "user", "content": "hola"},
        {"role": "assistant", "content": "", "tool_calls": [_call_message(name, {key: value})]},
        {"role": "tool", "name": name, "content": content},
    ]
    try:
        text = tokenizer.apply_chat_template(messages, tokenize=False)
    except Exception:
        text = ""
    missing = [s for s in (name, key, value, content) if s not in (text or "")]
    if missing:
        raise AuraError(M("template", model=model, missing=missing[0]))


def _call_message(name: str, arguments: dict) -> dict:
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


@dataclass
class ToolCall:
    name: str
    arguments: dict | None  # None: the block was not a valid call (its error is ``problem``)
    problem: str = ""


def parse_tool_calls(text: str) -> list[ToolCall]:
    """The ``<tool_call>{...}</tool_call>`` blocks of ``text``, in order (an empty list: no call)."""
    calls = []
    for body in _CALL.findall(text):
        try:
            data = json.loads(body)
        except ValueError:
            data = None
        ok = (
            isinstance(data, dict) and isinstance(data.get("name"), str) and isinstance(data.get("arguments", {}), dict)
        )
        if ok:
            calls.append(ToolCall(data["name"], dict(data.get("arguments") or {})))
        else:
            calls.append(ToolCall(data.get("name", "?") if isinstance(data, dict) else "?", None, M("bad_call")))
    return calls


class ToolBox:
    """The declared tools and the sandbox's limits: runs a turn's calls, up to ``workers`` at once, each in a
    child forked from one of the box's sandbox servers (``aura.inference.sandbox.Sandbox``: started when first
    needed, kept for the run, ended by ``close`` or with Aura's process)."""

    def __init__(self, tools: list[Tool], *, limits: Limits = Limits(), workers: int = 4):
        self.tools, self.limits, self.workers = {t.name: t for t in tools}, limits, workers
        self._idle: queue.SimpleQueue[Sandbox] = queue.SimpleQueue()

    def close(self) -> None:
        """End the sandbox servers (a later call starts them again)."""
        while not self._idle.empty():
            self._idle.get_nowait().close()

    @property
    def schemas(self) -> list[dict]:
        return [t.schema for t in self.tools.values()]

    def run(self, calls: list[ToolCall]) -> list[Result]:
        """One ``Result`` per call, in order; a failing call is ``ok=False`` with an ``Error: ...`` text."""
        if not calls:
            return []
        with ThreadPoolExecutor(max_workers=min(self.workers, len(calls))) as pool:
            return list(pool.map(self._one, calls))

    def _one(self, c: ToolCall) -> Result:
        if c.arguments is None:
            return Result(False, "Error: " + c.problem)
        tool = self.tools.get(c.name)
        if tool is None:
            return Result(False, "Error: " + M("unknown", name=c.name, names=", ".join(self.tools)))
        try:
            box = self._idle.get_nowait()
        except queue.Empty:
            box = Sandbox()
        try:
            return box.call(tool.file, tool.name, c.arguments, limits=self.limits)
        finally:
            self._idle.put(box)


def tool_turn_ids(
    tokenizer, calls: list[ToolCall], results: list[Result], *, end_of_turn: list[int]
) -> tuple[list[int], list[int]]:
    """(the end-of-turn token that closes an assistant turn, or [] if the template has none; the token ids the
    chat template puts after an assistant turn that made ``calls``). That turn's text is cut at its last
    end-of-turn token (what a model emits to close its turn); then come the tool messages and the opening of
    the next assistant turn. Computed on a stand-in conversation, as TRL's
    ``_get_tool_suffix_ids`` does (which cuts at EOS; the same where EOS closes a turn, as in Qwen's
    templates)."""
    assistant = {
        "role": "assistant",
        "content": "",
        "tool_calls": [_call_message(c.name, c.arguments or {}) for c in calls],
    }
    head = [{"role": "user", "content": "x"}, assistant]
    tools = [{"role": "tool", "name": c.name, "content": r.text} for c, r in zip(calls, results)]

    def ids(messages, generation_prompt: bool) -> list[int]:
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    prefix, full = ids(head, False), ids(head + tools, True)
    ends = [i for i, t in enumerate(prefix) if t in end_of_turn]
    if ends:
        prefix = prefix[: ends[-1] + 1]
    if full[: len(prefix)] != prefix:
        raise ValueError("the chat template renders a tool turn that does not extend the conversation")
    return prefix[-1:] if ends else [], full[len(prefix) :]
