"""The Ollama Modelfile ``aura export gguf`` writes renders each family's own chat template: the TEMPLATE of the
Modelfile text, executed as Ollama executes it (Go's text/template, ``tests/gotemplate.py``) for a multi-turn
Spanish conversation, equals transformers' ``apply_chat_template`` with the family's real Jinja template
(Llama 3, Qwen2.5's ChatML with its default system message, SmolLM2, Aura's own ChatML, Gemma 2, Gemma 3,
Phi-3), less the BOS token that llama.cpp adds itself when it tokenises.
"""

from __future__ import annotations

import re

import pytest

from tests.gotemplate import render
from tests.tiny_models import CHAT_TEMPLATE

LLAMA3 = (  # Meta-Llama-3-8B-Instruct's
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
QWEN25 = (  # Qwen2.5-Instruct's, its branch without tools
    "{%- if messages[0]['role'] == 'system' %}\n    {{- '<|im_start|>system\\n' + messages[0]['content'] + "
    "'<|im_end|>\\n' }}\n{%- else %}\n    {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are "
    "a helpful assistant.<|im_end|>\\n' }}\n{%- endif %}\n{%- for message in messages %}\n    {%- if (message.role == "
    '"user") or (message.role == "system" and not loop.first) or (message.role == "assistant") %}\n        {{- '
    "'<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n    {%- endif %}\n{%- endfor %}"
    "\n{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n' }}\n{%- endif %}\n"
)
SMOLLM2 = (  # SmolLM2-Instruct's
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + "
    "message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}"
)
GEMMA2 = (  # gemma-2-it's (no system role)
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
    "{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}"
    "{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}"
)
GEMMA3 = (  # gemma-3-it's, its text branch
    "{{ bos_token }}\n{%- if messages[0]['role'] == 'system' -%}\n    {%- set first_user_prefix = "
    "messages[0]['content'] + '\n\n' -%}\n    {%- set loop_messages = messages[1:] -%}\n{%- else -%}\n    {%- set "
    'first_user_prefix = "" -%}\n    {%- set loop_messages = messages -%}\n{%- endif -%}\n{%- for message in '
    "loop_messages -%}\n    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n        {{ "
    'raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}\n    {%- endif '
    "-%}\n    {%- if (message['role'] == 'assistant') -%}\n        {%- set role = \"model\" -%}\n    {%- else -%}\n"
    "        {%- set role = message['role'] -%}\n    {%- endif -%}\n    {{ '<start_of_turn>' + role + '\n' + "
    "(first_user_prefix if loop.first else \"\") }}\n    {%- if message['content'] is string -%}\n        {{ "
    "message['content'] | trim }}\n    {%- endif -%}\n    {{ '<end_of_turn>\n' }}\n{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n    {{'<start_of_turn>model\n'}}\n{%- endif -%}\n"
)
PHI3 = (  # Phi-3-mini-4k-instruct's
    "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\n' + message['content'] + "
    "'<|end|>\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\n' + message['content'] + '<|end|>\n'}}"
    "{% elif message['role'] == 'assistant' %}{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}"
)

SYSTEM = {"role": "system", "content": "Eres un asistente que responde en español, con brevedad."}
TURNS = [
    {"role": "user", "content": "¿Cuál es la capital de Perú?"},
    {"role": "assistant", "content": "Lima. ¿Quieres saber algo más?"},
    {"role": "user", "content": "Sí: ¿y la de Bolivia? Explícamelo en dos líneas."},
]

# family -> (real template, BOS token, its Ollama family, with a system message?)
CASES = {
    "llama3": (LLAMA3, "<|begin_of_text|>", "llama3", True),
    "qwen2.5": (QWEN25, None, "chatml", True),
    "qwen2.5-default-system": (QWEN25, None, "chatml", False),
    "smollm2": (SMOLLM2, None, "chatml", True),
    "aura": (CHAT_TEMPLATE, None, "chatml", True),
    "gemma2": (GEMMA2, "<bos>", "gemma", False),
    "gemma3": (GEMMA3, "<bos>", "gemma", True),
    "gemma3-no-system": (GEMMA3, "<bos>", "gemma", False),
    "phi3": (PHI3, None, "phi3", True),
}


def _tokenizer(template: str, bos: str | None):
    """A tokenizer that only carries the chat template and the special tokens it names."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel({"<unk>": 0}, unk_token="<unk>")),
        bos_token=bos or "<s>",
        eos_token="<|endoftext|>",
        unk_token="<unk>",
    )
    tok.chat_template = template
    return tok


def _ollama(modelfile: str, messages: list[dict]) -> str:
    """What Ollama renders for /api/chat: the SYSTEM line joins the messages when they bring none, .System is
    the system message, .Messages every message (system included) as Role/Content."""
    template = re.search(r'^TEMPLATE """(.*?)"""$', modelfile, re.DOTALL | re.MULTILINE).group(1)
    system = re.search(r'^SYSTEM """(.*?)"""$', modelfile, re.DOTALL | re.MULTILINE)
    if system and not any(m["role"] == "system" for m in messages):
        messages = [{"role": "system", "content": system.group(1)}, *messages]
    sys_msg = next((m["content"] for m in messages if m["role"] == "system"), "")
    return render(
        template, {"System": sys_msg, "Messages": [{"Role": m["role"], "Content": m["content"]} for m in messages]}
    )


@pytest.mark.parametrize("case", list(CASES))
def test_modelfile_template_renders_the_models_own_chat_template(case):
    from aura.export.modelfile import default_system, modelfile_text

    template, bos, family, with_system = CASES[case]
    tok = _tokenizer(template, bos)
    messages = [SYSTEM, *TURNS] if with_system else list(TURNS)
    expected = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    if bos:  # llama.cpp adds BOS itself when it tokenises the prompt (the GGUF says add_bos)
        assert expected.startswith(bos)
        expected = expected[len(bos) :]
    text = modelfile_text(
        gguf_name="m.gguf",
        chat_template=template,
        stops=[],
        model_name="m:f16",
        modelfile_name="m.Modelfile",
        system=default_system(tok),
    )
    assert f"# Chat format: {family}" in text
    assert _ollama(text, messages) == expected


def test_a_template_outside_the_families_is_left_to_the_gguf():
    from aura.export.modelfile import modelfile_text

    text = modelfile_text(
        gguf_name="m.gguf",
        chat_template="{{ messages[0]['content'] }}<|fin|>",
        stops=[],
        model_name="m:f16",
        modelfile_name="m.Modelfile",
    )
    assert "TEMPLATE" not in text and "embeds the model's own chat template" in text
