"""A scripted OpenAI-compatible HTTP server, to test agents over real sockets (and,
re-exported from ``nonoka.testing.anthropic_server``, ``ScriptedAnthropicServer``: the
same for Anthropic's Messages API, with its replies, errors and strict mode).

``ScriptedModel`` tests an agent without any network; this server tests the real path
(adapter, HTTP, streaming, retries) and can run in its own process next to the processes
under test. It speaks the Chat Completions wire format closely enough for the official
``openai`` SDK: streamed chunks (text and tool-call arguments split over several chunks,
plus the usage chunk when ``stream_options.include_usage`` is set) and plain JSON answers.

Script steps are ``ModelResponse`` objects (build them with ``nonoka.testing.text``,
``call`` and ``calls``), plain strings (text), ``Reply`` objects (reasoning as DeepSeek or
OpenRouter stream it, Gemini's thought signatures on tool calls, cached and reasoning
token counts), or the faults below: ``HttpError``, ``Delay`` and ``DropConnection``, and
the errors OpenAI sends for a context overflow, an exhausted quota and a rate limit
(``context_length_exceeded``, ``insufficient_quota``, ``rate_limited``). Instead of a
list, a script may be a function from the request body to a step.

``strict`` modes (``STRICT_MODES``) answer a client that drops what the server sent the way
the real services do: ``deepseek_thinking`` refuses tool-calling assistant messages that
come back without their ``reasoning_content``; ``reasoning_back`` refuses them without
the reasoning in whichever field it was streamed (``reasoning_content``, ``reasoning``,
``reasoning_details``); ``gemini_signatures`` refuses thought signatures that come back
missing or altered. A refused request is recorded like any
other (its index is in ``rejections``) and uses no step.

``ScriptedResponsesServer`` serves OpenAI's Responses API (``POST /v1/responses``) from
the same kinds of steps, plus ``ResponsesReply`` (output items in any order, reasoning
items among them: ``ReasoningItem``, and a hosted tool's items: ``HostedItem``) and
``ResponseFailed`` (a stream that ends in
``response.failed`` or an ``error`` event); its ``openai_reasoning`` strict mode
(``RESPONSES_STRICT_MODES``) refuses encrypted reasoning that comes back missing or
altered (``nonoka.testing.responses``).

In process::

    with ScriptedOpenAIServer(["hello", HttpError(429), text("again")]) as server:
        model = OpenAIChatModel("m", base_url=server.base_url)
        ...
        server.assert_done()

As a process (``--script`` is a JSON list; see ``step_from_json`` for the step forms)::

    python -m nonoka.testing.server --script steps.json --port-file port.txt --log log.jsonl
    python -m nonoka.testing.server --api responses --script steps.json --strict openai_reasoning
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeAlias

from nonoka.llm.base import ModelResponse
from nonoka.state.messages import ToolCall
from nonoka.testing.anthropic_checks import STRICT_MODES as ANTHROPIC_STRICT_MODES
from nonoka.testing.anthropic_replies import (
    AnthropicReply,
    StreamError,
    Thinking,
    anthropic_overloaded,
    anthropic_rate_limited,
)
from nonoka.testing.anthropic_server import AnthropicStep, ScriptedAnthropicServer
from nonoka.testing.replies import Reply, as_reply, chunks, completion
from nonoka.testing.responses import (
    RESPONSES_STRICT_MODES,
    ResponsesProduced,
    failed_events,
    final_response,
    partial_events,
    prepare,
    response_events,
    response_id,
    unknown_parameter,
)
from nonoka.testing.served import ScriptedHandler, ScriptedHTTPServer, ServedScript
from nonoka.testing.steps import (
    Delay,
    DropConnection,
    Flood,
    HostedItem,
    HttpError,
    Linger,
    Paced,
    ReasoningItem,
    ResponseFailed,
    ResponsesReply,
    Step,
    context_length_exceeded,
    insufficient_quota,
    load_script,
    rate_limited,
    step_from_json,
)
from nonoka.testing.strict import STRICT_MODES, Produced, checked_modes

__all__ = (
    "ANTHROPIC_STRICT_MODES",
    "RESPONSES_STRICT_MODES",
    "STRICT_MODES",
    "AnthropicReply",
    "AnthropicStep",
    "Delay",
    "DropConnection",
    "Flood",
    "HostedItem",
    "HttpError",
    "Linger",
    "Paced",
    "ReasoningItem",
    "Reply",
    "ResponseFailed",
    "ResponsesReply",
    "ScriptedAnthropicServer",
    "ScriptedOpenAIServer",
    "ScriptedResponsesServer",
    "Step",
    "StreamError",
    "Thinking",
    "anthropic_overloaded",
    "anthropic_rate_limited",
    "context_length_exceeded",
    "insufficient_quota",
    "load_script",
    "main",
    "rate_limited",
    "step_from_json",
)

Script: TypeAlias = "Sequence[Step] | Callable[[dict[str, Any]], Step]"


class ScriptedOpenAIServer(ServedScript[Step]):
    """Serves ``POST /v1/chat/completions`` from a script and ``GET /v1/models``.

    Every chat request is recorded: ``requests`` holds the JSON bodies and ``headers`` the
    matching headers (lower-case names); ``rejections`` the indexes of those a ``strict``
    mode refused. A request beyond the end of a list script gets HTTP 500 and is noted in
    ``failures``; ``assert_done`` then fails.
    """

    ROUTES: tuple[str, ...] = ("/v1/chat/completions", "/chat/completions")
    """The paths answered from the script."""
    MODES: tuple[str, ...] = STRICT_MODES

    def __init__(self, script: Script, *, host: str = "127.0.0.1", port: int = 0,
                 model: str = "scripted-model", chunk_size: int = 8,
                 log_path: str | os.PathLike[str] | None = None,
                 strict: Collection[str] = (), keep_alive: bool = False) -> None:
        self._script = script if callable(script) else list(script)
        self._keeping(keep_alive)
        self.strict = checked_modes(strict, self.MODES)
        self._address = (host, port)
        self.model = model
        self.chunk_size = max(1, chunk_size)
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.failures: list[str] = []
        self.rejections: list[int] = []
        self._used = 0  # steps of a list script used so far
        self._produced = Produced()
        self._numbers = itertools.count(1)
        self._log_path = Path(log_path) if log_path is not None else None
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # lifecycle: start, close and the context manager are ServedScript's ----------

    THREAD_NAME = "scripted-openai-server"

    def _serving(self) -> ThreadingHTTPServer:
        return _HTTPServer(self._address, _Handler, self)

    @property
    def base_url(self) -> str:
        return f"http://{self._address[0]}:{self.port}/v1"

    # script ---------------------------------------------------------------------------

    def _take_step(self, body: dict[str, Any],
                   headers: dict[str, str]) -> tuple[Step | None, bool]:
        """Record a chat request and pick its step: a strict mode's refusal (then ``True``),
        the script's next step, or ``None`` when the script ran out."""
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
            refusal = self._refusal(body)
            if refusal is not None:
                self.rejections.append(len(self.requests) - 1)
                return refusal, True
            return self._noted(self._next_step(body)), False

    def _refusal(self, body: dict[str, Any]) -> HttpError | None:
        """What a strict mode answers ``body`` with (under the lock)."""
        return self._produced.refusal(body, self.strict)

    def _noted(self, step: Step | None) -> Step | None:
        """Remember what ``step`` sends that a client must send back (under the lock)."""
        answer = step
        while isinstance(answer, Delay | Linger | Paced):
            answer = answer.then
        if isinstance(answer, ModelResponse | Reply | str):
            self._produced.note(as_reply(answer))
        return step

    def _serve(self, handler: _Handler, step: Step, request: dict[str, Any]) -> None:
        """Answer ``request`` with ``step`` (an answer or a dropped connection)."""
        if isinstance(step, DropConnection):
            handler._drop(step, request)
            return
        if not isinstance(step, ModelResponse | Reply | str):
            failure = (f"a {type(step).__name__} step is for the Responses API "
                       "(ScriptedResponsesServer)")
            with self._lock:
                self.failures.append(failure)
            handler._send_error(HttpError(500, _error_body(failure, 500)))
            return
        reply = as_reply(step)
        model = handler._model(request, reply.model)
        if request.get("stream"):
            include_usage = bool((request.get("stream_options") or {}).get("include_usage"))
            handler._stream(chunks(reply, model, include_usage, self.chunk_size,
                                   self._number()))
        else:
            handler._send_json(200, completion(reply, model, self._number()))

    def _next_step(self, body: dict[str, Any]) -> Step | None:
        if callable(self._script):
            try:
                return self._script(body)
            except Exception as exc:  # answer 500 and let assert_done() report it
                self.failures.append(f"the script function raised {exc!r}")
                return None
        if self._used < len(self._script):
            self._used += 1
            return self._script[self._used - 1]
        self.failures.append(
            f"scripted server has no step left: got request #{len(self.requests)} but the "
            f"script has {len(self._script)} step(s)"
        )
        return None

    def _number(self) -> int:
        """A fresh number for a completion's id."""
        with self._lock:
            return next(self._numbers)

    def _log(self, record: dict[str, Any]) -> None:
        if self._log_path is None:
            return
        line = json.dumps(record, ensure_ascii=False)
        with self._lock, self._log_path.open("a", encoding="utf-8") as log:
            log.write(line + "\n")


