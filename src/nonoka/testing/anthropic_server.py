"""A scripted Anthropic Messages API server, to test the ``anthropic:`` adapter (and
anything else that speaks the API) over real sockets.

It serves ``POST /v1/messages`` the way Anthropic does, closely enough for the official
``anthropic`` SDK: a streamed answer is exactly the API's server-sent events
(``message_start``, ``ping``, ``content_block_start`` / ``_delta`` / ``_stop`` for
thinking, redacted thinking, text and tool calls, ``message_delta``, ``message_stop``),
a request without ``stream`` gets the ``message`` object, and errors have Anthropic's
body (``{"type": "error", "error": {"type", "message"}}``). Its base URL follows the
SDK's convention (no ``/v1``): ``Anthropic(base_url=server.base_url)``.

Steps are ``AnthropicReply`` objects (thinking, text, tool calls, stop reason, usage),
``ModelResponse`` objects (``nonoka.testing.text``, ``call``, ``calls``), strings, or
faults: ``HttpError`` (``anthropic_overloaded()``, ``anthropic_rate_limited()``),
``StreamError`` (an ``error`` event mid-stream), ``Delay`` and ``DropConnection``. A
script may also be a function from the request body to a step.

Usage is honest about caching: unless a reply scripts its counts, the server counts the
request's tokens (about four characters a token) and keeps a prompt cache
(``anthropic_checks.PromptCache``), so a request reads what an earlier one wrote at its
breakpoints and writes the rest. Requests the real API always refuses (no
``max_tokens``, more than four breakpoints...) get its 400; the ``anthropic_thinking``
strict mode also refuses thinking blocks sent back altered or missing in a tool loop.
A refused request is recorded (its index is in ``rejections``) and uses no step.

    with ScriptedAnthropicServer([AnthropicReply(text="hi")]) as server:
        model = AnthropicChatModel("claude-x", base_url=server.base_url, api_key="k")
        ...
        server.assert_done()
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from http.server import ThreadingHTTPServer
from typing import Any, TypeAlias, cast

from nonoka.llm.base import ModelResponse
from nonoka.testing.anthropic_checks import (
    ProducedThinking,
    PromptCache,
    checked_modes,
    counted_input,
    request_problem,
)
from nonoka.testing.anthropic_replies import (
    AnthropicReply,
    CacheUsage,
    StreamError,
    as_anthropic,
    block_events,
    error_body,
    error_kind,
    events,
    invalid_request,
    message,
    start_event,
)
from nonoka.testing.replies import Reply
from nonoka.testing.served import ScriptedHandler, ScriptedHTTPServer, ServedScript
from nonoka.testing.steps import Delay, DropConnection, Flood, HttpError, Linger, Paced

__all__ = ("AnthropicStep", "ScriptedAnthropicServer")

AnthropicStep: TypeAlias = ("AnthropicReply | ModelResponse | Reply | str | HttpError | Delay"
                            " | DropConnection | StreamError | Linger | Paced | Flood")
AnthropicScript: TypeAlias = ("Sequence[AnthropicStep]"
                              " | Callable[[dict[str, Any]], AnthropicStep]")
_ANSWERS = (AnthropicReply, ModelResponse, Reply, str)


class ScriptedAnthropicServer(ServedScript[AnthropicStep]):
    """Serves ``POST /v1/messages`` from a script.

    ``requests`` holds every request's JSON body, ``bodies`` its exact bytes and
    ``headers`` its headers (lower-case names); ``usages`` the usage each answered
    request got; ``rejections`` the indexes of the requests refused (the API's own
    checks, a ``strict`` mode). A request beyond the end of a list script gets HTTP 500
    and is noted in ``failures``; ``assert_done`` then fails. ``min_cache_tokens``: the
    shortest prefix the prompt cache keeps (Anthropic's minimum is 1,024 to 4,096 tokens
    by model).
    """

    def __init__(self, script: AnthropicScript, *, host: str = "127.0.0.1", port: int = 0,
                 model: str = "claude-scripted", chunk_size: int = 8,
                 strict: Collection[str] = (), min_cache_tokens: int = 1024,
                 keep_alive: bool = False) -> None:
        self._script = script if callable(script) else list(script)
        self._keeping(keep_alive)
        self.strict = checked_modes(strict)
        self._address = (host, port)
        self.model = model
        self.chunk_size = max(1, chunk_size)
        self.requests: list[dict[str, Any]] = []
        self.bodies: list[bytes] = []
        self.headers: list[dict[str, str]] = []
        self.usages: list[dict[str, Any]] = []
        self.failures: list[str] = []
        self.rejections: list[int] = []
        self.cache = PromptCache(min_cache_tokens)
        self._thinking = ProducedThinking()
        self._used = 0
        self._numbers = itertools.count(1)
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # lifecycle: start, close and the context manager are ServedScript's ----------

    THREAD_NAME = "scripted-anthropic-server"

    def _serving(self) -> ThreadingHTTPServer:
        return _HTTPServer(self._address, _Handler, self)

    @property
    def base_url(self) -> str:
        """The API's base URL, as the SDK and ``ANTHROPIC_BASE_URL`` take it (no ``/v1``)."""
        return f"http://{self._address[0]}:{self.port}"

    # script ---------------------------------------------------------------------------

    def _take_step(self, body: dict[str, Any], raw: bytes, headers: dict[str, str],
                   ) -> tuple[AnthropicStep | None, CacheUsage | None]:
        """Record a request and pick its step: a refusal, the script's next step, or
        ``None`` when the script ran out; with the cache usage of an answer."""
        with self._lock:
            self.requests.append(body)
            self.bodies.append(raw)
            self.headers.append(headers)
            problem = request_problem(body)
            if problem is None and "anthropic_thinking" in self.strict:
                problem = self._thinking.refusal(body)
            if problem is not None:
                self.rejections.append(len(self.requests) - 1)
                return invalid_request(problem), None
            step = self._next_step(body)
            answer = step
            while isinstance(answer, Delay | Linger | Paced):
                answer = cast(AnthropicStep, answer.then)  # any step may follow a Delay
            if not isinstance(answer, _ANSWERS):
                return step, None
            reply = as_anthropic(answer)
            self._thinking.note(reply)
            counted = self.cache.usage(body)
            return step, counted

    def _next_step(self, body: dict[str, Any]) -> AnthropicStep | None:
        if callable(self._script):
            try:
                return self._script(body)
            except Exception as exc:
                self.failures.append(f"the script function raised {exc!r}")
                return None
        if self._used < len(self._script):
            self._used += 1
            return self._script[self._used - 1]
        self.failures.append(
            f"scripted server has no step left: got request #{len(self.requests)} but the "
            f"script has {len(self._script)} step(s)")
        return None

    def _number(self) -> int:
        with self._lock:
            return next(self._numbers)


