"""Who may read the sessions: the person holding the token ``nonoka ui`` printed.

Every request needs the token, in the URL (``?token=``, once: the answer sets a cookie
and drops it from the address bar) or in that cookie, so neither another local user nor
a web page open in the same browser can read sessions through the port. The ``Host``
header must name the address served (a DNS-rebinding page gets 403 too). Every answer
carries a content security policy that runs only the ui's own script and style files,
so even markup that slipped through escaping could not run.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, MutableMapping
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, urlencode

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'self'; "
       "frame-ancestors 'none'")
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
]
REFUSED = (b"403 Forbidden: open the address `nonoka ui` printed; it carries the access "
           b"token.\n")


def cookie_name(port: int) -> str:
    """Per port: cookies do not tell ports apart, and two servers may run at once."""
    return f"nonoka_ui_{port}"


class TokenGuard:
    """ASGI middleware: refuse requests without the token; add the security headers."""

    def __init__(self, app: ASGIApp, token: str, port: int,
                 hosts: frozenset[str] | None) -> None:
        self.app = app
        self.token = token.encode()
        self.cookie = cookie_name(port)
        self.hosts = hosts
        """Accepted ``Host`` values; ``None`` accepts any (bound to a public interface)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers", [])}
        if self.hosts is not None and headers.get("host", "").lower() not in self.hosts:
            await _plain(send, 403, b"403 Forbidden: unexpected Host header.\n")
            return
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"),
                          keep_blank_values=True)
        given = next((v for k, v in query if k == "token"), None)
        if given is not None and self._valid(given):
            await self._enter(scope, send, [(k, v) for k, v in query if k != "token"])
            return
        cookie = SimpleCookie()
        try:
            cookie.load(headers.get("cookie", ""))
        except Exception:  # a malformed header is just no cookie
            cookie = SimpleCookie()
        held = cookie.get(self.cookie)
        if held is None or not self._valid(held.value):
            await _plain(send, 403, REFUSED)
            return
        static = str(scope.get("path", "")).startswith("/static/")
        await self.app(scope, receive, _with_headers(send, static))

    def _valid(self, value: str) -> bool:
        return hmac.compare_digest(value.encode(), self.token)

    async def _enter(self, scope: Scope, send: Send, rest: list[tuple[str, str]]) -> None:
        """The token's first use: set the cookie and send the browser on without it."""
        target = str(scope.get("path", "/")) + (f"?{urlencode(rest)}" if rest else "")
        cookie = (f"{self.cookie}={self.token.decode()}; Path=/; HttpOnly; "
                  "SameSite=Strict").encode()
        await send({"type": "http.response.start", "status": 303,
                    "headers": [(b"location", target.encode()), (b"set-cookie", cookie),
                                (b"cache-control", b"no-store"), *HEADERS]})
        await send({"type": "http.response.body", "body": b""})


def _with_headers(send: Send, static: bool) -> Send:
    cache = b"private, max-age=600" if static else b"no-store"

    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            message["headers"] = [*message.get("headers", []), *HEADERS,
                                  (b"cache-control", cache)]
        await send(message)

    return wrapped


async def _plain(send: Send, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                            (b"content-length", str(len(body)).encode()),
                            (b"cache-control", b"no-store"), *HEADERS]})
    await send({"type": "http.response.body", "body": body})