class ScriptedResponsesServer(ScriptedOpenAIServer):
    """Serves OpenAI's Responses API, ``POST /v1/responses``, from a script.

    Steps as for ``ScriptedOpenAIServer`` (an answer is served as
    ``ResponsesReply.of(step)``), plus ``ResponsesReply`` and ``ResponseFailed``. A
    streamed request gets the API's events (``nonoka.testing.responses``); one without
    ``stream`` gets the whole response object; one with a field the API does not have
    gets its 400 ``unknown_parameter``, as OpenAI always answers.
    ``strict=["openai_reasoning"]`` refuses a request that drops or alters encrypted
    reasoning this server sent, as OpenAI does.
    """

    ROUTES = ("/v1/responses", "/responses")
    MODES = RESPONSES_STRICT_MODES

    def __init__(self, script: Script, **options: Any) -> None:
        super().__init__(script, **options)
        self._outputs = ResponsesProduced()
        self._token = os.urandom(6).hex()
        """Makes this server's ids and encrypted content its own."""

    def _refusal(self, body: dict[str, Any]) -> HttpError | None:
        return unknown_parameter(body) or self._outputs.refusal(body, self.strict)

    def _noted(self, step: Step | None) -> Step | None:
        return step  # noted when served (``_serve``), with the ids it is given then

    def _serve(self, handler: _Handler, step: Step, request: dict[str, Any]) -> None:
        if isinstance(step, ResponseFailed):
            with self._lock:
                number = next(self._numbers)
            handler._named_events(failed_events(step, response_id(number, self._token),
                                                handler._model(request), request))
            return
        if isinstance(step, DropConnection):
            with self._lock:
                number = next(self._numbers)
            handler._named_events(partial_events(
                step.partial_text, response_id(number, self._token), handler._model(request),
                request, self.chunk_size), drop=True)
            return
        if isinstance(step, HttpError | Delay | Linger | Paced | Flood):  # the handler's own
            raise TypeError(f"not an answer: {step!r}")
        reply = step if isinstance(step, ResponsesReply) else ResponsesReply.of(step)
        with self._lock:
            prepared = prepare(reply, next(self._numbers), self._token)
            self._outputs.note(prepared)
        model = handler._model(request, reply.model)
        if request.get("stream"):
            handler._named_events(response_events(prepared, model, request, self.chunk_size,
                                                  handler._flush))
        else:
            handler._send_json(200, final_response(prepared, model, request))