_HTTPServer: TypeAlias = ScriptedHTTPServer["ScriptedAnthropicServer"]


class _Handler(ScriptedHandler):
    """One exchange with the Messages endpoint."""

    server: _HTTPServer

    def do_POST(self) -> None:
        owner = self.server.owner
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {k.lower(): v for k, v in self.headers.items()}
        if self.path.split("?")[0].rstrip("/") != "/v1/messages":
            self._send_error(HttpError(404, error_body("not_found_error",
                                                       f"no route POST {self.path}")))
            return
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            self._send_error(invalid_request("The request body is not valid JSON."))
            return
        step, counted = owner._take_step(body, raw, headers)
        self._answer(step, counted, body)

    def _answer(self, step: AnthropicStep | None, counted: CacheUsage | None,
                request: dict[str, Any]) -> None:
        owner = self.server.owner
        self._pace = 0.0
        while isinstance(step, Delay | Linger | Paced):
            if isinstance(step, Linger | Paced):
                self._wrapped(step)
            elif step.wait(owner._closing):
                self.close_connection = True
                return
            step = cast(AnthropicStep, step.then)  # any step may follow a Delay
        if step is None:
            message_text = owner.failures[-1] if owner.failures else "the script gave no step"
            self._send_error(HttpError(500, error_body("api_error", message_text)))
        elif isinstance(step, HttpError):
            self._send_error(step)
        elif isinstance(step, Flood):
            self._flood(step)
        elif isinstance(step, DropConnection | StreamError):
            self._broken(step, request)
        else:
            reply = as_anthropic(step)
            model = reply.model or str(request.get("model") or owner.model)
            usage = counted or CacheUsage(input=counted_input(request))
            number = owner._number()
            with owner._lock:
                owner.usages.append(message(reply, model, number, usage)["usage"])
            if request.get("stream"):
                self._stream(events(reply, model, number, usage, owner.chunk_size))
            else:
                self._send_json(200, message(reply, model, number, usage))

    # writing ----------------------------------------------------------------------------

    KEEPALIVE = b'event: ping\ndata: {"type": "ping"}\n\n'

    def _answer_headers(self) -> dict[str, str]:
        return {"request-id": f"req_scripted{self.server.owner._number():012d}"}

    def _error_payload(self, status: int) -> dict[str, Any]:
        return error_body(error_kind(status), f"scripted HTTP {status}")

    def _event(self, name: str, data: dict[str, Any]) -> None:
        self._chunk(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())

    def _stream(self, items: Iterator[tuple[str, dict[str, Any]]]) -> None:
        self._start_stream()
        for name, data in items:
            self._event(name, data)
        self._end_stream()

    def _broken(self, step: DropConnection | StreamError, request: dict[str, Any]) -> None:
        """A stream that starts, sends some text, and then ends in an ``error`` event
        (``StreamError``) or a dropped connection (``DropConnection``)."""
        owner = self.server.owner
        self._start_stream()
        model = str(request.get("model") or owner.model)
        self._event(*start_event(model, owner._number(), {
            "input_tokens": counted_input(request), "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0}))
        text = step.partial_text
        if text:
            for name, data in block_events(0, {"type": "text", "text": text},
                                           owner.chunk_size):
                if name == "content_block_stop":
                    break
                self._event(name, data)
        if isinstance(step, StreamError):
            self._event("error", {"type": "error", "error": {"type": step.type,
                                                             "message": step.message}})
            self._end_stream()
        else:
            self._hang_up()
