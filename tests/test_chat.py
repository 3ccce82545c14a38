"""``aura chat`` driven through a pseudo-terminal: multi-turn history, /reset, /system, /help, /exit.

Greedy answers are compared with transformers' greedy decoding of the same conversation rendered by
the tokenizer's chat template, so the test proves that history, reset and system messages reach the
model exactly as they should.
"""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time

import pytest
import torch

PROMPT = "You> "


@pytest.fixture(scope="module")
def zoo(tiny_zoo):
    return tiny_zoo


class Terminal:
    """A child process on a pseudo-terminal; ``expect`` reads until a marker appears."""

    def __init__(self, args: list[str]):
        self.master, slave = pty.openpty()
        env = dict(os.environ, AURA_LANG="en", AURA_PLAIN="1", PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
        os.close(slave)
        self.buffer = ""

    def expect(self, marker: str, timeout: float = 180) -> str:
        end = time.time() + timeout
        while marker not in self.buffer:
            if time.time() > end:
                raise AssertionError(f"timed out waiting for {marker!r}; got:\n{self.buffer}")
            ready, _, _ = select.select([self.master], [], [], 0.5)
            if ready:
                try:
                    data = os.read(self.master, 4096)
                except OSError:  # child closed the terminal
                    data = b""
                if not data and self.proc.poll() is not None:
                    raise AssertionError(f"process ended waiting for {marker!r}; got:\n{self.buffer}")
                self.buffer += data.decode("utf-8", errors="replace").replace("\r\n", "\n")
        before, _, self.buffer = self.buffer.partition(marker)
        return before

    def send(self, line: str) -> None:
        os.write(self.master, (line + "\n").encode("utf-8"))

    def close(self) -> int:
        try:
            return self.proc.wait(timeout=60)
        finally:
            os.close(self.master)


def _answer(model, tok, messages) -> str:
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    ids = tok(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = model.generate(
            ids,
            max_new_tokens=6,
            do_sample=False,
            pad_token_id=tok.pad_token_id,
            eos_token_id=[tok.eos_token_id, tok.convert_tokens_to_ids("<|im_end|>")],
        )
    return tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True).strip()


def _reply(term: Terminal, line: str) -> str:
    term.send(line)
    raw = term.expect(PROMPT)
    # the terminal echoes the line; the answer follows the "Model> " marker
    return raw.split("Model> ", 1)[1].strip() if "Model> " in raw else raw.replace(line, "", 1).strip()


def test_chat_repl_multi_turn_reset_system(zoo):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    term = Terminal(
        [
            sys.executable,
            "-m",
            "aura",
            "chat",
            "--model",
            str(zoo["llama"]),
            "--temperature",
            "0",
            "--max-new-tokens",
            "6",
            "--repetition-penalty",
            "1.0",
        ]
    )
    banner = term.expect(PROMPT)
    assert "Type /help" in banner
    a1 = _reply(term, "Hola")
    a2 = _reply(term, "¿Y mañana?")
    reset = _reply(term, "/reset")
    a3 = _reply(term, "Hola")
    system = _reply(term, "/system Eres un pirata.")
    a4 = _reply(term, "Hola")
    help_text = _reply(term, "/help")
    unknown = _reply(term, "/foo")
    term.send("/exit")
    term.expect("Goodbye!")
    assert term.close() == 0

    tok = AutoTokenizer.from_pretrained(str(zoo["llama"]))
    model = AutoModelForCausalLM.from_pretrained(str(zoo["llama"])).eval()
    e1 = _answer(model, tok, [{"role": "user", "content": "Hola"}])
    e2 = _answer(
        model,
        tok,
        [
            {"role": "user", "content": "Hola"},
            {"role": "assistant", "content": e1},
            {"role": "user", "content": "¿Y mañana?"},
        ],
    )
    e4 = _answer(model, tok, [{"role": "system", "content": "Eres un pirata."}, {"role": "user", "content": "Hola"}])

    def norm(s):
        return re.sub(r"\s+", " ", s).strip()  # the pty may rewrap whitespace

    assert e1 and norm(a1) == norm(e1)
    assert norm(a2) == norm(e2)  # the second turn saw the first
    assert "Conversation cleared." in reset
    assert norm(a3) == norm(e1)  # after /reset the history is gone
    assert "System message set" in system
    assert norm(a4) == norm(e4)  # the system message reached the template
    assert "/reset" in help_text and "/system" in help_text and "/exit" in help_text
    assert "Unknown command: /foo" in unknown


def test_ctrl_c_at_the_prompt_leaves_quietly(zoo):
    import signal

    term = Terminal([sys.executable, "-m", "aura", "chat", "--model", str(zoo["llama"]), "--max-new-tokens", "4"])
    term.expect(PROMPT)
    time.sleep(1.0)  # input() prints the prompt before it reads: let it reach the read
    term.proc.send_signal(signal.SIGINT)
    rest = term.expect("Goodbye!")
    assert term.close() == 0
    assert "Traceback" not in rest and "Interrupted" not in rest and "Error" not in rest
