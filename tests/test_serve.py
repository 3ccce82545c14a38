"""``aura serve`` through the official OpenAI client against real servers on free ports: a tiny Hugging Face
folder on ``transformers serve``'s app and its GGUF on llama-cpp-python's server answer greedily as
``aura generate`` does (plain and streamed, chat and completions); an adapter is merged into a copy that
is gone when the server stops; off loopback a request without the token is refused; bad input exits 2
with a message in the user's language before anything loads.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import run_aura_here
from tests.evidence import importorskip, require_or_skip

openai = importorskip("openai", "serve")
importorskip("fastapi", "serve")
importorskip("llama_cpp", "llama-cpp")
importorskip("sse_starlette", "serve")
importorskip("starlette_context", "serve")
importorskip("pydantic_settings", "serve")

CHAT = "¿Qué tal, Íñigo? Cuéntame algo de Logroño."
PROMPT = "El niño y la cigüeña"
NEW = 16  # enough for llama-cpp-python's default repeat penalty (1.1) to change the answer


@pytest.fixture(scope="module")
def models(tiny_zoo, tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("serve") / "llama-f16.gguf"
    r = run_aura_here("export", "gguf", "--model", tiny_zoo["llama"], "--outfile", out, "--quant", "f16", "--no-verify")
    assert r.returncode == 0, r.stdout + r.stderr
    return {"hf": tiny_zoo["llama"], "gguf": out}


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _local_address() -> str | None:
    """An IPv4 address of this machine other than loopback (a UDP "connection" sends nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))
        except OSError:
            return None
        ip = s.getsockname()[0]
    return None if ip.startswith("127.") or ip == "0.0.0.0" else ip


@contextlib.contextmanager
def _server(tmp_path: Path, *args: str, host: str = "127.0.0.1"):
    """``aura serve ARGS`` in its own process until it answers on /v1/models (401 counts: it is up)."""
    port = _free_port(host)
    log = tmp_path / f"serve-{port}.log"
    env = {**os.environ, "AURA_LANG": "en", "AURA_PLAIN": "1", "PYTHONUNBUFFERED": "1"}
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "aura", "serve", *map(str, args), "--host", host, "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    url = f"http://{host}:{port}/v1"
    try:
        deadline = time.monotonic() + 300
        while True:
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            try:
                urllib.request.urlopen(url + "/models", timeout=5).close()
                break
            except urllib.error.HTTPError:
                break
            except OSError:
                time.sleep(0.3)
        yield url, log
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _generate(tmp_path: Path, *model_args, chat: bool) -> str:
    """``aura generate``'s greedy answer (the reference)."""
    prompts, out = tmp_path / "prompts.txt", tmp_path / "out.jsonl"
    prompts.write_text((CHAT if chat else PROMPT) + "\n", encoding="utf-8")
    r = run_aura_here(
        "generate",
        *model_args,
        "--prompts-file",
        prompts,
        "--output",
        out,
        "--temperature",
        "0",
        "--max-new-tokens",
        NEW,
        *(["--chat"] if chat else []),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(out.read_text(encoding="utf-8"))["output"]


def _streamed_chat(client, model: str) -> str:
    return "".join(
        c.choices[0].delta.content or ""
        for c in client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": CHAT}], max_tokens=NEW, temperature=0, stream=True
        )
        if c.choices
    )


def _check_answers(client, model: str, chat_ref: str, text_ref: str) -> None:
    messages = [{"role": "user", "content": CHAT}]
    common = dict(model=model, max_tokens=NEW, temperature=0)
    assert client.chat.completions.create(messages=messages, **common).choices[0].message.content == chat_ref
    pieces = [
        c.choices[0].delta.content or ""
        for c in client.chat.completions.create(messages=messages, stream=True, **common)
        if c.choices
    ]
    assert len([p for p in pieces if p]) > 1 and "".join(pieces) == chat_ref  # streamed, several chunks
    assert client.completions.create(prompt=PROMPT, **common).choices[0].text == text_ref
    pieces = [c.choices[0].text for c in client.completions.create(prompt=PROMPT, stream=True, **common) if c.choices]
    assert len([p for p in pieces if p]) > 1 and "".join(pieces) == text_ref


