"""The HTTP routes, the key check, and server-sent events.

A stream starts only once its first event is ready: a request that fails before
anything happened (an unknown ``previous_response_id``, a model that refuses the call
at once) gets an ordinary error response with its status, which is what clients retry
on or match. The turn runs in a task of its own, so a client that goes away mid-stream
does not cut the turn short: its answer is stored, and ``GET`` returns it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from nonoka.serve.chat import ChatCompletions
from nonoka.serve.conversations import Conversations
from nonoka.serve.errors import ApiError, api_error, error_body, invalid, not_available
from nonoka.serve.file_inputs import attach
from nonoka.serve.files import Files
from nonoka.serve.included import query_include
from nonoka.serve.journal import Live
from nonoka.serve.keys import Gate, set_owner
from nonoka.serve.messages import Messages, anthropic_error, count_tokens
from nonoka.serve.model import Models
from nonoka.serve.responses import Responses, Retry, retry_of
from nonoka.store.files import MemoryFiles

SESSION_ID_HEADER = "x-nonoka-session-id"
"""The header a chat completion names the nonoka session it ran in with."""
_DONE = object()
"""The end of a stream's queue."""

Emit = Callable[[dict[str, Any]], None]
Work = Callable[[Emit], Awaitable[Any]]


class Served:
    """What the routes serve: the APIs, and the turns still running."""

    def __init__(self, responses: Responses, chat: ChatCompletions, models: Models,
                 files: Files | None = None) -> None:
        self.responses = responses
        self.chat = chat
        self.models = models
        self.files = files if files is not None else Files(MemoryFiles())
        self.tasks: set[asyncio.Task[None]] = set()
        """Turns whose stream a client may have left: kept until they end."""


def create_app(served: Served, *, key: str | None = None,
               hosts: frozenset[str] | None = None, gate: Gate | None = None) -> ASGIApp:
    """The ASGI app; ``gate``: who may send requests, and as which owner
    (``nonoka.serve.keys``; ``key``: the server's own key, when no gate is given);
    ``hosts``: the ``Host`` values accepted (``None``: any)."""
    app = Starlette(routes=[_answered(route) for route in _Routes(served).routes()],
                    exception_handlers={404: _no_route, 405: _no_route})
    return KeyGuard(app, gate if gate is not None else Gate(None, key), hosts)


