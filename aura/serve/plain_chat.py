"""A model without a chat template, served: ``/v1/chat/completions`` answered as ``aura chat`` answers it.

``aura chat`` writes such a chat as plain text (``aura.inference.backends.plain_chat_prompt``: a system line, then
``Usuario:``/``Asistente:`` turns) and cuts the answer at the next user turn (``PLAIN_STOPS``), with a warning.
The engines would answer a 500 (transformers serve cannot apply a template that is not there). ``PlainChat``
sits in front of the engine: a chat request becomes that prompt on the engine's own ``/v1/completions``, and
its answer (whole or streamed) comes back in the chat format, cut at the same stop, with the warning in the
``X-Aura-Warning`` header and, not streamed, in an ``aura_warning`` field of the body.
"""

from __future__ import annotations

import json
from urllib.parse import quote

from aura.serve.servers import forward_body, read_body

CHAT_PATH, COMPLETIONS_PATH = "/v1/chat/completions", "/v1/completions"
WARNING_HEADER = b"x-aura-warning"
# the fields of a chat request a completion request also has (an engine may refuse any other: transformers
# serve answers 422); max_completion_tokens is the chat API's newer name of max_tokens
_SHARED = (
    "model",
    "max_tokens",
    "temperature",
    "top_p",
    "seed",
    "frequency_penalty",
    "presence_penalty",
    "logit_bias",
    "user",
    "stream",
    "generation_config",
)


def _text(content) -> str:
    """A message's text: a string, or the text parts of an OpenAI content list."""
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return "" if content is None else str(content)


def _cut(text: str, stops: list[str]) -> tuple[str, bool]:
    """``text`` up to the first stop string, and whether one was found."""
    at = min((i for i in (text.find(s) for s in stops) if i >= 0), default=-1)
    return (text, False) if at < 0 else (text[:at], True)


class PlainChat:
    """ASGI middleware: chat requests to ``app`` as plain-text completions (see the module's docstring)."""

    def __init__(self, app, *, warning: str):
        from aura.inference.backends import PLAIN_STOPS, plain_chat_prompt

        self.app, self.warning = app, warning
        self.prompt, self.stops = plain_chat_prompt, list(PLAIN_STOPS)
        # a header is Latin-1: Spanish letters pass, anything else is percent-encoded
        self.header = (
            warning.encode("latin-1", errors="ignore")
            if all(ord(c) < 256 for c in warning)
            else quote(warning, safe=" :;,.()/¿?¡!").encode("latin-1", errors="ignore")
        )

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != CHAT_PATH:
            return await self.app(scope, receive, send)
        body = await read_body(receive)
        if body is None:  # the client went away
            return
        try:
            data = json.loads(body)
        except ValueError:
            data = None
        if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
            return await forward_body(self.app, scope, receive, send, body, CHAT_PATH)  # the engine's own answer
        messages = [
            {"role": str(m.get("role") or "user"), "content": _text(m.get("content"))}
            for m in data["messages"]
            if isinstance(m, dict)
        ]
        asked = data.get("stop") or []
        stops = [*self.stops, *([asked] if isinstance(asked, str) else [str(s) for s in asked])]
        request = {k: v for k, v in data.items() if k in _SHARED}
        if data.get("max_completion_tokens") is not None and data.get("max_tokens") is None:
            request["max_tokens"] = data["max_completion_tokens"]
        request.update(prompt=self.prompt(messages), stop=stops)
        convert = (
            _StreamedChat(send, stops, self.header)
            if data.get("stream")
            else _WholeChat(send, stops, self.header, self.warning)
        )
        await forward_body(self.app, scope, receive, convert.send, json.dumps(request).encode(), COMPLETIONS_PATH)