@pytest.mark.parametrize("kind", ["hf", "gguf"])
def test_served_model_answers_as_aura_generate(models, kind, tmp_path):
    model = models[kind]
    chat_ref = _generate(tmp_path, "--model", model, chat=True)
    text_ref = _generate(tmp_path, "--model", model, chat=False)
    with _server(tmp_path, model) as (url, log):
        client = openai.OpenAI(base_url=url, api_key="unused-on-loopback")
        assert [m.id for m in client.models.list().data] == [str(model)]
        assert ("engine transformers" if kind == "hf" else "engine llama.cpp") in log.read_text()
        _check_answers(client, str(model), chat_ref, text_ref)
        # two clients at once: each gets its whole answer (llama-cpp-python's server, by default, ends a
        # streamed answer as soon as another request waits)
        with ThreadPoolExecutor(2) as pool:
            both = list(pool.map(lambda _: _streamed_chat(client, str(model)), range(2)))
        assert both == [chat_ref, chat_ref]


def _without_template(model: Path, out: Path) -> Path:
    """A copy of the tiny model whose tokenizer has no chat template (as a base model from pretraining)."""
    import shutil

    from transformers import AutoTokenizer

    shutil.copytree(model, out)
    tok = AutoTokenizer.from_pretrained(out)
    tok.chat_template = None
    for name in ("chat_template.jinja", "chat_template.json", "tokenizer_config.json"):
        (out / name).unlink(missing_ok=True)
    tok.save_pretrained(out)
    assert not AutoTokenizer.from_pretrained(out).chat_template
    return out


@pytest.mark.parametrize("kind", ["hf", "gguf"])
def test_a_model_without_chat_template_gets_aura_chats_plain_format_not_a_500(models, tmp_path, kind):
    """Issue 51: transformers serve answered a bare HTTP 500 to a chat for a model without a chat template (and
    llama-cpp-python's server, for such a GGUF, a Llama 2 format of its own). Now the chat is the plain format of
    `aura chat` (Usuario:/Asistente:, cut at the next user turn): the answer, whole and streamed, equals
    `aura generate --chat`'s, with the same warning in the server's log and in each answer (an X-Aura-Warning
    header, and an aura_warning field when not streamed)."""
    from aura.inference.chat import M as M_CHAT

    plain = _without_template(models["hf"], tmp_path / "base-model")
    if kind == "gguf":
        r = run_aura_here(
            "export", "gguf", "--model", plain, "--outfile", tmp_path / "base.gguf", "--quant", "f16", "--no-verify"
        )
        assert r.returncode == 0, r.stdout + r.stderr
        plain = tmp_path / "base.gguf"
    chat_ref = _generate(tmp_path, "--model", plain, chat=True)
    assert chat_ref  # something to compare
    with _server(tmp_path, plain) as (url, log):
        client = openai.OpenAI(base_url=url, api_key="unused-on-loopback")
        messages = [{"role": "user", "content": CHAT}]
        raw = client.chat.completions.with_raw_response.create(
            model=str(plain), messages=messages, max_tokens=NEW, temperature=0
        )
        answer = raw.parse()
        assert answer.choices[0].message.content == chat_ref
        warning = "The model has no chat template: using a plain text format (Usuario:/Asistente:)."
        assert M_CHAT.table["no_template"][1] == warning  # the very warning of `aura chat`
        assert raw.headers["x-aura-warning"] == warning and answer.model_extra["aura_warning"] == warning
        assert _streamed_chat(client, str(plain)) == chat_ref
        assert warning in log.read_text()
        # the answer is cut at a stop string (the next user turn's, or the request's), whole and streamed
        stop = chat_ref[4:7]
        cut = chat_ref[: chat_ref.find(stop)]
        common = dict(model=str(plain), messages=messages, max_tokens=NEW, temperature=0, stop=[stop])
        whole = client.chat.completions.create(**common).choices[0]
        assert whole.message.content == cut and whole.finish_reason == "stop"
        assert (
            "".join(
                c.choices[0].delta.content or ""
                for c in client.chat.completions.create(stream=True, **common)
                if c.choices
            )
            == cut
        )


