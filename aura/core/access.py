"""Who may talk to a server Aura starts (``aura studio``, ``aura serve``): the one token rule.

On a loopback address (127.0.0.1, ::1, localhost) only this machine's users can connect: no token. On
any other address every request must carry the token, as ``Authorization: Bearer TOKEN`` (what the
OpenAI clients send as their API key), ``?token=TOKEN`` or the ``aura_token`` cookie; when none was
given, one is generated. Both servers take the token from ``token_for`` and check it with
``token_matches``, so the rule cannot drift between them. ``TokenGuard`` is the check as plain ASGI
middleware (no web framework needed) for apps Aura does not write itself.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import secrets
from http.cookies import CookieError, SimpleCookie
from urllib.parse import parse_qs

TOKEN_COOKIE = "aura_token"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def token_for(host: str, token: str | None) -> str | None:
    """The token a server on ``host`` requires: the one given, else a new one off loopback, else none."""
    if token is None and not is_loopback(host):
        return secrets.token_urlsafe(24)
    return token


def given_token(*, query_token: str | None, cookie_token: str | None, authorization: str | None) -> str:
    """The token a request carries: the Bearer header wins over ``?token=``, which wins over the cookie."""
    auth = authorization or ""
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return query_token or cookie_token or ""


def token_matches(given: str, token: str | None) -> bool:
    """Whether a request carrying ``given`` may pass a server requiring ``token`` (None: no token needed)."""
    return token is None or hmac.compare_digest(given.encode(), token.encode())


class TokenGuard:
    """ASGI middleware: every HTTP request to ``app`` carries ``token`` (when set), else 401 with an
    OpenAI-style error body. Lifespan and other scopes pass through untouched."""

    def __init__(self, app, token: str | None):
        self.app, self.token = app, token

    async def __call__(self, scope, receive, send):
        if self.token is None or scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        cookie = None
        try:
            jar = SimpleCookie(headers.get("cookie", ""))
            cookie = jar[TOKEN_COOKIE].value if TOKEN_COOKIE in jar else None
        except CookieError:
            pass
        given = given_token(
            query_token=(query.get("token") or [None])[0],
            cookie_token=cookie,
            authorization=headers.get("authorization"),
        )
        if token_matches(given, self.token):
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket":
            return await send({"type": "websocket.close", "code": 1008})
        body = json.dumps(
            {"error": {"message": "token required", "type": "invalid_request_error", "code": "invalid_api_key"}}
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", b"Bearer"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