class _Routes:
    """One method per endpoint."""

    def __init__(self, served: Served) -> None:
        self.served = served

    def routes(self) -> list[Route]:
        later = _later
        return [
            Route("/v1/responses", self.create_response, methods=["POST"]),
            Route("/v1/responses/compact", self.compact, methods=["POST"]),
            Route("/v1/responses/input_tokens", later("/v1/responses/input_tokens"),
                  methods=["POST"]),
            Route("/v1/responses/{response_id}", self.get_response, methods=["GET"]),
            Route("/v1/responses/{response_id}", self.delete_response, methods=["DELETE"]),
            Route("/v1/responses/{response_id}/input_items", self.input_items,
                  methods=["GET"]),
            Route("/v1/responses/{response_id}/cancel", self.cancel, methods=["POST"]),
            Route("/v1/conversations", self.create_conversation, methods=["POST"]),
            Route("/v1/conversations/{cid}", self.get_conversation, methods=["GET"]),
            Route("/v1/conversations/{cid}", self.update_conversation, methods=["POST"]),
            Route("/v1/conversations/{cid}", self.delete_conversation, methods=["DELETE"]),
            Route("/v1/conversations/{cid}/items", self.add_items, methods=["POST"]),
            Route("/v1/conversations/{cid}/items", self.list_items, methods=["GET"]),
            Route("/v1/conversations/{cid}/items/{item_id}", self.get_item, methods=["GET"]),
            Route("/v1/conversations/{cid}/items/{item_id}", self.delete_item,
                  methods=["DELETE"]),
            Route("/v1/chat/completions", self.chat_completions, methods=["POST"]),
            Route("/v1/messages", self.messages, methods=["POST"]),
            Route("/v1/messages/count_tokens", self.count_tokens, methods=["POST"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/v1/models/{model:path}", self.model, methods=["GET"]),
            Route("/v1/files", self.upload_file, methods=["POST"]),
            Route("/v1/files", self.list_files, methods=["GET"]),
            Route("/v1/files/{file_id}", self.get_file, methods=["GET"]),
            Route("/v1/files/{file_id}", self.delete_file, methods=["DELETE"]),
            Route("/v1/files/{file_id}/content", self.file_content, methods=["GET"]),
        ]

    async def _input(self, request: Request) -> Any:
        """The JSON body, with the uploaded files it names by ``file_id`` loaded."""
        body = await _json(request)
        await attach(self.served.files.store, body, await request.body())  # kept by Starlette
        return body

    async def create_response(self, request: Request) -> Response:
        body = await self._input(request)
        responses = self.served.responses
        retry = retry_of(body, {k.lower(): v for k, v in request.headers.items()})
        if isinstance(body, dict) and body.get("background") is True:
            made, live = await _background(self.served, body, retry)
            if body.get("stream") is not True:
                return JSONResponse({**made, "status": "queued"})

            async def events() -> Any:  # a client that leaves can attach again
                async for event in live.follow(-1):
                    yield _sse_event(event)

            return StreamingResponse(events(), media_type="text/event-stream",
                                     headers={"cache-control": "no-cache"})
        if isinstance(body, dict) and body.get("stream") is True:
            return await _stream(self.served,
                                 lambda emit: responses.create(body, emit, retry),
                                 _sse_event, None)
        return JSONResponse(await responses.create(body, retry=retry))

    async def cancel(self, request: Request) -> Response:
        return JSONResponse(await self.served.responses.cancel(
            request.path_params["response_id"]))

    async def compact(self, request: Request) -> Response:
        body = await self._input(request)
        retry = retry_of(body, {k.lower(): v for k, v in request.headers.items()})
        return JSONResponse(await self.served.responses.compact(body, retry))

    async def get_response(self, request: Request) -> Response:
        if request.query_params.get("stream") == "true":
            events = await self.served.responses.reattach(
                request.path_params["response_id"], request.query_params)

            async def body() -> Any:
                async for event in events:
                    yield _sse_event(event)

            return StreamingResponse(body(), media_type="text/event-stream",
                                     headers={"cache-control": "no-cache"})
        return JSONResponse(await self.served.responses.get(
            request.path_params["response_id"], query_include(request.query_params)))

    async def delete_response(self, request: Request) -> Response:
        return JSONResponse(await self.served.responses.delete(
            request.path_params["response_id"]))

    async def input_items(self, request: Request) -> Response:
        return JSONResponse(await self.served.responses.input_items(
            request.path_params["response_id"], request.query_params))

    async def create_conversation(self, request: Request) -> Response:
        return JSONResponse(await self._conversations.create(await self._input(request)))

    async def get_conversation(self, request: Request) -> Response:
        return JSONResponse(await self._conversations.get(request.path_params["cid"]))

    async def update_conversation(self, request: Request) -> Response:
        return JSONResponse(await self._conversations.update(request.path_params["cid"],
                                                             await _json(request)))

    async def delete_conversation(self, request: Request) -> Response:
        return JSONResponse(await self._conversations.delete(request.path_params["cid"]))

    async def add_items(self, request: Request) -> Response:
        return JSONResponse(await self._conversations.add_items(request.path_params["cid"],
                                                                await self._input(request)))

    async def list_items(self, request: Request) -> Response:
        return JSONResponse(await self._conversations.list_items(
            request.path_params["cid"], request.query_params))

    async def get_item(self, request: Request) -> Response:
        return JSONResponse(await self._conversations.get_item(
            request.path_params["cid"], request.path_params["item_id"]))

    async def delete_item(self, request: Request) -> Response:
        return JSONResponse(await self._conversations.delete_item(
            request.path_params["cid"], request.path_params["item_id"]))

    @property
    def _conversations(self) -> Conversations:
        return self.served.responses.conversations

    async def chat_completions(self, request: Request) -> Response:
        body = await self._input(request)
        headers = {k.lower(): v for k, v in request.headers.items()}
        opened: dict[str, str] = {}
        chat = self.served.chat

        def seen(session_id: str) -> None:
            opened[SESSION_ID_HEADER] = session_id

        if isinstance(body, dict) and body.get("stream") is True:
            return await _stream(self.served,
                                 lambda emit: chat.complete(body, headers, emit, seen),
                                 _sse_data, opened, done="data: [DONE]\n\n")
        answer = await chat.complete(body, headers, None, seen)
        return JSONResponse(answer, headers=opened)

    async def upload_file(self, request: Request) -> Response:
        return JSONResponse(await self.served.files.upload(request))

    async def list_files(self, request: Request) -> Response:
        return JSONResponse(await self.served.files.listing(request.query_params))

    async def get_file(self, request: Request) -> Response:
        return JSONResponse(await self.served.files.retrieve(request.path_params["file_id"]))

    async def delete_file(self, request: Request) -> Response:
        return JSONResponse(await self.served.files.delete(request.path_params["file_id"]))

    async def file_content(self, request: Request) -> Response:
        record, data = await self.served.files.content(request.path_params["file_id"])
        return Response(data, media_type="application/octet-stream", headers={
            "content-disposition": f"attachment; filename*=UTF-8''{quote(record.filename)}"})

    async def messages(self, request: Request) -> Response:
        """The Anthropic Messages API (``nonoka.serve.messages``)."""
        try:
            body = await _json(request)
            headers = {k.lower(): v for k, v in request.headers.items()}
            opened: dict[str, str] = {}
            chat = self.served.chat
            messages = Messages(chat.project, chat.models, chat.reuse, chat.kept,
                                chat.passes, chat.anthropic_parsed)

            def seen(session_id: str) -> None:
                opened[SESSION_ID_HEADER] = session_id

            if isinstance(body, dict) and body.get("stream") is True:
                return await _stream(self.served,
                                     lambda emit: messages.create(body, headers, emit, seen),
                                     _sse_event, opened)
            answer = await messages.create(body, headers, None, seen)
            return JSONResponse(answer, headers=opened)
        except Exception as exc:
            raise anthropic_error(exc) from exc

    async def count_tokens(self, request: Request) -> Response:
        try:
            return JSONResponse(count_tokens(await _json(request)))
        except Exception as exc:
            raise anthropic_error(exc) from exc

    async def models(self, request: Request) -> Response:
        if _anthropic_client(request):
            return JSONResponse(_anthropic_models(self.served.models.listing()))
        return JSONResponse(self.served.models.listing())

    async def model(self, request: Request) -> Response:
        wanted = request.path_params["model"]
        for entry in self.served.models.listing()["data"]:
            if entry["id"] == wanted:
                if _anthropic_client(request):
                    return JSONResponse(_anthropic_models({"data": [entry]})["data"][0])
                return JSONResponse(entry)
        raise ApiError(404, f"The model '{wanted}' does not exist", code="model_not_found",
                       param="model")


def _anthropic_client(request: Request) -> bool:
    """An Anthropic client (the SDK, Claude Code): it sends ``anthropic-version``, or
    its key as ``x-api-key``."""
    return "anthropic-version" in request.headers or "x-api-key" in request.headers


def _anthropic_models(listing: dict[str, Any]) -> dict[str, Any]:
    """A model listing in the Anthropic API's shape."""
    data = [{"type": "model", "id": entry["id"], "display_name": entry["id"],
             "created_at": "1970-01-01T00:00:00Z"} for entry in listing["data"]]
    return {"data": data, "has_more": False,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None}


def _later(feature: str) -> Callable[[Request], Awaitable[Response]]:
    """An endpoint of the API this server does not offer yet."""
    async def refuse(request: Request) -> Response:
        raise not_available(feature)
    return refuse


async def _no_route(request: Request, exc: Exception) -> Response:
    status = getattr(exc, "status_code", 404)
    message = (f"Invalid URL ({request.method} {request.url.path})" if status == 404
               else f"{request.method} is not allowed on {request.url.path}")
    return JSONResponse(error_body(message), status_code=status)


def _answered(route: Route) -> Route:
    """``route`` with every failure answered as an error body (never a bare 500)."""
    endpoint = route.endpoint

    async def answered(request: Request) -> Response:
        try:
            return await endpoint(request)  # type: ignore[no-any-return]
        except Exception as exc:
            error = api_error(exc)
            return JSONResponse(error.body(), status_code=error.status,
                                headers=error.headers())

    return Route(route.path, answered, methods=sorted(route.methods or ()) or None)


async def _json(request: Request) -> Any:
    kind = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if kind != "application/json":
        raise ApiError(415, "send the body as JSON (Content-Type: application/json)")
    try:
        return json.loads(await request.body())
    except ValueError:
        raise invalid("the request body is not valid JSON") from None


def _sse_event(event: dict[str, Any]) -> str:
    return f"event: {event.get('type', 'message')}\ndata: {_dumped(event)}\n\n"


def _sse_data(event: dict[str, Any]) -> str:
    return f"data: {_dumped(event)}\n\n"


def _dumped(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


async def _background(served: Served, body: dict[str, Any], retry: Retry
                      ) -> tuple[dict[str, Any], Live]:
    """A background response: its turn runs in a task of its own; the response once it
    exists, and its stream (``nonoka.serve.journal``)."""
    made: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
    responses = served.responses
    live = Live(responses.stores.events)

    def emit(event: dict[str, Any]) -> None:
        live.add(event)
        if not made.done() and event.get("type") == "response.created":
            responses.streams[live.response_id or ""] = live
            made.set_result(event["response"])

    async def run() -> None:
        try:
            await responses.create(body, emit, retry)
        except Exception as exc:
            if not made.done():
                made.set_exception(exc)
        finally:
            await live.close()
            responses.streams.pop(live.response_id or "", None)
            if not made.done():
                made.set_exception(ApiError(500, "the request ended without a response",
                                            type="server_error"))

    task = asyncio.create_task(run())
    served.tasks.add(task)
    task.add_done_callback(served.tasks.discard)
    return await made, live


async def _stream(served: Served, work: Work, frame: Callable[[dict[str, Any]], str],
                  headers: dict[str, str] | None, *, done: str = "") -> Response:
    """Run ``work`` in a task of its own and stream what it emits, once it emits."""
    queue: asyncio.Queue[Any] = asyncio.Queue()

    async def run() -> None:
        try:
            await work(queue.put_nowait)
        except Exception as exc:
            queue.put_nowait(exc)
        finally:
            queue.put_nowait(_DONE)

    task = asyncio.create_task(run())
    served.tasks.add(task)
    task.add_done_callback(served.tasks.discard)
    first = await queue.get()
    if isinstance(first, Exception):
        raise first
    if first is _DONE:
        raise ApiError(500, "the request ended without an answer", type="server_error")

    async def body() -> Any:
        item = first
        while item is not _DONE:
            if isinstance(item, Exception):
                error = api_error(item)
                yield _sse_data(error.body())
            else:
                yield frame(item)
            item = await queue.get()
        if done:
            yield done

    return StreamingResponse(body(), media_type="text/event-stream",
                             headers={"cache-control": "no-cache", **(headers or {})})


class KeyGuard:
    """ASGI middleware: the ``Host`` check on loopback, and the key: a request runs as
    the owner its key acts for (``nonoka.serve.keys.current_owner``)."""

    def __init__(self, app: ASGIApp, gate: Gate, hosts: frozenset[str] | None) -> None:
        self.app = app
        self.gate = gate
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers", [])}
        if self.hosts is not None and headers.get("host", "").lower() not in self.hosts:
            await _refuse(send, 403, "unexpected Host header: use the address nonoka serve "
                                     "printed", "forbidden")
            return
        owner = await self.gate.owner(_token(headers))
        if owner is None:
            if str(scope.get("path", "")).startswith("/v1/messages"):
                await _refuse(send, 401, "invalid x-api-key: send a key of nonoka serve",
                              "authentication_error", anthropic=True)
                return
            await _refuse(send, 401, "Incorrect API key provided: send a key of nonoka serve "
                                     "as 'Authorization: Bearer <key>'", "invalid_api_key")
            return
        set_owner(owner)
        await self.app(scope, receive, send)


def _token(headers: dict[str, str]) -> str:
    scheme, _, token = headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer":
        token = headers.get("api-key", "") or headers.get("x-api-key", "")
    return token.strip()


async def _refuse(send: Send, status: int, message: str, code: str, *,
                  anthropic: bool = False) -> None:
    shaped = ({"type": "error", "error": {"type": code, "message": message}} if anthropic
              else error_body(message, code=code))
    body = json.dumps(shaped).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})

