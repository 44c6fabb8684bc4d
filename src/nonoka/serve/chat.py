"""Chat Completions: a stateless client's history, mapped onto a session line.

A Chat Completions client sends its whole history every time. nonoka gives such a
history the same treatment as the OpenCode bridge's: the request becomes a bridge chat
request and goes through the bridge's decision chain (``nonoka.bridge.handler``), so
the same lineage rules place it — it continues a stored conversation, branches where a
regenerated or edited history parts from one, or starts a new session — and a retried
request whose answer was already stored is answered from the store, not asked again.

A client's own name for its conversation decides first, as a host's conversation id
does for the bridge: the ``x-nonoka-session`` header, then ``prompt_cache_key``, then
``user`` (the weakest: one user holds many conversations, told apart by content). An
id never decides alone against a history that disagrees. Without one, the conversation
is found by its content (the key of its first user message).

The client runs its own tools: they are the turn's host tools, and a turn that calls
them ends with ``tool_calls``; the next request brings their results. Reasoning the
model streams reaches the client as ``reasoning_content`` (DeepSeek's field, which
OpenAI-compatible clients read); what the provider needs back stays in the session.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from nonoka.bridge.handler import BridgeHandler
from nonoka.errors import Failure
from nonoka.protocol.frames import conversation_key
from nonoka.protocol.models import (
    BaseEvent,
    CallOptionsSpec,
    ChatRequest,
    ErrorEvent,
    Finish,
    HostToolSpec,
    ProtocolSpec,
    ReasoningDeltaEvent,
    SessionInit,
    TextDelta,
    ToolCallEvent,
)
from nonoka.serve.errors import failure_error, invalid
from nonoka.serve.histories import KeptPasses, ParsedBodies
from nonoka.serve.items import content_of
from nonoka.serve.keys import LOCAL, current_owner
from nonoka.serve.model import Models
from nonoka.state.messages import Message, ToolCall
from nonoka.store.kept import KeptStores
from nonoka.store.reuse import StoreReuse

SESSION_HEADER = "x-nonoka-session"
"""The header a client names its conversation with."""
SIGNAL_LENGTH = 256
"""The longest conversation name kept as it is; a longer one is kept as its digest."""

Emit = Callable[[dict[str, Any]], None]


def session_signal(headers: Mapping[str, str], body: Mapping[str, Any],
                   client: Sequence[tuple[str, Any]] = ()) -> str | None:
    """The client's own name for the conversation, strongest first, with where it came
    from (so a cache key never meets a user id of the same text). ``client``: a client's
    own session ids (Codex's), which come before every other name. This is the one
    place the order is kept."""
    for source, value in (*client,
                          (SESSION_HEADER, headers.get(SESSION_HEADER)),
                          ("prompt_cache_key", body.get("prompt_cache_key")),
                          ("user", body.get("user"))):
        if isinstance(value, str) and value.strip():
            named = f"{source}:{value.strip()}"
            if len(named) > SIGNAL_LENGTH:
                named = f"{source}:sha256:{hashlib.sha256(value.encode()).hexdigest()}"
            return named
    return None


def parse_chat(body: Any, headers: Mapping[str, str], project: Path, spec: str,
               parsed: ParsedBodies[Message] | None = None
               ) -> tuple[ChatRequest, bool, bool]:
    """The bridge request for a chat completion body; whether it streams, and whether a
    stream ends with the usage (``stream_options.include_usage``). ``parsed``: the
    messages of the bodies parsed lately (``nonoka.serve.histories``)."""
    if not isinstance(body, dict):
        raise invalid("the request body must be a JSON object")
    given = body.get("messages")
    if not isinstance(given, list) or not given:
        raise invalid("messages must be a non-empty list", "messages")
    if body.get("n") not in (None, 1):
        raise invalid("n must be 1: nonoka keeps one answer per turn", "n")
    messages = (parsed or ParsedBodies[Message](0)).parsed(
        given, lambda m, n: _message(m, f"messages[{n}]"))
    stream = body.get("stream") is True
    options = body.get("stream_options")
    include_usage = stream and isinstance(options, dict) and options.get("include_usage") is True
    request = ChatRequest(protocol=ProtocolSpec(features=["reasoning"]), messages=messages,
                          tools=_tools(body.get("tools")), cwd=str(project),
                          model=spec, host_session_id=session_signal(headers, body),
                          conversation_key=conversation_key(messages),
                          options=_options(body), request_id=secrets.token_hex(8))
    return request, stream, include_usage


def owner_scope(owner: str) -> str | None:
    """The owner as the sessions its requests make record it (a salted digest, never the
    key); ``None`` for the local owner, whose sessions record none."""
    return None if owner == LOCAL else hashlib.sha256(owner.encode()).hexdigest()[:16]


def owned(request: ChatRequest, owner: str) -> ChatRequest:
    """``request`` as ``owner``'s: its conversation key and name made the owner's own, so
    the lineage rules find only sessions that owner's requests made (the local owner's
    are as they always were)."""
    salt = owner_scope(owner)
    if salt is None:
        return request
    key = request.conversation_key
    named = request.host_session_id
    return request.model_copy(update={
        "conversation_key": hashlib.sha256(f"{salt}:{key}".encode()).hexdigest()
        if key else key,
        "host_session_id": owned_name(salt, named) if named else named})


def owned_name(salt: str, named: str) -> str:
    owned = f"owner:{salt}/{named}"
    if len(owned) > SIGNAL_LENGTH:
        owned = f"owner:{salt}/sha256:{hashlib.sha256(named.encode()).hexdigest()}"
    return owned


def _message(raw: Any, param: str) -> Message:
    if not isinstance(raw, dict):
        raise invalid("a message must be an object", param)
    role = raw.get("role")
    if role == "developer":
        role = "system"
    if role not in ("system", "user", "assistant", "tool"):
        raise invalid(f"message role {role!r} is not supported", f"{param}.role")
    content = raw.get("content")
    text, parts = content_of(content if content is not None else "", f"{param}.content")
    if role == "assistant":
        calls = [_call(c, f"{param}.tool_calls[{n}]")
                 for n, c in enumerate(raw.get("tool_calls") or [])]
        return Message(role="assistant", content=text, tool_calls=calls or None)
    if role == "tool":
        call_id = raw.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            raise invalid("a tool message needs tool_call_id", f"{param}.tool_call_id")
        return Message(role="tool", content=text, tool_call_id=call_id, parts=parts)
    return Message(role=role, content=text, parts=parts)


def _call(raw: Any, param: str) -> ToolCall:
    function = raw.get("function") if isinstance(raw, dict) else None
    if not isinstance(function, dict) or not isinstance(raw.get("id"), str) or \
            not isinstance(function.get("name"), str):
        raise invalid("a tool call needs id and function.name", param)
    arguments = function.get("arguments")
    return ToolCall(id=raw["id"], name=function["name"],
                    arguments=arguments if isinstance(arguments, str) else "{}")


def _tools(given: Any) -> list[HostToolSpec]:
    if given is None:
        return []
    if not isinstance(given, list):
        raise invalid("tools must be a list", "tools")
    tools = []
    for n, tool in enumerate(given):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or tool.get("type") != "function" or \
                not isinstance(function.get("name"), str):
            raise invalid("a tool must be {\"type\": \"function\", \"function\": {\"name\": ...}}",
                          f"tools[{n}]")
        parameters = function.get("parameters")
        tools.append(HostToolSpec(
            name=function["name"], description=function.get("description") or "",
            **({"parameters": parameters} if isinstance(parameters, dict) else {})))
    if len({t.name for t in tools}) != len(tools):
        raise invalid("tool names must be unique", "tools")
    return tools


def _options(body: Mapping[str, Any]) -> CallOptionsSpec | None:
    fields: dict[str, Any] = {}
    limit = body.get("max_completion_tokens", body.get("max_tokens"))
    if limit is not None:
        fields["max_tokens"] = limit
    for name in ("temperature", "top_p", "seed", "response_format", "tool_choice",
                 "reasoning_effort"):
        if body.get(name) is not None:
            fields[name] = body[name]
    stop = body.get("stop")
    if stop is not None:
        fields["stop"] = [stop] if isinstance(stop, str) else stop
    if not fields:
        return None
    try:
        return CallOptionsSpec.model_validate(fields)
    except ValueError as exc:
        raise invalid(f"call options: {exc}") from None


class ChatCompletions:
    """``POST /v1/chat/completions`` through the bridge's decision chain."""

    def __init__(self, project: Path, models: Models, reuse: StoreReuse | None = None,
                 kept: KeptStores | None = None) -> None:
        self.project = project
        self.models = models
        self.reuse = reuse if reuse is not None else StoreReuse()
        self.kept = kept if kept is not None else KeptStores()
        """The project's stores between requests (``nonoka.store.kept``): one set kept
        open, the others of requests running at once closed as they end."""
        self.parsed = ParsedBodies[Message]()
        """The messages of the bodies parsed lately."""
        self.anthropic_parsed = ParsedBodies[list[Message]]()
        """The same for the Messages API's bodies (``nonoka.serve.messages``)."""
        self.passes = KeptPasses(self.reuse, self.kept, models.workers)
        """The bridge's passes over the conversations answered lately (both APIs')."""

    async def complete(self, body: Any, headers: Mapping[str, str],
                       emit: Emit | None = None,
                       opened: Callable[[str], None] | None = None) -> dict[str, Any]:
        """One completion: the whole answer, or (``emit``) its chunks as they come;
        ``opened`` is told the session the turn runs in, before any chunk.

        Raises ``ApiError`` when nothing was streamed yet; a failure after the first
        chunk is emitted as an ``error`` chunk.
        """
        spec = self.models.pick(body.get("model") if isinstance(body, dict) else None)
        request, _, include_usage = parse_chat(body, headers, self.project, spec,
                                               self.parsed)
        owner = current_owner()
        request = owned(request, owner)
        answer = _Answer(spec, emit, include_usage, opened)
        key = request.conversation_key
        reuse = self.passes.take(key)
        handler = BridgeHandler(request, answer.on_event, reuse=reuse,
                                owner_scope=owner_scope(owner))
        await handler.handle()
        self.passes.give(key, reuse)
        return answer.result()