class _WholeChat:
    """A completion answered whole -> a ``chat.completion`` (with the warning); an error passes as it is."""

    def __init__(self, send, stops: list[str], header: bytes, warning: str):
        self.out, self.stops, self.header, self.warning = send, stops, header, warning
        self.start: dict | None = None
        self.body: list[bytes] = []

    async def send(self, message) -> None:
        if message["type"] == "http.response.start":
            self.start = message
            return
        if message["type"] != "http.response.body":
            return await self.out(message)
        self.body.append(message.get("body", b""))
        if message.get("more_body"):
            return
        body = b"".join(self.body)
        if self.start["status"] == 200:
            body = json.dumps(self._chat(json.loads(body))).encode()
        headers = [(k, v) for k, v in self.start.get("headers", []) if k.lower() != b"content-length"]
        headers += [(b"content-length", str(len(body)).encode()), (WARNING_HEADER, self.header)]
        await self.out({**self.start, "headers": headers})
        await self.out({"type": "http.response.body", "body": body, "more_body": False})

    def _chat(self, c: dict) -> dict:
        choices = []
        for ch in c.get("choices") or []:
            text, stopped = _cut(ch.get("text") or "", self.stops)
            choices.append(
                {
                    "index": ch.get("index", 0),
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop" if stopped else ch.get("finish_reason"),
                    "logprobs": None,
                }
            )
        return {
            "id": c.get("id"),
            "object": "chat.completion",
            "created": c.get("created"),
            "model": c.get("model"),
            "choices": choices,
            "usage": c.get("usage"),
            "aura_warning": self.warning,
        }


class _StreamedChat:
    """A streamed completion -> ``chat.completion.chunk`` events, cut at the first stop string (text that could be
    the start of one is held back until it is not), ended by a chunk with the finish reason and ``[DONE]``."""

    def __init__(self, send, stops: list[str], header: bytes):
        self.out, self.stops, self.header = send, stops, header
        self.hold = max(len(s) for s in stops) - 1
        self.buffer, self.text, self.sent = b"", "", 0  # raw SSE bytes not yet parsed; the answer; chars sent
        self.ok, self.done, self.first = True, False, True
        self.meta: dict = {}

    async def send(self, message) -> None:
        if message["type"] == "http.response.start":
            self.ok = message["status"] == 200
            headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"content-length"]
            return await self.out({**message, "headers": [*headers, (WARNING_HEADER, self.header)]})
        if message["type"] != "http.response.body" or not self.ok:
            return await self.out(message)
        more = bool(message.get("more_body"))
        self.buffer = (self.buffer + message.get("body", b"")).replace(b"\r\n", b"\n")  # sse-starlette: CRLF
        events = self.buffer.split(b"\n\n")
        self.buffer = events.pop()
        out = b"".join(self._event(e) for e in events)
        if not more and not self.done:  # the engine ended without a finish reason: what is held back, the end
            out += self._end("stop")
        if out or not more:
            await self.out({"type": "http.response.body", "body": out, "more_body": more})

    def _event(self, event: bytes) -> bytes:
        data = b"\n".join(line[5:].strip() for line in event.splitlines() if line.startswith(b"data:"))
        if self.done or not data:
            return b""
        if data == b"[DONE]":
            return self._end("stop")
        c = json.loads(data)
        if not isinstance(c, dict) or "error" in c:  # the engine's error, passed on as it came
            self.done = True
            return event + b"\n\n"
        self.meta = {"id": c.get("id"), "created": c.get("created"), "model": c.get("model")}
        choice = (c.get("choices") or [{}])[0]
        self.text += choice.get("text") or ""
        cut, stopped = _cut(self.text, self.stops)
        if stopped:
            self.text = cut
            return self._end("stop")
        if choice.get("finish_reason"):
            return self._end(choice["finish_reason"])
        return self._chunk(self.text[self.sent : max(self.sent, len(self.text) - self.hold)])

    def _end(self, finish: str) -> bytes:
        """The rest of the answer (cut at a stop string), a chunk with the finish reason, ``[DONE]``."""
        self.text, stopped = _cut(self.text, self.stops)
        self.done = True
        return (
            self._chunk(self.text[self.sent :])
            + self._chunk("", finish="stop" if stopped else finish)
            + b"data: [DONE]\n\n"
        )

    def _chunk(self, piece: str, *, finish: str | None = None) -> bytes:
        delta = {"content": piece} if piece else {}
        if self.first and (piece or finish):
            delta, self.first = {"role": "assistant", **delta}, False
        self.sent += len(piece)
        if not piece and finish is None:
            return b""
        chunk = {
            **self.meta,
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        }
        return b"data: " + json.dumps(chunk).encode() + b"\n\n"
