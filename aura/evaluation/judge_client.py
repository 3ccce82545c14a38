"""The judge's side of ``aura eval --judge URL``: plain HTTP to any OpenAI-compatible server.

``aura serve``, vLLM, llama.cpp's server and hosted APIs all answer ``GET /v1/models`` and
``POST /v1/chat/completions``; nothing else is asked of them, so the standard library's ``urllib`` is
enough (no client library to install). The key comes from the environment only (``KEY_VARS``: the first
one set), never from a flag or a file: it would end up in shell history, the results or a pipeline's YAML.
``aura serve``'s token is such a key.

Failures of the transport (connection refused, timeout, HTTP 429 or 5xx) are retried ``attempts`` times in
all, waiting ``backoff``, then twice that, ... between them; then the run stops with a message that names
the URL and what to check. HTTP 401/403 names the key's variables; a model the server does not have lists
the names ``/v1/models`` gives. Nothing here retries a reply that arrived: reading it is the caller's job.
"""

from __future__ import annotations

import json
import os
import socket
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from aura.core.errors import AuraError
from aura.core.i18n import Messages

KEY_VARS = ("AURA_JUDGE_API_KEY", "OPENAI_API_KEY")

M = Messages(
    "judgeclient",
    {
        "bad_url": (
            "--judge {url} no es una URL http ni https: indica la dirección del servidor compatible con OpenAI, "
            "p. ej. http://127.0.0.1:8000/v1 (aura serve, vLLM, llama.cpp) o https://api.openai.com/v1.",
            "--judge {url} is not an http or https URL: give the OpenAI-compatible server's address, e.g. "
            "http://127.0.0.1:8000/v1 (aura serve, vLLM, llama.cpp) or https://api.openai.com/v1.",
        ),
        "down": (
            "El juez {url} no responde tras {n:intento|intentos} ({error}). Comprueba que el servidor está "
            "en marcha y escucha en esa dirección y puerto (p. ej. aura serve MODELO --port 8000 y "
            "--judge http://127.0.0.1:8000/v1), y que la URL termina en la raíz de su API (/v1).",
            "The judge {url} does not answer after {n:attempt|attempts} ({error}). Check that the server is "
            "running and listens on that address and port (e.g. aura serve MODEL --port 8000 and --judge "
            "http://127.0.0.1:8000/v1), and that the URL ends at its API's root (/v1).",
        ),
        "auth": (
            "El juez {url} rechaza la petición (HTTP {status}): hace falta una clave válida. Ponla en la "
            "variable de entorno {var} (o {other}); con aura serve, es el token que imprime al arrancar. "
            "Ahora: {state}.",
            "The request to the judge {url} was refused (HTTP {status}): a valid key is needed. Put it in the "
            "environment variable {var} (or {other}); with aura serve, it is the token it prints when it "
            "starts. Now: {state}.",
        ),
        "key_set": ("{var} está definida", "{var} is set"),
        "key_unset": ("ninguna está definida", "neither is set"),
        "no_model": (
            "El juez {url} no tiene el modelo {model}. Modelos que ofrece: {names}. Elige uno con --judge-model.",
            "The judge {url} has no model {model}. Models it offers: {names}. Pick one with --judge-model.",
        ),
        "no_model_unknown": (
            "El juez {url} no acepta el modelo {model} (HTTP {status}: {body}) y no lista sus modelos en "
            "/models. Comprueba el nombre de --judge-model en la documentación del servidor.",
            "The judge {url} does not accept model {model} (HTTP {status}: {body}) and does not list its "
            "models at /models. Check the --judge-model name in the server's documentation.",
        ),
        "which_model": (
            "El juez {url} ofrece varios modelos ({names}): elige uno con --judge-model.",
            "Several models are offered by the judge {url} ({names}): pick one with --judge-model.",
        ),
        "need_model": (
            "El juez {url} no lista sus modelos en /models: indica cuál usar con --judge-model.",
            "The judge {url} does not list its models at /models: say which one to use with --judge-model.",
        ),
        "http": (
            "El juez {url} respondió HTTP {status}: {body}",
            "The judge {url} answered HTTP {status}: {body}",
        ),
        "bad_reply": (
            "El juez {url} devolvió algo que no es una respuesta de chat de OpenAI ({error}): {body}",
            "The judge {url} returned something that is not an OpenAI chat reply ({error}): {body}",
        ),
    },
)