_HTTPServer: TypeAlias = ScriptedHTTPServer["ScriptedOpenAIServer"]


class _Handler(ScriptedHandler):
    """One exchange with the OpenAI-compatible endpoint."""

    server: _HTTPServer

    def do_GET(self) -> None:
        self.server.owner._log({"time": time.time(), "method": "GET", "path": self.path})
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            model = {"id": self.server.owner.model, "object": "model", "created": 0,
                     "owned_by": "nonoka-testing"}
            self._send_json(200, {"object": "list", "data": [model]})
        else:
            self._send_error(HttpError(404, _error_body(f"no route GET {self.path}", 404)))

    def do_POST(self) -> None:
        owner = self.server.owner
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {k.lower(): v for k, v in self.headers.items()}
        record = {"time": time.time(), "method": "POST", "path": self.path,
                  "headers": _redacted(headers)}
        if self.path.split("?")[0].rstrip("/") not in owner.ROUTES:
            owner._log(record)
            self._send_error(HttpError(404, _error_body(f"no route POST {self.path}", 404)))
            return
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            owner._log(record)
            self._send_error(HttpError(400, _error_body("request body is not a JSON object",
                                                        400)))
            return
        step, refused = owner._take_step(body, headers)
        owner._log({**record, "body": body, "step": _describe(step),
                    **({"strict": "refused"} if refused else {})})
        self._answer(step, body)

    def _answer(self, step: Step | None, request: dict[str, Any]) -> None:
        owner = self.server.owner
        self._pace = 0.0
        while isinstance(step, Delay | Linger | Paced):
            if isinstance(step, Linger | Paced):
                self._wrapped(step)
            elif step.wait(owner._closing):
                self.close_connection = True
                return  # shutting down: hang up without an answer
            step = step.then
        if step is None:
            message = owner.failures[-1] if owner.failures else "the script gave no step"
            self._send_error(HttpError(500, _error_body(message, 500)))
        elif isinstance(step, HttpError):
            self._send_error(step)
        elif isinstance(step, Flood):
            self._flood(step)
        else:
            owner._serve(self, step, request)

    def _model(self, request: dict[str, Any], scripted: str = "") -> str:
        return scripted or str(request.get("model") or self.server.owner.model)

    # writing ----------------------------------------------------------------------------

    def _error_payload(self, status: int) -> dict[str, Any]:
        return _error_body(f"scripted HTTP {status}", status)

    def _event(self, payload: str, name: str | None = None) -> None:
        data = f"data: {payload}\n\n".encode()
        if name is not None:
            data = f"event: {name}\n".encode() + data
        self._chunk(data)

    def _named_events(self, events: Iterator[dict[str, Any]], *, drop: bool = False) -> None:
        """Stream Responses API events (``event:`` line and ``data:``), then end the
        stream, or (``drop``) hang up without ending it."""
        self._start_stream()
        for event in events:
            self._event(json.dumps(event), event["type"])
        if drop:
            self._hang_up()
        else:
            self._end_stream()

    def _stream(self, chunks: Iterator[dict[str, Any]]) -> None:
        self._start_stream()
        for chunk in chunks:
            self._event(json.dumps(chunk))
        if self._linger is None:  # an endpoint that lingers never says it is done
            self._event("[DONE]")
        self._end_stream()

    def _drop(self, step: DropConnection, request: dict[str, Any]) -> None:
        self._start_stream()
        owner = self.server.owner
        partial = Reply(text=step.partial_text)
        for chunk in chunks(partial, self._model(request), False, owner.chunk_size,
                            owner._number()):
            if chunk["choices"][0]["finish_reason"]:
                break
            self._event(json.dumps(chunk))
        self._hang_up()  # no final chunk, no [DONE]


