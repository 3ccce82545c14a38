"""Chat templates (Jinja, the same language as ``tokenizer.chat_template``) for fine-tuning and chat.

A model that ships its own ``chat_template`` uses it; otherwise ``--template`` picks one of these,
each faithful to its family's real format, and the chosen one is saved with the output
(``tokenizer.chat_template``) so ``aura chat`` and ``aura export gguf`` format prompts identically.

Every template renders a prefix of a conversation as a prefix of the whole rendering (the label
masking in ``aura.data.sft`` relies on it and checks it) and puts the end-of-turn token right after
each assistant message, so it is part of the trained response and the model learns to stop.
"""

from __future__ import annotations

from aura.core.errors import AuraError
from aura.core.i18n import Messages

M = Messages(
    "templates",
    {
        "no_template": (
            "El modelo base no trae plantilla de chat (chat_template) y no se indicó --template. Elige una: {choices}.",
            "The base model has no chat template (chat_template) and no --template was given. Choose one: {choices}.",
        ),
        "unknown": (
            "Plantilla desconocida '{name}'. Opciones: {choices}.",
            "Unknown template '{name}'. Choices: {choices}.",
        ),
        "missing_tokens": (
            "El tokenizador no tiene como token propio {tokens} de la plantilla '{name}': "
            "se tokenizarán como texto normal (funciona, pero gasta más tokens). Para "
            "modelos de esa familia se recomienda su propio tokenizador.",
            "The tokenizer has no single token for {tokens} of the '{name}' template: "
            "they will be tokenized as plain text (it works, but costs more tokens). For "
            "models of that family use their own tokenizer.",
        ),
    },
)

# A ``raise_exception`` call is what transformers' own templates use for bad role orders;
# apply_chat_template provides it.
_ALTERNATION = (
    "{%- set loop_messages = messages[1:] if messages and messages[0]['role'] == 'system' else messages %}"
    "{%- for m in loop_messages %}"
    "{%- if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{%- endif %}{%- endfor %}"
)

# Mistral Instruct (v0.1/v0.2 layout): <s>[INST] user [/INST] answer</s>[INST] ... The family has
# no system role; like Mistral's later templates, the system text opens the first user message.
MISTRAL = (
    _ALTERNATION + "{%- if bos_token %}{{- bos_token }}{%- endif %}"
    "{%- set system = messages[0]['content'] if messages and messages[0]['role'] == 'system' else '' %}"
    "{%- for m in loop_messages %}"
    "{%- if m['role'] == 'user' %}"
    "{%- if loop.first and system %}{{- '[INST] ' + system + '\\n\\n' + m['content'] + ' [/INST]' }}"
    "{%- else %}{{- '[INST] ' + m['content'] + ' [/INST]' }}{%- endif %}"
    "{%- else %}{{- ' ' + m['content'] + eos_token }}{%- endif %}"
    "{%- endfor %}"
)

# Llama 3 / 3.x Instruct.
LLAMA3 = (
    _ALTERNATION + "{%- if bos_token %}{{- bos_token }}{%- endif %}"
    "{%- for m in messages %}"
    "{{- '<|start_header_id|>' + m['role'] + '<|end_header_id|>\\n\\n' + m['content'] | trim + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)

# ChatML (OpenAI, Qwen, many others).
CHATML = (
    _ALTERNATION + "{%- for m in messages %}"
    "{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

AURA_SYSTEM = "Eres Aura, un asistente útil que responde en español de forma clara y precisa."

# Aura: ChatML with the tokens Aura's tokenizers reserve, and (like Qwen's ChatML) a default
# system message when the conversation brings none.
AURA = (
    _ALTERNATION + "{%- if not messages or messages[0]['role'] != 'system' %}"
    "{{- '<|im_start|>system\\n" + AURA_SYSTEM + "<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for m in messages %}"
    "{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

ALPACA_SYSTEM = (
    "Below is an instruction that describes a task. Write a response that appropriately completes the request."
)

# Stanford Alpaca. Aura folds an example's ``input`` into the instruction (blank line between), so the
# ``### Input:`` block of the original appears inside ``### Instruction:``; a conversation is a chain of
# Instruction/Response blocks.
ALPACA = (
    _ALTERNATION + "{%- set system = messages[0]['content'] if messages and messages[0]['role'] == 'system' "
    "else '" + ALPACA_SYSTEM + "' %}"
    "{{- system + '\\n\\n' }}"
    "{%- for m in loop_messages %}"
    "{%- if m['role'] == 'user' %}{{- '### Instruction:\\n' + m['content'] + '\\n\\n' }}"
    "{%- else %}{{- '### Response:\\n' + m['content'] + eos_token + '\\n\\n' }}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '### Response:\\n' }}{%- endif %}"
)

TEMPLATES: dict[str, str] = {"mistral": MISTRAL, "llama3": LLAMA3, "chatml": CHATML, "alpaca": ALPACA, "aura": AURA}

# Tokens each family's tokenizer has as single (special) tokens.
TEMPLATE_TOKENS: dict[str, tuple[str, ...]] = {
    "mistral": ("[INST]", "[/INST]"),
    "llama3": ("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"),
    "chatml": ("<|im_start|>", "<|im_end|>"),
    "aura": ("<|im_start|>", "<|im_end|>"),
    "alpaca": (),
}

# Markers of an already formatted text (JSONL ``text``): where an assistant turn starts and where the
# next turn starts. The trained span of each turn lies between them.
TEXT_MARKERS: dict[str, tuple[str, str]] = {
    "mistral": ("[/INST]", "[INST]"),
    "llama3": ("<|start_header_id|>assistant<|end_header_id|>\n\n", "<|start_header_id|>"),
    "chatml": ("<|im_start|>assistant\n", "<|im_start|>"),
    "alpaca": ("### Response:\n", "### Instruction:"),
}


def template_names() -> str:
    return ", ".join(TEMPLATES)


def get_template(name: str) -> str:
    if name not in TEMPLATES:
        raise AuraError(M("unknown", name=name, choices=template_names()))
    return TEMPLATES[name]


def template_name_of(chat_template: str | None) -> str | None:
    """The name of a built-in template given its text (None for a model's own template)."""
    for name, text in TEMPLATES.items():
        if chat_template == text:
            return name
    return None


def resolve_chat_template(tokenizer, requested: str | None, *, fallback: str | None = None) -> tuple[str, str]:
    """(template text, name) to use: ``--template`` wins, then the model's own, then ``fallback``
    (e.g. the family detected in pre-formatted texts). Sets ``tokenizer.chat_template``."""
    if requested:
        text, name = get_template(requested), requested
    elif getattr(tokenizer, "chat_template", None):
        text = tokenizer.chat_template
        if isinstance(text, dict):  # several named templates: the default one
            text = text.get("default") or next(iter(text.values()))
        name = template_name_of(text) or "model"
    elif fallback:
        text, name = get_template(fallback), fallback
    else:
        raise AuraError(M("no_template", choices=template_names()))
    tokenizer.chat_template = text
    return text, name


def missing_template_tokens(tokenizer, name: str) -> list[str]:
    """Tokens of a built-in template the tokenizer would split into several pieces."""
    missing = []
    for tok in TEMPLATE_TOKENS.get(name, ()):
        ids = tokenizer.encode(tok, add_special_tokens=False)
        if len(ids) != 1:
            missing.append(tok)
    return missing
