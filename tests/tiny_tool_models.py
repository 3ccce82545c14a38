"""A tiny Llama that calls Aura's calculator and copies its output, for GRPO's ``--tools`` bench.

``arithmetic_prompts`` makes Spanish questions ``a OP b`` (two-digit numbers, + - *), each with its expression
and true value; ``build_tool_copier`` trains a tiny Llama, with mini-batches, on hundreds of *other* such
questions, each answered by a call ``calcular("a OP b")`` that copies the question's numbers, a *made-up* tool
output (a random number, never the true value) and ``Respuesta: R`` that copies that output. The model learns
two general copy skills (prompt -> call, tool output -> answer) and never any arithmetic: on a question it
has not seen, its answer is right only when its call is well formed and it copies what the real calculator
returned. The tokenizer splits digits one by one (as SmolLM's does), so a copy is the same skill for every
number, and learns the template's markup, so a conversation is ~100 tokens (a real tokenizer's length).
"""

from __future__ import annotations

import random
from pathlib import Path

from tests.tiny_models import ROOT, TOOL_TEMPLATE, build_llama, train_tokenizer

PHRASES = (
    "¿Cuánto es {a} {op} {b}?",
    "Calcula {a} {op} {b}.",
    "Dime el resultado de {a} {op} {b}.",
    "¿Qué da {a} {op} {b}?",
    "Necesito saber cuánto es {a} {op} {b}.",
    "Haz la cuenta {a} {op} {b}, por favor.",
)
OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


def arithmetic_prompts(n: int, *, seed: int, skip: frozenset = frozenset()) -> list[tuple[str, str, str]]:
    """``n`` distinct (question, expression, value) triples, none of whose expressions is in ``skip``."""
    draw, seen, out = random.Random(seed), set(skip), []
    while len(out) < n:
        a, b, op = draw.randint(10, 99), draw.randint(10, 99), draw.choice(list(OPS))
        expression = f"{a} {op} {b}"
        if expression in seen:
            continue
        seen.add(expression)
        out.append((draw.choice(PHRASES).format(a=a, op=op, b=b), expression, str(OPS[op](a, b))))
    return out


def _made_up(draw: random.Random, value: str) -> str:
    """A random number of 1 to 4 digits (sometimes negative), never ``value``."""
    while True:
        digits = draw.randint(1, 4)
        out = str(draw.randint(10 ** (digits - 1), 10**digits - 1) * (-1 if draw.random() < 0.25 else 1))
        if out != value:
            return out


def _turns(question: str, expression: str, output: str) -> list[dict]:
    """The conversation: the question, the call, the tool's output, the answer that copies it."""
    call = {"type": "function", "function": {"name": "calcular", "arguments": {"expresion": expression}}}
    return [
        {"role": "user", "content": question},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "name": "calcular", "content": output},
        {"role": "assistant", "content": f"Respuesta: {output}"},
    ]


def _conversation_ids(tok, schemas: list, question: str, expression: str, output: str) -> tuple[list, list]:
    """(token ids, labels): the labels are the ids on the assistant's own tokens, -100 elsewhere."""
    turns = _turns(question, expression, output)

    def ids(messages, prompt: bool) -> list[int]:
        text = tok.apply_chat_template(messages, tools=schemas, tokenize=False, add_generation_prompt=prompt)
        return tok(text, add_special_tokens=False)["input_ids"]

    ask, called, told, full = ids(turns[:1], True), ids(turns[:2], False), ids(turns[:3], True), ids(turns, False)
    labels = [-100] * len(full)
    for start, end in ((len(ask), len(called)), (len(told), len(full))):
        labels[start:end] = full[start:end]
    return full, labels


def build_tool_copier(
    root: str | Path,
    *,
    skip: frozenset = frozenset(),
    conversations: int = 600,
    steps: int = 300,
    batch: int = 32,
    lr: float = 3e-3,
    hidden: int = 128,
    vocab_size: int = 800,
    layers: int = 4,
    seed: int = 0,
) -> Path:
    """A tiny Llama (d ``hidden``, ``layers`` layers; a digit-by-digit BPE of ``vocab_size`` tokens trained on the
    corpus and the template's markup) with ``TOOL_TEMPLATE``,
    trained for ``steps`` AdamW steps (mini-batches of ``batch``, linear decay) on ``conversations`` made-up
    calculator conversations (the module docstring), none of whose expressions is in ``skip``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from aura.inference.tools import load_tools

    root = Path(root)
    schemas = [t.schema for t in load_tools(ROOT / "aura" / "resources" / "tools" / "calculadora.py")]
    draw = random.Random(seed + 1)
    shown = [(q, e, _made_up(draw, v)) for q, e, v in arithmetic_prompts(conversations, seed=seed + 2, skip=skip)]
    plain = AutoTokenizer.from_pretrained(train_tokenizer(root / "tok-plain", vocab_size=300, digits=True))
    plain.chat_template = TOOL_TEMPLATE
    # the template's markup, often enough that BPE gives its words few tokens (a real tokenizer's are short)
    markup = [plain.apply_chat_template(_turns(*row), tools=schemas, tokenize=False) for row in shown[:50]] * 20
    tok_dir = train_tokenizer(root / "tok", vocab_size=vocab_size, digits=True, extra=tuple(markup))
    tok = AutoTokenizer.from_pretrained(tok_dir)
    tok.chat_template = TOOL_TEMPLATE
    tok.save_pretrained(tok_dir)
    model_dir = build_llama(
        root / "llama", tok_dir, hidden=hidden, layers=layers, intermediate=4 * hidden, ctx=512, seed=seed
    )
    rows = [_conversation_ids(tok, schemas, *row) for row in shown]
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1 - s / max(1, steps))
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        pick = torch.randint(0, len(rows), (batch,), generator=gen).tolist()
        width = max(len(rows[i][0]) for i in pick)
        ids = torch.tensor([rows[i][0] + [tok.pad_token_id] * (width - len(rows[i][0])) for i in pick])  # (B, T)
        labels = torch.tensor([rows[i][1] + [-100] * (width - len(rows[i][1])) for i in pick])  # (B, T)
        model(input_ids=ids, attention_mask=ids != tok.pad_token_id, labels=labels).loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
    model.eval().save_pretrained(model_dir)
    return model_dir