# helpers -----------------------------------------------------------------------------------


def _error_body(message: str, status: int) -> dict[str, Any]:
    kind = "server_error" if status >= 500 else (
        "rate_limit_error" if status == 429 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def _redacted(headers: dict[str, str]) -> dict[str, str]:
    """Headers for the log file: keys never end up on disk."""
    return {k: ("<redacted>" if k in ("authorization", "api-key", "x-api-key") else v)
            for k, v in headers.items()}


def _describe(step: Step | None) -> str:
    if step is None:
        return "exhausted"
    if isinstance(step, str):
        return "text"
    if isinstance(step, ModelResponse | Reply):
        return "tool_calls" if step.tool_calls else "text"
    if isinstance(step, ResponsesReply):
        return "tool_calls" if any(isinstance(i, ToolCall) for i in step.output) else "text"
    if isinstance(step, ResponseFailed):
        return f"failed {step.code}"
    if isinstance(step, HttpError):
        return f"error {step.status}"
    if isinstance(step, Delay):
        return f"delay {step.seconds:g}s then {_describe(step.then)}"
    if isinstance(step, Linger):
        return f"{_describe(step.then)}, then linger"
    if isinstance(step, Flood):
        return f"flood {step.size} bytes"
    return "drop"


# the command line ------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m nonoka.testing.server",
        description="Serve a scripted OpenAI-compatible API (or OpenAI's Responses API) "
                    "until SIGTERM or Ctrl-C.")
    parser.add_argument("--script", required=True, help="JSON list of steps")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--port-file", help="write the chosen port here once listening")
    parser.add_argument("--log", help="append one JSON line per request here")
    parser.add_argument("--model", default="scripted-model")
    parser.add_argument("--api", choices=("chat", "responses"), default="chat",
                        help="Chat Completions (default) or the Responses API")
    parser.add_argument("--strict", action="append",
                        choices=(*STRICT_MODES, *RESPONSES_STRICT_MODES), default=[],
                        help="refuse what this vendor refuses (repeatable)")
    args = parser.parse_args(argv)
    kind = ScriptedResponsesServer if args.api == "responses" else ScriptedOpenAIServer

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    server = kind(load_script(args.script), host=args.host, port=args.port,
                  model=args.model, log_path=args.log, strict=args.strict)
    with server:
        if args.port_file:  # write then rename, so a reader never sees a partial number
            tmp = Path(f"{args.port_file}.tmp")
            tmp.write_text(f"{server.port}\n", encoding="utf-8")
            os.replace(tmp, args.port_file)
        print(server.base_url, flush=True)
        stop.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
