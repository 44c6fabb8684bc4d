"""Who may read the sessions: the holder of the token ``nonoka ui`` printed.

A request shows the token as ``Authorization: Bearer <token>`` (the page's script sends
it with every call, and so can scripts) or in the address as ``?token=<token>`` (the
printed address: served as it is, the page then drops it from the address bar). No
cookie carries it: browsers send a host's cookies to every port of that host, so any
program listening on another local port would be handed the token by a link there. The
page keeps the token in ``localStorage``, which belongs to one origin (scheme, host and
port) and which no page from another port can read. A navigation has no header to carry
it (a link, a form, the back button), so it is answered with a small page without data
whose script fetches the real one with the header and shows it.

``--open`` gives the browser a one-time code instead of the token, through a page only
this user can read (``nonoka.ui.server.opener``), never on the browser's command line,
which every local user can read: the first visit with it, within ``CODE_SECONDS``, gets
the token handed to the page's script; after that the code is worthless.

The ``Host`` header must name the address served (a DNS-rebinding page gets 403 too).
Every answer carries a content security policy that runs only the ui's own script and
style files, so even markup that slipped through escaping could not run.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qsl, urlencode

from markupsafe import escape

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; "
       "img-src 'self' data: blob:; connect-src 'self'; font-src 'self'; base-uri 'none'; "
       "form-action 'self'; frame-ancestors 'none'")
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
]
CODE_SECONDS = 60.0
"""How long the one-time code of ``--open`` can be exchanged for the token."""
REFUSED = ("nonoka: this address needs the access token; open the address `nonoka ui` "
           "printed (it ends in ?token=...), or send the token as `Authorization: Bearer "
           "<token>`\n")
PUBLIC = ("/static/", "/favicon.ico")
"""The ui's own files, the same for everyone, served without the token: the page that
fetches a page with the header needs its script before it has the token."""
BOOT = """<!doctype html>
<html lang="en" data-boot>
<head>
<meta charset="utf-8">
<meta name="referrer" content="no-referrer">
{handed}<title>nonoka</title>
<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">
<link rel="stylesheet" href="/static/ui.css">
<script src="/static/ui.js" defer></script>
</head>
<body class="boot">
<main class="page"><p id="boot-message" class="boot-message">{message}</p></main>
</body>
</html>
"""
"""The answer to a navigation without the token: no data, only the page script, which
fetches the address again with the token it keeps (or was handed) and shows the page."""


class TokenGuard:
    """ASGI middleware: refuse requests without the token; add the security headers."""

    def __init__(self, app: ASGIApp, token: str, hosts: frozenset[str] | None, *,
                 code: str | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.app = app
        self.token = token
        self.hosts = hosts
        """Accepted ``Host`` values; ``None`` accepts any (bound to a public interface)."""
        self.code = code
        """The one-time code for ``--open``; ``None`` once used (or never made)."""
        self.clock = clock
        self.code_until = clock() + CODE_SECONDS

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers", [])}
        if self.hosts is not None and headers.get("host", "").lower() not in self.hosts:
            await _plain(send, 403, "nonoka: unexpected Host header; open the address "
                                    "`nonoka ui` printed\n")
            return
        path = str(scope.get("path", ""))
        if scope.get("method") in ("GET", "HEAD") and path.startswith(PUBLIC):
            await self.app(scope, receive, _with_headers(send, static=True))
            return
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"),
                          keep_blank_values=True)
        given = _bearer(headers.get("authorization", ""))
        if given is None:
            given = next((v for k, v in query if k == "token"), None)
        if given is not None and self._valid(given):
            if any(k == "token" for k, _ in query):  # the app never sees the token
                rest = [(k, v) for k, v in query if k != "token"]
                scope = {**scope, "query_string": urlencode(rest).encode("latin-1")}
            await self.app(scope, receive, _with_headers(send, static=False))
            return
        loading = scope.get("method") == "GET"
        code = next((v for k, v in query if k == "code"), None)
        if loading and given is None and code is not None and self._redeem(code):
            await _boot(send, 200, self.token)
        elif loading and _is_navigation(headers):
            await _boot(send, 403, None)
        else:
            await _plain(send, 403, REFUSED)

    def _valid(self, value: str) -> bool:
        return hmac.compare_digest(value.encode(), self.token.encode())

    def _redeem(self, value: str) -> bool:
        """Whether ``value`` is the one-time code, unused and in time; it is used now."""
        if self.code is None or self.clock() > self.code_until:
            return False
        if not hmac.compare_digest(value.encode(), self.code.encode()):
            return False
        self.code = None
        return True


def _bearer(value: str) -> str | None:
    scheme, _, credentials = value.strip().partition(" ")
    return credentials.strip() if scheme.lower() == "bearer" and credentials.strip() else None


def _is_navigation(headers: dict[str, str]) -> bool:
    """A browser loading a page (not a script's or a tool's call)."""
    mode = headers.get("sec-fetch-mode")
    if mode is not None:
        return mode == "navigate"
    return "text/html" in headers.get("accept", "")


def _with_headers(send: Send, *, static: bool) -> Send:
    cache = b"private, max-age=600" if static else b"no-store"

    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            message["headers"] = [*message.get("headers", []), *HEADERS,
                                  (b"cache-control", cache)]
        await send(message)

    return wrapped


async def _boot(send: Send, status: int, token: str | None) -> None:
    handed = f'<meta name="nonoka-token" content="{escape(token)}">\n' if token else ""
    body = BOOT.format(handed=handed, message=escape(REFUSED.strip())).encode()
    await _send(send, status, b"text/html; charset=utf-8", body)


async def _plain(send: Send, status: int, text: str) -> None:
    await _send(send, status, b"text/plain; charset=utf-8", text.encode())


async def _send(send: Send, status: int, kind: bytes, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", kind),
                            (b"content-length", str(len(body)).encode()),
                            (b"cache-control", b"no-store"), *HEADERS]})
    await send({"type": "http.response.body", "body": body})