def api_root(url: str) -> str:
    """The API's root: ``http://h:p`` -> ``http://h:p/v1``; a URL with a path keeps it (``.../v1``,
    a hosted ``.../openai``), less a trailing ``/chat/completions``."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise AuraError(M("bad_url", url=url))
    path = parts.path.rstrip("/")
    for tail in ("/chat/completions", "/models"):
        if path.endswith(tail):
            path = path[: -len(tail)]
    return f"{parts.scheme}://{parts.netloc}{path or '/v1'}"


def api_key() -> tuple[str | None, str | None]:
    """(key, the variable it came from), or (None, None)."""
    for var in KEY_VARS:
        if os.environ.get(var):
            return os.environ[var], var
    return None, None


class _Transient(Exception):
    """A failure worth another attempt (no connection, timeout, 429, 5xx)."""


@dataclass
class JudgeClient:
    url: str  # the API root (api_root)
    model: str = ""
    timeout: float = 120.0
    attempts: int = 3
    backoff: float = 1.0
    requests: int = field(default=0, init=False)

    def _send(self, path: str, body: dict | None) -> tuple[int, bytes]:
        key, _ = api_key()
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        data = None if body is None else json.dumps(body, ensure_ascii=False).encode("utf-8")
        req = urllib.request.Request(
            self.url + path, data=data, headers=headers, method="GET" if body is None else "POST"
        )
        self.requests += 1
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as e:
            payload = e.read()
            if e.code == 429 or e.code >= 500:
                raise _Transient(f"HTTP {e.code}") from None
            return e.code, payload
        except (urllib.error.URLError, TimeoutError, socket.timeout, ConnectionError) as e:
            reason = getattr(e, "reason", e)
            raise _Transient(str(reason) or type(reason).__name__) from None

    def request(self, path: str, body: dict | None = None) -> tuple[int, bytes]:
        """(status, body) of a request that got an answer; transient failures retried with backoff."""
        error = ""
        for i in range(self.attempts):
            try:
                status, payload = self._send(path, body)
            except _Transient as e:
                error = str(e)
                if i + 1 < self.attempts:
                    time.sleep(self.backoff * 2**i)
                continue
            if status in (401, 403):
                _, var = api_key()
                state = M("key_set", var=var) if var else M("key_unset")
                raise AuraError(M("auth", url=self.url, status=status, var=KEY_VARS[0], other=KEY_VARS[1], state=state))
            return status, payload
        raise AuraError(M("down", url=self.url, error=error, n=self.attempts))

    def model_names(self) -> list[str] | None:
        """The ids ``/models`` lists, or None when the server gives no such list."""
        _, payload = self.request("/models")
        try:
            data = json.loads(payload)["data"]
            return [str(m["id"]) for m in data]
        except (ValueError, KeyError, TypeError):  # a server without the list (or not at this path)
            return None

    def choose_model(self) -> str:
        """Check ``self.model`` against the server's list (or pick its only model); the name to ask for."""
        names = self.model_names()
        if names is None:
            if not self.model:
                raise AuraError(M("need_model", url=self.url))
        elif not self.model:
            if len(names) != 1:
                raise AuraError(M("which_model", url=self.url, names=", ".join(names) or "–"))
            self.model = names[0]
        elif self.model not in names:
            raise AuraError(M("no_model", url=self.url, model=self.model, names=", ".join(names) or "–"))
        return self.model

    def chat(self, messages: list[dict], *, max_tokens: int) -> str:
        """The judge's reply (greedy) to ``messages``."""
        body = {"model": self.model, "messages": messages, "temperature": 0, "max_tokens": max_tokens}
        status, payload = self.request("/chat/completions", body)
        text = payload.decode("utf-8", "replace")[:300]
        if status in (400, 404):  # a model the server lacks: name the ones it has when it lists them
            names = self.model_names()
            if names is not None and self.model not in names:
                raise AuraError(M("no_model", url=self.url, model=self.model, names=", ".join(names) or "–"))
            if names is None and "model" in text.lower():
                raise AuraError(M("no_model_unknown", url=self.url, model=self.model, status=status, body=text))
        if status != 200:
            raise AuraError(M("http", url=self.url, status=status, body=text))
        try:
            content = json.loads(payload)["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError) as e:
            raise AuraError(M("bad_reply", url=self.url, error=type(e).__name__, body=text)) from None
        return content if isinstance(content, str) else ""
