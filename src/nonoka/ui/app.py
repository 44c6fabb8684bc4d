"""The web application: routes, templates and the actions, over one ``UiData``.

Pages are rendered on the server (Jinja2, autoescaped); the page script only pages the
conversation, switches tabs, polls the session's revision and swaps in fresh fragments
rendered by the same templates, so there is one renderer and one place that escapes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
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
from nonoka.ui import pages
from nonoka.ui.data import NotAvailableError, UiData
from nonoka.ui.markdown import render as markdown
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
                       pretty_json=fmt.pretty_json)
    return env


def create_app(data: UiData, settings: Settings, *, token: str, port: int,
               hosts: frozenset[str] | None) -> ASGIApp:
    """The application, already wrapped in the token guard."""
    env = templates()
    env.globals.update(settings=settings, live_interval=LIVE_INTERVAL_MS)

    def page(name: str, status: int = 200, **context: Any) -> HTMLResponse:
        return HTMLResponse(env.get_template(name).render(**context), status_code=status)

    def fragment(name: str, macro: str, *args: Any, **kwargs: Any) -> str:
        return str(getattr(env.get_template(name).module, macro)(*args, **kwargs))

    async def sessions(request: Request) -> Response:
        view = await pages.list_view(data, dict(request.query_params))
        return page("sessions.html", view=view, params=dict(request.query_params))

    async def find(request: Request) -> Any:
        ref = str(request.path_params["sid"])
        record = await data.get_session(ref)
        if record is None:
            return page("missing.html", 404, ref=ref)
        return record

    async def session(request: Request) -> Response:
        record = await find(request)
        if isinstance(record, Response):
            return record
        if record.session_id != request.path_params["sid"]:
            return RedirectResponse(f"/s/{record.session_id}", 303)
        view = await pages.session_view(data, record, actions=settings.allow_actions)
        notice = request.query_params.get("notice", "")
        return page("session.html", view=view, notice=notice)

    async def entries(request: Request) -> Response:
        record = await find(request)
        if isinstance(record, Response):
            return record
        before, after = _int(request.query_params.get("before")), _int(
            request.query_params.get("after"))
        chunk = await data.entries(record.session_id, before=before, after=after,
                                   limit=pages.FIRST_ENTRIES if after is None else 500)
        html = fragment("_conversation.html", "entry_list", chunk.rows, settings.allow_actions)
        return JSONResponse({"html": html, "first": chunk.first_seq, "last": chunk.last_seq,
                             "total": chunk.total})

    async def revision(request: Request) -> Response:
        record = await find(request)
        if isinstance(record, Response):
            return record
        return JSONResponse({"revision": await data.revision(record.session_id)})

    async def parts(request: Request) -> Response:
        """Every section of a session page, fresh, for a page that saw a change."""
        record = await find(request)
        if isinstance(record, Response):
            return record
        view = await pages.session_view(data, record, actions=settings.allow_actions)
        module = env.get_template("_session.html").module
        return JSONResponse({
            "revision": view.revision,
            **{name: str(getattr(module, name)(view)) for name in
               ("header", "summary", "timeline_panel", "plan_panel", "usage_panel",
                "sidebar", "tab_counts")},
        })

    async def act(request: Request) -> Response:
        if not settings.allow_actions:
            return _answer(request, 403, "actions are off: start `nonoka ui --allow-actions` "
                                         "to cancel, fork or export sessions")
        if request.headers.get("x-nonoka-action") != "1":
            return _answer(request, 403, "actions are sent by the page's own script")
        record = await find(request)
        if isinstance(record, Response):
            return record
        action = request.path_params["action"]
        sid = record.session_id
        try:
            if action == "cancel":
                done = await data.cancel_session(sid)
                return _answer(request, 200, "session cancelled" if done else
                               "nothing to cancel: the session has already ended")
            if action == "fork":
                form = await request.form()
                new = await data.fork_session(sid, _int(str(form.get("entry", ""))) or 0)
                return _answer(request, 200, "forked", location=f"/s/{new}")
            if action == "export":
                body = await data.export_session(sid)
                return Response(body, media_type="application/json", headers={
                    "content-disposition": f'attachment; filename="{sid}.json"'})
        except NotAvailableError as exc:
            return _answer(request, 501, str(exc))
        except NonokaError as exc:
            return _answer(request, 409, str(exc))
        return _answer(request, 404, f"unknown action {action!r}")

    routes = [
        Route("/", sessions),
        Route("/s/{sid}", session),
        Route("/s/{sid}/entries", entries),
        Route("/s/{sid}/revision", revision),
        Route("/s/{sid}/parts", parts),
        Route("/s/{sid}/{action}", act, methods=["POST"]),
        Route("/favicon.ico", favicon),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    app = Starlette(routes=routes, exception_handlers={
        404: lambda _r, _e: PlainTextResponse("404 Not Found\n", 404)})
    return TokenGuard(app, token, port, hosts)


async def favicon(_request: Request) -> Response:
    return RedirectResponse("/static/favicon.svg", 301)


def _answer(request: Request, status: int, message: str, location: str = "") -> Response:
    return JSONResponse({"ok": status < 300, "message": message, "location": location},
                        status_code=status)


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text not in (None, "") else None
    except ValueError:
        return None
