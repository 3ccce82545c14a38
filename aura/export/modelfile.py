"""The Ollama Modelfile ``aura export gguf`` writes beside each GGUF: ``NAME.Modelfile`` for ``NAME.gguf``.

One Modelfile per GGUF (exports of several quantisations into one folder no longer overwrite each other's),
holding what Ollama needs to chat with the model as it was trained: the chat format (an Ollama TEMPLATE for
the families Aura knows: ChatML (Qwen2/2.5, Aura's, SmolLM2), Llama 3, Gemma 2/3, Phi-3, Mistral; each renders
a conversation exactly as the model's Jinja template does, tests/test_modelfile.py; else the template
embedded in the GGUF), the end-of-turn tokens as stops, and a
SYSTEM line with the system message the model's chat template adds when a conversation brings none (Aura's
own template, Qwen's...). Its last line, ``# aura-modelfile-sha256: HASH`` of the rest, lets a later export
recognise an unedited Modelfile of its own (regenerated) from the user's or an edited one (kept unless
``--overwrite``). ``ollama_name`` derives the model name the printed hint suggests from the run.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

_OLLAMA_CHATML = (
    "{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}<|im_start|>assistant\n"
)
_OLLAMA_LLAMA3 = (  # the system message comes once, from .System (Ollama also keeps it in .Messages)
    "{{- if .System }}<|start_header_id|>system<|end_header_id|>\n\n{{ .System }}<|eot_id|>{{ end }}"
    '{{- range .Messages }}{{- if ne .Role "system" }}<|start_header_id|>{{ .Role }}<|end_header_id|>\n\n'
    "{{ .Content }}<|eot_id|>{{- end }}{{ end }}<|start_header_id|>assistant<|end_header_id|>\n\n"
)
_OLLAMA_MISTRAL = (
    '{{- range $i, $m := .Messages }}{{- if eq $m.Role "user" }}[INST] '
    "{{ if and $.System (eq $i 0) }}{{ $.System }}\n\n{{ end }}{{ $m.Content }} [/INST]"
    '{{- else if eq $m.Role "assistant" }} {{ $m.Content }}</s>{{- end }}{{- end }}'
)
_OLLAMA_GEMMA = (  # Gemma 2/3: no system turn; the system message opens the first user turn; "model" answers
    '{{- $first := true }}{{- range .Messages }}{{- if ne .Role "system" }}<start_of_turn>'
    '{{ if eq .Role "assistant" }}model{{ else }}{{ .Role }}{{ end }}\n'
    "{{ if and $first $.System }}{{ $.System }}\n\n{{ end }}{{ .Content }}<end_of_turn>\n{{ $first = false }}"
    "{{- end }}{{- end }}<start_of_turn>model\n"
)
_OLLAMA_PHI3 = "{{- range .Messages }}<|{{ .Role }}|>\n{{ .Content }}<|end|>\n{{ end }}<|assistant|>\n"

# Where each family's rendered chat keeps the system message.
_SYSTEM_BLOCK = {
    "chatml": r"<\|im_start\|>system\n(.*?)<\|im_end\|>",
    "llama3": r"<\|start_header_id\|>system<\|end_header_id\|>\n\n(.*?)<\|eot_id\|>",
}
_SIGNATURE = "# aura-modelfile-sha256: "
_RUN_PARTS = re.compile(r"final|best|(checkpoint|interrupt)-(step|epoch)-\d+")


def ollama_template(chat_template: str | None) -> tuple[str | None, str]:
    """(Ollama TEMPLATE, which family) from a Jinja chat template; None means "use the GGUF's"."""
    if not chat_template:
        return "{{ .Prompt }}", "plain"
    if "<|im_start|>" in chat_template and "<|im_end|>" in chat_template:
        return _OLLAMA_CHATML, "chatml"
    if "<|start_header_id|>" in chat_template:
        return _OLLAMA_LLAMA3, "llama3"
    if "<start_of_turn>" in chat_template and "<end_of_turn>" in chat_template:
        return _OLLAMA_GEMMA, "gemma"
    if "<|end|>" in chat_template and ("<|user|>" in chat_template or "<|assistant|>" in chat_template):
        return _OLLAMA_PHI3, "phi3"
    if "[INST]" in chat_template:
        return _OLLAMA_MISTRAL, "mistral"
    return None, "embedded"


def default_system(tok) -> str | None:
    """The system message ``tok``'s chat template adds to a conversation that brings none (Aura's template:
    "Eres Aura, …"), found by rendering a one-message chat; None when it adds none or the family is unknown."""
    template = getattr(tok, "chat_template", None)
    _, family = ollama_template(template)
    if family not in _SYSTEM_BLOCK:
        return None
    probe = "aura-probe-7f3a"
    try:
        text = tok.apply_chat_template(
            [{"role": "user", "content": probe}], tokenize=False, add_generation_prompt=False
        )
    except Exception:  # noqa: BLE001 - a template that cannot render a plain chat has no default to find
        return None
    found = re.search(_SYSTEM_BLOCK[family], text, re.DOTALL)
    system = found.group(1).strip() if found else ""
    return system if system and probe not in system and '"""' not in system else None


def modelfile_path(gguf: Path) -> Path:
    """``NAME.Modelfile`` beside ``NAME.gguf``."""
    return gguf.with_name(f"{gguf.name.removesuffix('.gguf')}.Modelfile")


def ollama_name(model_dir: Path, *, quant: str, name: str = "") -> str:
    """A model name for ``ollama create``: ``--name``, else the run's (``runs/chat/final`` -> ``chat``) or the
    model folder's, tagged with the quantisation (``chat:q8_0``); lowercase, Ollama's characters only."""
    base = name or (model_dir.parent.name if _RUN_PARTS.fullmatch(model_dir.name) else model_dir.name)
    base = re.sub(r"[^a-z0-9._-]+", "-", base.lower()).strip("-._") or "aura"
    return f"{base}:{quant}"


def modelfile_text(
    *,
    gguf_name: str,
    chat_template: str | None,
    stops: list[str],
    model_name: str,
    modelfile_name: str,
    system: str | None = None,
    params: dict[str, float] | None = None,
) -> str:
    template, family = ollama_template(chat_template)
    lines = [
        f"# Ollama Modelfile written by Aura. Use: ollama create {model_name} -f {modelfile_name}",
        f"FROM ./{gguf_name}",
        "",
    ]
    if template is not None:
        lines += [f"# Chat format: {family}", f'TEMPLATE """{template}"""', ""]
    else:
        lines += [
            "# The GGUF embeds the model's own chat template (tokenizer.chat_template); Ollama",
            "# reads it from there.",
            "",
        ]
    if system:
        lines += [
            "# The system message the model's chat template adds when a chat brings none",
            f'SYSTEM """{system}"""',
            "",
        ]
    for s in stops:
        lines.append(f'PARAMETER stop "{s}"')
    for k, v in (params or {}).items():
        lines.append(f"PARAMETER {k} {v}")
    return "\n".join(lines) + "\n"


def signed(text: str) -> str:
    """The Modelfile text with a last line that lets a later export recognise it as Aura's, unedited."""
    return f"{text}{_SIGNATURE}{hashlib.sha256(text.encode('utf-8')).hexdigest()}\n"


def is_ours(modelfile: Path) -> bool:
    """True for a Modelfile an export wrote and nobody has edited since (safe to regenerate)."""
    try:
        text = modelfile.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    body, sep, _last = text.rstrip("\n").rpartition("\n")
    return bool(sep) and signed(body + "\n") == text