def test_adapter_merged_and_token_required_off_loopback(models, tiny_adapter, tmp_path):
    host = _local_address()
    if host is None:
        require_or_skip("ipv4", "this machine has no IPv4 address besides loopback")
    chat_ref = _generate(tmp_path, "--model", models["hf"], "--adapter", tiny_adapter, chat=True)
    with _server(tmp_path, models["hf"], "--adapter", tiny_adapter, "--token", "s3cret", host=host) as (url, log):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url + "/models", timeout=30)
        assert refused.value.code == 401
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=url, api_key="wrong").models.list()
        client = openai.OpenAI(base_url=url, api_key="s3cret")
        [served] = [m.id for m in client.models.list().data]
        assert "s3cret" in log.read_text()  # the token is printed for the user to hand out
        answer = (
            client.chat.completions.create(
                model=served, messages=[{"role": "user", "content": CHAT}], max_tokens=NEW, temperature=0
            )
            .choices[0]
            .message.content
        )
        assert answer == chat_ref
        assert (Path(served) / "aura_merge.json").is_file()  # aura merge's own output
    assert not Path(served).parent.exists()  # the temporary merged copy is gone with the server


def test_bad_input_exits_2_with_a_clear_message(models, tiny_adapter, tmp_path):
    def refused(*args, lang="en"):
        r = run_aura_here("serve", *map(str, args), env={"AURA_LANG": lang})
        assert r.returncode == 2, r.stdout + r.stderr
        assert "Traceback" not in r.stdout + r.stderr
        return r.stdout + r.stderr

    assert "does not exist" in refused(tmp_path / "nope")
    assert "No existe el modelo" in refused(tmp_path / "nope", lang="es")
    assert "--adapter cannot be used with a GGUF file" in refused(models["gguf"], "--adapter", tiny_adapter)
    assert "no se puede usar con un archivo GGUF" in refused(models["gguf"], "--adapter", tiny_adapter, lang="es")
    assert "does not read GGUF files" in refused(models["gguf"], "--engine", "transformers")
    assert "needs a .gguf file" in refused(models["hf"], "--engine", "llama.cpp")
    assert "--engine vllm needs vLLM installed" in refused(models["hf"], "--engine", "vllm")
    assert "between 1 and 65535" in refused(models["gguf"], "--port", "70000")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert f"Port {port} on 127.0.0.1 is already in use" in refused(models["gguf"], "--port", port)
        assert "ya está en uso" in refused(models["gguf"], "--port", port, lang="es")


def test_engine_choice_vllm_command_and_the_studios_token_rule(tiny_adapter):
    from aura.core.access import token_for
    from aura.serve.servers import choose_engine, vllm_command

    assert choose_engine("hf", "auto", vllm_installed=True, gpu=True) == "vllm"
    assert choose_engine("adapter", "auto", vllm_installed=True, gpu=False) == "transformers"
    assert choose_engine("hf", "auto", vllm_installed=False, gpu=True) == "transformers"
    assert choose_engine("gguf", "auto", vllm_installed=True, gpu=True) == "llama.cpp"
    # vLLM's CPU build: only when asked for by name (bench/vllm_cpu.py serves through it for real)
    assert choose_engine("hf", "vllm", vllm_installed=True, gpu=False, vllm_cpu=True) == "vllm"
    assert choose_engine("hf", "auto", vllm_installed=True, gpu=False, vllm_cpu=True) == "transformers"
    with pytest.raises(ValueError, match="vllm_unavailable"):
        choose_engine("hf", "vllm", vllm_installed=True, gpu=False)
    # vLLM is not in this environment (bench/vllm_cpu.sh gives it one): its command line, with the adapter
    # as a LoRA module
    argv = vllm_command(
        Path("base"), name="base", host="0.0.0.0", port=8000, dtype="auto", adapter=tiny_adapter, adapter_name="mine"
    )
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    rank = json.loads((tiny_adapter / "adapter_config.json").read_text())["r"]
    assert argv[argv.index("--max-lora-rank") + 1] == str(max(8, rank))
    assert argv[argv.index("--lora-modules") + 1] == f"mine={tiny_adapter}"
    # the rule aura studio applies: none on loopback, a generated one elsewhere, a given one kept
    from aura.serve.serve_command import ServeConfig

    assert ServeConfig(model="m").token is None and token_for("::1", None) is None
    assert len(ServeConfig(model="m", host="0.0.0.0").token) >= 24
    assert ServeConfig(model="m", host="192.168.1.5", token="t").token == "t"
