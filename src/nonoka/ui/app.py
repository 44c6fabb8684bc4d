"""The web application: routes, templates and the actions, over one ``UiData``.

Pages are rendered on the server (Jinja2, autoescaped); the page script only pages the
conversation, switches tabs, polls the session's revision and swaps in fresh fragments
rendered by the same templates, so there is one renderer and one place that escapes.
Rendering runs on a worker thread (``Deferred``), so a page of long messages never holds
the event loop that answers everyone else.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from nonoka.errors import NonokaError
from nonoka.ui import format as fmt
from nonoka.ui import pages, queries
from nonoka.ui.data import (
    IMAGE_TYPES,
    NotAvailableError,
    SessionRecord,
    UiData,
    describe,
    file_parts,
    is_digest,
)
from nonoka.ui.markdown import render as markdown
from nonoka.ui.queries import BadQuery
from nonoka.ui.security import ASGIApp, TokenGuard

HERE = Path(__file__).parent
LIVE_INTERVAL_MS = 1000
"""How often a session page asks whether the session changed."""


@dataclass(frozen=True)
class Settings:
    project: str
    database: str
    allow_actions: bool = False


def templates() -> Environment:
    env = Environment(loader=FileSystemLoader(HERE / "templates"),
                      autoescape=select_autoescape(default=True, default_for_string=True),
                      trim_blocks=True, lstrip_blocks=True)
    env.filters.update(tokens=fmt.tokens, money=fmt.money, ago=fmt.ago, stamp=fmt.stamp,
                       clock=fmt.clock, duration=fmt.duration, number=fmt.number,
                       markdown=markdown)
    env.globals.update(link=fmt.link, is_long=fmt.is_long, first_line=fmt.first_line,
                       pretty_json=fmt.pretty_json, file_parts=file_parts,
                       describe_file=describe, shown_image=shown_image)
    return env


class Deferred(Response):
    """A response made on a worker thread when it is sent: rendering is the slow part of
    an answer, and the event loop must stay free for the other requests meanwhile."""

    def __init__(self, make: Callable[[], Response]) -> None:
        super().__init__()
        self.make = make

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        response = await run_in_threadpool(self.make)
        await response(scope, receive, send)


def shown_image(part: dict[str, Any]) -> str | None:
    """The address the page shows a file part's image at (``/media/<digest>?type=<the
    part's media type>``), or ``None``: only a stored file (a reference, never inline
    bytes) of an image type the media route serves. The type is the part's own: the
    same bytes sent under two media types are one stored file, which keeps the first."""
    digest = part.get("media")
    kind = part.get("media_type")
    if is_digest(digest) and kind in IMAGE_TYPES:
        return f"/media/{digest}?{urlencode({'type': kind})}"
    return None


class Pages:
    """The endpoints; each reads through ``data`` and renders with ``env``."""

    def __init__(self, data: UiData, settings: Settings) -> None:
        self.data = data
        self.settings = settings
        self.env = templates()
        self.env.globals.update(settings=settings, live_interval=LIVE_INTERVAL_MS)

    def page(self, name: str, status: int = 200, *, started: float | None = None,
             **context: Any) -> Response:
        """Render ``name`` (on a worker thread); with ``started`` (a ``perf_counter``
        reading) the answer says how long the server took, in a ``Server-Timing`` header
        the browser exposes."""

        def make() -> Response:
            html = self.env.get_template(name).render(**context)
            headers = {}
            if started is not None:
                elapsed = (time.perf_counter() - started) * 1000
                headers["server-timing"] = f"render;dur={elapsed:.2f}"
            return HTMLResponse(html, status_code=status, headers=headers)

        return Deferred(make)

    def macro(self, template: str, name: str, *args: Any) -> str:
        return str(getattr(self.env.get_template(template).module, name)(*args))

    async def lookup(self, request: Request) -> SessionRecord | Response:
        """The session the path names (an unambiguous prefix is enough), or a 404 page."""
        ref = str(request.path_params["sid"])
        record = await self.data.get_session(ref)
        return record if record is not None else self.page("missing.html", 404, ref=ref)

    async def sessions(self, request: Request) -> Response:
        started = time.perf_counter()
        params = dict(request.query_params)
        try:
            view = await pages.list_view(self.data, params)
        except BadQuery as exc:
            return PlainTextResponse(f"{exc}\n", 400)
        return self.page("sessions.html", view=view, params=params, started=started)

    async def session(self, request: Request) -> Response:
        started = time.perf_counter()
        record = await self.lookup(request)
        if isinstance(record, Response):
            return record
        if record.session_id != request.path_params["sid"]:
            return RedirectResponse(f"/s/{record.session_id}", 303)
        view = await pages.session_view(self.data, record,
                                        actions=self.settings.allow_actions)
        return self.page("session.html", view=view, started=started)

    async def entries(self, request: Request) -> Response:
        """A page of the conversation, before or after a ``seq``, as rendered entries."""
        record = await self.lookup(request)
        if isinstance(record, Response):
            return record
        query = request.query_params
        try:  # ``after=-1``: everything, for a page that shows no entry yet
            before, after = queries.whole(query, "before"), queries.whole(query, "after",
                                                                           low=-1)
        except BadQuery as exc:
            return _answer(400, str(exc))
        chunk = await self.data.entries(
            record.session_id, before=before, after=after,
            limit=pages.FIRST_ENTRIES if after is None else pages.LIVE_ENTRIES)

        def make() -> Response:
            html = self.macro("_conversation.html", "entry_list", chunk.rows,
                              self.settings.allow_actions)
            return JSONResponse({"html": html, "first": chunk.first_seq,
                                 "last": chunk.last_seq, "total": chunk.total})

        return Deferred(make)

    async def media(self, request: Request) -> Response:
        """A stored image by its digest, as stored, with the media type the page asks
        for (``?type=``: the part's; else the stored one, the first entry's that sent the
        bytes): only a raster image type on the allow-list (``IMAGE_TYPES``; never SVG,
        HTML or anything a browser would run), inline under a name of its own, never
        sniffed (the guard's ``X-Content-Type-Options: nosniff`` and content security
        policy come with it, as with every answer)."""
        digest = str(request.path_params["digest"])
        file = await self.data.media(digest)
        kind = request.query_params.get("type") or (file.media_type if file else "")
        if file is None or kind not in IMAGE_TYPES:
            return Response("404 Not Found: no image is stored under this digest.\n",
                            status_code=404, media_type="text/plain")
        name = f"{digest.partition(':')[2][:16]}.{kind.partition('/')[2]}"
        return Response(file.data, media_type=kind,
                        headers={"content-disposition": f'inline; filename="{name}"'})

    async def revision(self, request: Request) -> Response:
        record = await self.lookup(request)
        if isinstance(record, Response):
            return record
        return JSONResponse({"revision": await self.data.revision(record.session_id)})

    async def parts(self, request: Request) -> Response:
        """Every section of a session page but the conversation, fresh."""
        record = await self.lookup(request)
        if isinstance(record, Response):
            return record
        view = await pages.session_view(self.data, record,
                                        actions=self.settings.allow_actions)

        def make() -> Response:
            module = self.env.get_template("_session.html").module
            fresh = {name: str(getattr(module, name)(view)) for name in PARTS}
            return JSONResponse({"revision": view.revision, **fresh})

        return Deferred(make)

    async def act(self, request: Request) -> Response:
        """Cancel, fork or export: only with ``--allow-actions``, only from the page."""
        if not self.settings.allow_actions:
            return _answer(403, "actions are off: start `nonoka ui --allow-actions` to "
                                "cancel, fork or export sessions")
        if request.headers.get("x-nonoka-action") != "1":
            return _answer(403, "actions are sent by the page's own script")
        record = await self.lookup(request)
        if isinstance(record, Response):
            return record
        try:
            return await self._act(request, str(request.path_params["action"]), record)
        except NotAvailableError as exc:
            return _answer(501, str(exc))
        except NonokaError as exc:
            return _answer(409, str(exc))

    async def _act(self, request: Request, action: str, record: SessionRecord) -> Response:
        sid = record.session_id
        if action == "cancel":
            done = await self.data.cancel_session(sid)
            return _answer(200, "session cancelled" if done else
                           "nothing to cancel: the session has already ended")
        if action == "fork":
            fields = await _json(request)
            entry = fields.get("entry")
            if (not isinstance(entry, int) or isinstance(entry, bool)
                    or not 0 <= entry <= queries.LARGEST):
                return _answer(400, "fork needs the entry to fork at")
            new = await self.data.fork_session(sid, entry)
            return _answer(200, "forked", location=f"/s/{new}")
        if action == "export":
            body = await self.data.export_session(sid)
            return Response(body, media_type="application/x-ndjson", headers={
                "content-disposition": f'attachment; filename="{sid}.jsonl"'})
        return _answer(404, f"unknown action {action!r}")


PARTS = ("header", "summary", "timeline_panel", "plan_panel", "usage_panel", "sidebar",
         "tab_counts", "cut_short")
"""The sections of ``_session.html`` a live page swaps in."""


def create_app(data: UiData, settings: Settings, *, token: str,
               hosts: frozenset[str] | None, code: str | None = None) -> ASGIApp:
    """The application, already wrapped in the token guard (``code``: the one-time code
    a browser opened by ``--open`` exchanges for the token)."""
    endpoints = Pages(data, settings)
    routes = [
        Route("/", endpoints.sessions),
        Route("/s/{sid}", endpoints.session),
        Route("/s/{sid}/entries", endpoints.entries),
        Route("/s/{sid}/revision", endpoints.revision),
        Route("/s/{sid}/parts", endpoints.parts),
        Route("/s/{sid}/{action}", endpoints.act, methods=["POST"]),
        Route("/media/{digest}", endpoints.media),
        Route("/favicon.ico", favicon),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    return TokenGuard(Starlette(routes=routes), token, hosts, code=code)


async def favicon(_request: Request) -> Response:
    return RedirectResponse("/static/favicon.svg", 301)


def _answer(status: int, message: str, location: str = "") -> Response:
    return JSONResponse({"ok": status < 300, "message": message, "location": location},
                        status_code=status)


async def _json(request: Request) -> dict[str, Any]:
    try:
        value = await request.json()
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