class _Answer:
    """The bridge's events for one request, as a completion or its chunks."""

    def __init__(self, model: str, emit: Emit | None, include_usage: bool,
                 opened: Callable[[str], None] | None) -> None:
        self.model = model
        self.opened = opened
        self.emit = emit
        self.include_usage = include_usage
        self.id = "chatcmpl-" + secrets.token_hex(12)
        self.created = int(time.time())
        self.session_id: str | None = None
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: list[dict[str, Any]] = []
        self.failure: Failure | None = None
        self.finish: Finish | None = None
        self.started = False

    def on_event(self, event: BaseEvent) -> None:
        if isinstance(event, SessionInit):
            self.session_id = event.session_id
            if self.opened is not None:
                self.opened(event.session_id)
        elif isinstance(event, TextDelta):
            self.text.append(event.text)
            self._chunk({"content": event.text})
        elif isinstance(event, ReasoningDeltaEvent):
            self.reasoning.append(event.text)
            self._chunk({"reasoning_content": event.text})
        elif isinstance(event, ToolCallEvent):
            call = {"id": event.tool_call_id, "type": "function",
                    "function": {"name": event.tool_name, "arguments": event.arguments}}
            self._chunk({"tool_calls": [{"index": len(self.calls), **call}]})
            self.calls.append(call)
        elif isinstance(event, ErrorEvent):
            provider = event.details.get("provider")
            self.failure = Failure(event.code, event.message, event.retryable,
                                   provider if isinstance(provider, dict) else None)
        elif isinstance(event, Finish):
            self.finish = event
            self._end()

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> None:
        if self.emit is None:
            return
        if not self.started:
            self.started = True
            self.emit(self._frame({"role": "assistant", "content": ""}, None))
        self.emit(self._frame(delta, finish))

    def _frame(self, delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                "model": self.model, "system_fingerprint": None,
                "choices": [{"index": 0, "delta": delta, "logprobs": None,
                             "finish_reason": finish}]}

    def _end(self) -> None:
        if self.emit is None:
            return
        if self.failure is not None:
            if self.started:  # the stream says so; before it, the request fails
                self.emit({"error": failure_error(self.failure).body()["error"]})
            return
        self._chunk({}, self.finish_reason())
        if self.include_usage:
            self.emit({"id": self.id, "object": "chat.completion.chunk",
                       "created": self.created, "model": self.model, "choices": [],
                       "usage": self.usage()})

    def finish_reason(self) -> str:
        """The turn's end in Chat Completions' names; an answer the model itself cut
        (``length``, ``content_filter``) says so, as the model said it."""
        finish = self.finish
        reason = finish.finish_reason if finish is not None else "stop"
        if reason == "stop" and finish is not None and \
                finish.model_finish in ("length", "content_filter"):
            return finish.model_finish
        return {"tool_calls": "tool_calls", "limit": "length"}.get(reason, "stop")

    def usage(self) -> dict[str, Any]:
        totals = self.finish.usage if self.finish is not None else None
        prompt = totals.input_tokens if totals else 0
        completion = totals.output_tokens if totals else 0
        return {"prompt_tokens": prompt, "completion_tokens": completion,
                "total_tokens": prompt + completion,
                "prompt_tokens_details": {
                    "cached_tokens": (totals.cache_read_tokens or 0) if totals else 0},
                "completion_tokens_details": {
                    "reasoning_tokens": (totals.reasoning_tokens or 0) if totals else 0}}

    def result(self) -> dict[str, Any]:
        if self.failure is not None and not self.started:
            raise failure_error(self.failure)
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.text) or None,
                                   "refusal": None}
        if self.reasoning:
            message["reasoning_content"] = "".join(self.reasoning)
        if self.calls:
            message["tool_calls"] = self.calls
        elif message["content"] is None:
            message["content"] = ""
        return {"id": self.id, "object": "chat.completion", "created": self.created,
                "model": self.model, "system_fingerprint": None,
                "choices": [{"index": 0, "message": message, "logprobs": None,
                             "finish_reason": self.finish_reason()}],
                "usage": self.usage()}

