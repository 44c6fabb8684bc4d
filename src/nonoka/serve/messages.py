"""The Anthropic Messages API: ``POST /v1/messages`` and ``/v1/messages/count_tokens``.

A Messages client (Claude Code, the ``anthropic`` SDK) sends its whole history every
time, as a Chat Completions client does, so a request takes the same road
(``nonoka.serve.chat``): it becomes a bridge chat request and goes through the bridge's
decision chain, which continues, branches or starts a session line and stores the
exchange as that session's entries. The client runs its own tools, and retries a
failed model call itself (as Claude Code does): each request makes one model call,
and a retryable failure comes straight back with its ``retry-after``.

The client's own name for its conversation decides first: the
``x-claude-code-session-id`` header, then the ``session_id`` inside
``metadata.user_id`` (Claude Code's JSON, or its older ``..._session_<id>`` form), then
the signals every serve client has (``nonoka.serve.chat.session_signal``). A Claude
Code subagent (``x-claude-code-agent-id``) is a line of its own under its parent's;
Claude Code's side requests and compactions are told apart by
``nonoka.serve.claude_code``.

What the history carries reaches the ``anthropic:`` adapter whole: texts, images and
PDFs (``document`` blocks), tool calls and results (with their images and
``is_error``), thinking and redacted thinking with their signatures (sent back
unchanged), ``thinking``, ``metadata``, ``top_k`` and the other body fields, and the
``anthropic-beta`` header; a mid-conversation ``system`` message is refused (Claude
Code then sends its text in the user message). The answer's ``stop_reason`` is
Anthropic's, ``stop_sequence`` and ``pause_turn`` included.
The adapter places the prompt cache's breakpoints itself (the last system block, the
last tool, the last message: where Claude Code puts its own), and a top-level
``cache_control`` (automatic caching) is passed on; a client's marks on single blocks
are not copied one by one. A message (or ``system``) sent with its content as a plain
string is kept as one (``STRING_CONTENT`` in its provider metadata, stored with it), and
how the client sends the answers back (``STRING_ANSWERS``) goes with the call: the
adapter sends each as the client did, but where its own breakpoint needs a block.
A request's ``model`` is used when nonoka knows it as an ``anthropic:`` model (Claude
Code's small model for its side requests), else the server's model answers.

A server whose model is not ``anthropic:`` runs the same history on that model: the
neutral messages go to its adapter, which leaves out what its API cannot take (signed
thinking), the body's options are rewritten for it (``nonoka.serve.messages_translate``),
and the answer comes back in Anthropic's shape — its reasoning streamed as thinking
blocks with an empty signature, ``max_tokens`` told by the usage, errors typed by their
status.
A request's ``model`` naming a model nonoka knows (``openai:gpt-5``) picks it.

Errors have Anthropic's shape (``{"type": "error", "error": {"type", "message"}}``): an
upstream answer's own status and type (529 ``overloaded_error``, 429
``rate_limit_error`` with ``retry-after``, 400 ``invalid_request_error`` with the API's
message, such as ``prompt is too long``) pass through.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from collections.abc import Callable, Mapping
from itertools import chain
from pathlib import Path
from types import MappingProxyType
from typing import Any

from nonoka.bridge.choose import remember_summary
from nonoka.bridge.handler import BridgeHandler
from nonoka.errors import Failure
from nonoka.llm.anthropic_wire import STRING_ANSWERS, STRING_CONTENT
from nonoka.protocol.frames import Purpose, conversation_key
from nonoka.protocol.models import (
    AssistantMetadata,
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
from nonoka.redact import redact_text
from nonoka.serve.chat import SIGNAL_LENGTH, owned, owner_scope, session_signal
from nonoka.serve.claude_code import (
    continued_parts,
    is_compaction,
    is_side_request,
    shown_summary,
)
from nonoka.serve.errors import ApiError, failure_error, provider_error
from nonoka.serve.histories import KeptPasses, ParsedBodies
from nonoka.serve.keys import current_owner
from nonoka.serve.messages_translate import OutputLimits, overflow_message, translated
from nonoka.serve.model import Models
from nonoka.state.messages import FilePart, Message, ReasoningPart, TextPart, ToolCall
from nonoka.store.kept import KeptStores
from nonoka.store.reuse import StoreReuse
from nonoka.turn.service import TurnService

CLAUDE_SESSION_HEADER = "x-claude-code-session-id"
"""The header Claude Code names its session with."""
CLAUDE_AGENT_HEADER = "x-claude-code-agent-id"
"""The header a Claude Code subagent's requests add, naming the subagent."""
PROVIDER = "anthropic"
"""The ``provider_metadata`` key of what Anthropic sent (``nonoka.llm.anthropic_wire``)."""
MODEL_STOPS = MappingProxyType({"length": "max_tokens", "content_filter": "refusal"})
"""The model's own finish reason (``Finish.model_finish``) that an answer's
``stop_reason`` names, when no Anthropic ``stop_reason`` came with it."""
_OPTION_FIELDS = ("metadata", "thinking", "top_k", "output_config", "service_tier",
                  "context_management", "container", "mcp_servers", "cache_control",
                  "inference_geo", "speed")
"""Body fields passed on to the adapter as they are."""
_CREDENTIALS = frozenset({"authorization", "x-api-key", "api-key", "cookie",
                          "proxy-authorization"})
"""Request headers never passed on with the turn (the client's key to nonoka)."""
_PING_EVERY = 32
"""While thinking is held for its signature, a ``ping`` every this many pieces of it."""
_LEGACY_USER_ID = re.compile(r"_session_([0-9A-Za-z-]+)$")

Emit = Callable[[dict[str, Any]], None]


class MessagesError(ApiError):
    """An ``ApiError`` answered in Anthropic's error shape."""

    def body(self) -> dict[str, Any]:
        return anthropic_error_body(self.type, self.message)


def anthropic_error_body(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": redact_text(message)}}


def anthropic_error(exc: BaseException) -> MessagesError:
    """Any failure as Anthropic tells it."""
    if isinstance(exc, MessagesError):
        return exc
    if isinstance(exc, ApiError):
        return _as_messages_error(exc)
    from nonoka.errors import failure_of

    return failure_message_error(failure_of(exc))


def failure_message_error(failure: Failure) -> MessagesError:
    """A turn that failed: an upstream Anthropic error as Anthropic gave it, else the
    serve error in Anthropic's shape."""
    provider = failure.provider or {}
    status = provider.get("status")
    upstream = _anthropic_body(provider.get("body"))
    if failure.code == "model_error" and isinstance(status, int) and upstream is not None:
        kind, message = upstream
        wait = provider.get("retry_after")
        return MessagesError(status, message, type=kind,
                             retry_after=wait if isinstance(wait, int | float) else None)
    return _as_messages_error(failure_error(failure))


def _as_messages_error(error: ApiError) -> MessagesError:
    kinds = {400: "invalid_request_error", 401: "authentication_error",
             403: "permission_error", 404: "not_found_error", 413: "request_too_large",
             429: "rate_limit_error", 529: "overloaded_error"}
    kind = kinds.get(error.status, "api_error" if error.status >= 500 else
                     "invalid_request_error")
    return MessagesError(error.status, error.message, type=kind,
                         retry_after=error.retry_after)


def _anthropic_body(body: Any) -> tuple[str, str] | None:
    """``(type, message)`` of Anthropic's error body, or ``None``."""
    error = provider_error(body)
    if error is None or not isinstance(error.get("type"), str):
        return None
    return error["type"], str(error.get("message", ""))


def invalid(message: str) -> MessagesError:
    return MessagesError(400, message, type="invalid_request_error")


# -- the request ----------------------------------------------------------------------


def claude_session(headers: Mapping[str, str], body: Mapping[str, Any]) -> str | None:
    """Claude Code's session id: its header, else the ``session_id`` in
    ``metadata.user_id``."""
    named = headers.get(CLAUDE_SESSION_HEADER, "").strip()
    if not named:
        metadata = body.get("metadata")
        user_id = metadata.get("user_id") if isinstance(metadata, dict) else None
        if isinstance(user_id, str):
            named = _session_in(user_id)
    if not named:
        return None
    return _signal(named)


def claude_agent(headers: Mapping[str, str], session: str) -> str | None:
    """A Claude Code subagent's own line (``x-claude-code-agent-id``, sent with its
    parent's session id), under its parent's ``session`` signal."""
    agent = headers.get(CLAUDE_AGENT_HEADER, "").strip()
    return _signal(f"{session.removeprefix('claude-code:')}/agent:{agent}") if agent else None


def _signal(named: str) -> str:
    signal = f"claude-code:{named}"
    if len(signal) > SIGNAL_LENGTH:
        signal = f"claude-code:sha256:{hashlib.sha256(named.encode()).hexdigest()}"
    return signal


def _session_in(user_id: str) -> str:
    try:
        data = json.loads(user_id)
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("session_id"), str):
        return str(data["session_id"]).strip()
    found = _LEGACY_USER_ID.search(user_id)
    return found.group(1) if found else ""


def parse_messages(body: Any, headers: Mapping[str, str], project: Path, spec: str,
                   parsed: ParsedBodies[list[Message]] | None = None) -> ChatRequest:
    """The bridge request for a Messages API body; ``parsed``: the messages of the
    bodies parsed lately (``nonoka.serve.histories``)."""
    if not isinstance(body, dict):
        raise invalid("the request body must be a JSON object")
    if not isinstance(body.get("model"), str):
        raise invalid("model: Field required")
    if not isinstance(body.get("max_tokens"), int):
        raise invalid("max_tokens: Field required")
    given = body.get("messages")
    if not isinstance(given, list) or not given:
        raise invalid("messages: at least one message is required")
    messages = system_messages(body.get("system"))
    messages.extend(chain.from_iterable((parsed or ParsedBodies[list[Message]](0)).parsed(
        given, lambda raw, n: _messages_of(raw, f"messages.{n}"))))
    claude = claude_session(headers, body)
    agent = claude_agent(headers, claude) if claude is not None else None
    named = agent or claude or session_signal(headers, body)
    purpose = Purpose.CHAT
    if claude is not None:  # Claude Code's own requests (nonoka.serve.claude_code)
        purpose = (Purpose.COMPACTION if is_compaction(body) else
                   Purpose.TITLE if is_side_request(body, headers) else Purpose.CHAT)
    return ChatRequest(protocol=ProtocolSpec(features=["reasoning", "host_retries"]),
                       purpose=purpose,
                       messages=messages, tools=_tools(body.get("tools")), cwd=str(project),
                       model=spec, host_session_id=named,
                       host_parent_session_id=claude if agent is not None else None,
                       conversation_key=conversation_key(messages),
                       headers={k: v for k, v in headers.items()
                                if k.lower() not in _CREDENTIALS},
                       options=_options(body),
                       request_id=secrets.token_hex(8))


def system_messages(system: Any) -> list[Message]:
    if system is None or system == "":
        return []
    if isinstance(system, str):
        return [Message(role="system", content=system, provider_metadata=_as_string())]
    if not isinstance(system, list):
        raise invalid("system: must be a string or a list of text blocks")
    texts = [str(b.get("text", "")) for b in system
             if isinstance(b, dict) and b.get("type") == "text"]
    return [Message(role="system", content=t) for t in texts if t]


def _as_string() -> dict[str, Any]:
    """The ``provider_metadata`` of a message (or system prompt) the client sent with its
    ``content`` as a plain string: kept with it, so that it goes on as one
    (``nonoka.llm.anthropic_wire``)."""
    return {PROVIDER: dict(STRING_CONTENT)}


def _messages_of(raw: Any, param: str) -> list[Message]:
    if not isinstance(raw, dict) or raw.get("role") not in ("user", "assistant"):
        raise invalid(f"{param}.role: Input should be 'user' or 'assistant'")
    content = raw.get("content")
    blocks: list[Any] = ([{"type": "text", "text": content}] if isinstance(content, str)
                         else content if isinstance(content, list) else [])
    if not blocks and not isinstance(content, str):
        raise invalid(f"{param}.content: must be a string or a list of blocks")
    if raw["role"] == "assistant":
        answer = _assistant(blocks, param)
        return [answer.model_copy(update={"provider_metadata": _as_string()})
                if isinstance(content, str) else answer]
    found: list[Message] = []
    groups: list[list[TextPart | FilePart]] = [[]]
    for n, block in enumerate(blocks):
        at = f"{param}.content.{n}"
        if not isinstance(block, dict):
            raise invalid(f"{at}: a content block must be an object")
        if block.get("type") == "tool_result":
            found.append(_tool_result(block, at))
            continue
        part = _part(block, at)
        pieces = continued_parts(part.text) if isinstance(part, TextPart) else None
        if pieces is None:
            groups[-1].append(part)
        else:  # the summary a message of its own (nonoka.serve.claude_code)
            head, summary, rest = pieces
            groups[-1].append(TextPart(text=head))
            groups += [[TextPart(text=summary)], [TextPart(text=rest)] if rest else []]
    for parts in groups:
        if parts:
            texts = [p.text for p in parts if isinstance(p, TextPart)]
            only_text = len(parts) == 1 and isinstance(parts[0], TextPart)
            found.append(Message(role="user", content="\n".join(texts),
                                 parts=None if only_text else parts))
    if isinstance(content, str) and len(found) == 1:  # kept: it goes on as a string
        found[0] = found[0].model_copy(update={"provider_metadata": _as_string()})
    return found


def _part(block: dict[str, Any], at: str) -> TextPart | FilePart:
    kind = block.get("type")
    if kind == "text":
        return TextPart(text=str(block.get("text", "")))
    if kind in ("image", "document"):
        source = block.get("source")
        if not isinstance(source, dict):
            raise invalid(f"{at}.source: Field required")
        title = block.get("title")
        name = title if isinstance(title, str) else None
        if source.get("type") == "base64":
            return FilePart(media_type=str(source.get("media_type") or ""),
                            data=str(source.get("data", "")), filename=name)
        if source.get("type") == "url":
            media = "application/pdf" if kind == "document" else "image/*"
            return FilePart(media_type=media, url=str(source.get("url", "")), filename=name)
        if source.get("type") == "text":
            import base64

            data = base64.b64encode(str(source.get("data", "")).encode()).decode()
            return FilePart(media_type="text/plain", data=data, filename=name)
        raise invalid(f"{at}.source.type: {source.get('type')!r} is not available in "
                      "nonoka serve yet")
    raise invalid(f"{at}.type: content block {kind!r} is not available in nonoka serve yet")


def _tool_result(block: dict[str, Any], at: str) -> Message:
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str) or not call_id:
        raise invalid(f"{at}.tool_use_id: Field required")
    content = block.get("content")
    parts: list[TextPart | FilePart] = []
    if isinstance(content, str):
        parts.append(TextPart(text=content))
    elif isinstance(content, list):
        for n, inner in enumerate(content):
            if not isinstance(inner, dict):
                raise invalid(f"{at}.content.{n}: a content block must be an object")
            parts.append(_part(inner, f"{at}.content.{n}"))
    text = "\n".join(p.text for p in parts if isinstance(p, TextPart))
    has_files = any(isinstance(p, FilePart) for p in parts)
    failed = block.get("is_error") is True  # sent on as Anthropic's is_error
    return Message(role="tool", content=text, tool_call_id=call_id,
                   parts=parts if has_files else None,
                   provider_metadata={PROVIDER: {"is_error": True}} if failed else None)


def _assistant(blocks: list[Any], param: str) -> Message:
    texts: list[str] = []
    reasoning: list[ReasoningPart] = []
    calls: list[ToolCall] = []
    for n, block in enumerate(blocks):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind == "thinking":
            reasoning.append(ReasoningPart(text=str(block.get("thinking", "")),
                                           provider_metadata={PROVIDER: {
                                               "signature": block.get("signature")}}))
        elif kind == "redacted_thinking":
            reasoning.append(ReasoningPart(provider_metadata={PROVIDER: {
                "data": block.get("data")}}))
        elif kind == "tool_use":
            calls.append(ToolCall(id=str(block.get("id", "")), name=str(block.get("name", "")),
                                  arguments=json.dumps(block.get("input") or {},
                                                       ensure_ascii=False)))
        else:
            raise invalid(f"{param}.content.{n}.type: content block {kind!r} is not "
                          "available in nonoka serve yet")
    return Message(role="assistant", content="".join(texts), tool_calls=calls or None,
                   reasoning=reasoning or None)


def _tools(given: Any) -> list[HostToolSpec]:
    if given is None:
        return []
    if not isinstance(given, list):
        raise invalid("tools: must be a list")
    tools = []
    for n, tool in enumerate(given):
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str) or \
                tool.get("type") not in (None, "custom"):
            raise invalid(f"tools.{n}: only client tools (name, input_schema) are available "
                          "in nonoka serve yet")
        schema = tool.get("input_schema")
        tools.append(HostToolSpec(name=tool["name"], description=tool.get("description") or "",
                                  **({"parameters": schema} if isinstance(schema, dict)
                                     else {})))
    return tools


def _options(body: Mapping[str, Any]) -> CallOptionsSpec:
    fields: dict[str, Any] = {"max_tokens": body["max_tokens"]}
    for name in ("temperature", "top_p", "tool_choice"):
        if body.get(name) is not None:
            fields[name] = body[name]
    if isinstance(body.get("stop_sequences"), list):
        fields["stop"] = body["stop_sequences"]
    extra = {name: body[name] for name in _OPTION_FIELDS if body.get(name) is not None}
    answers = "".join("s" if isinstance(m.get("content"), str) else "b"
                      for m in body["messages"] if m.get("role") == "assistant")
    if "s" in answers:  # how the client keeps the answers nonoka gave it
        extra[STRING_ANSWERS] = answers
    if extra:
        fields["extra"] = extra
    try:
        return CallOptionsSpec.model_validate(fields)
    except ValueError as exc:
        raise invalid(f"call options: {exc}") from None


def count_tokens(body: Any) -> dict[str, Any]:
    """``/v1/messages/count_tokens``: an estimate (about four characters a token) of
    what the request's system, messages and tools hold."""
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        raise invalid("messages: Field required")
    counted = {name: body.get(name) for name in ("system", "messages", "tools")}
    text = json.dumps(counted, ensure_ascii=False, separators=(",", ":"))
    return {"input_tokens": max(1, len(text) // 4)}


# -- the answer -----------------------------------------------------------------------


class Messages:
    """``POST /v1/messages`` through the bridge's decision chain."""

    def __init__(self, project: Path, models: Models, reuse: StoreReuse | None = None,
                 kept: KeptStores | None = None, passes: KeptPasses | None = None,
                 parsed: ParsedBodies[list[Message]] | None = None) -> None:
        self.project = project
        self.models = models
        self.reuse = reuse if reuse is not None else StoreReuse()
        self.kept = kept if kept is not None else KeptStores()
        """The project's stores between requests (shared with Chat Completions)."""
        self.passes = passes if passes is not None else KeptPasses(
            self.reuse, self.kept, models.workers)
        """The bridge's passes over the conversations answered lately (the server's)."""
        self.parsed = parsed if parsed is not None else ParsedBodies[list[Message]]()
        """The messages of the bodies parsed lately (the server's)."""
        self.limits = OutputLimits(project)
        """The most output tokens each model takes, for a translated request."""

    async def create(self, body: Any, headers: Mapping[str, str], emit: Emit | None = None,
                     opened: Callable[[str], None] | None = None) -> dict[str, Any]:
        """One answer: the whole message, or (``emit``) its events as they come."""
        default = self.models.pick(None)
        asked = body.get("model") if isinstance(body, dict) else None
        if default.startswith(f"{PROVIDER}:"):
            spec = self.models.pick(f"{PROVIDER}:{asked}" if isinstance(asked, str) and asked
                                    and ":" not in asked else None)
        else:  # another vendor's model answers (Claude Code's model names are not its)
            spec = self.models.pick(asked if isinstance(asked, str) else None)
        translate = not spec.startswith(f"{PROVIDER}:")
        parsed = parse_messages(body, headers, self.project, spec, self.parsed)
        if translate:  # nonoka.serve.messages_translate
            try:
                parsed = translated(parsed, body, self.limits.most(spec))
            except ValueError as exc:
                raise invalid(f"call options: {exc}") from None
        request = owned(parsed, current_owner())
        if parsed.host_parent_session_id:  # the parent's line is the owner's too
            parent = owned(parsed.model_copy(update={
                "host_session_id": parsed.host_parent_session_id}), current_owner())
            request = request.model_copy(update={
                "host_parent_session_id": parent.host_session_id})
        if request.purpose == Purpose.COMPACTION:
            request = await self._compacting(request)
        answer = _Answer(str(body["model"]), emit, opened,
                         parsed.options.max_tokens if translate and parsed.options else None)
        key = request.conversation_key
        reuse = self.passes.take(key)
        handler = BridgeHandler(request, answer.on_event, reuse=reuse,
                                owner_scope=owner_scope(current_owner()))
        await handler.handle()
        self.passes.give(key, reuse)
        if request.purpose == Purpose.COMPACTION and request.session_id and \
                answer.failure is None:
            await self._remember(request.session_id, answer.text())
        return answer.result()

    async def _compacting(self, request: ChatRequest) -> ChatRequest:
        """A Claude Code compaction names the session its line holds now (the latest),
        as OpenCode's does; a line nonoka has not stored yet has nothing to compact."""
        service = TurnService.open(self.project, reuse=self.reuse)
        try:
            line = await service.host_sessions(request.host_session_id or "")
        finally:
            await service.close()
        if not line:
            return request.model_copy(update={"purpose": Purpose.CHAT})
        return request.model_copy(update={"session_id": line[0]})

    async def _remember(self, session_id: str, answer: str) -> None:
        """The summary as Claude Code will show it, recorded with the line's session, so
        the turn that opens with it edits that session in place."""
        summary = shown_summary(answer)
        if not summary:
            return
        service = TurnService.open(self.project, reuse=self.reuse)
        try:
            await remember_summary(service.index, session_id, summary)
        finally:
            await service.close()


class _Answer:
    """The bridge's events for one request, as a ``message`` or its stream. Thinking
    is held until its signature arrives (after the model call), then sent with what
    followed it, so the blocks keep the API's order: thinking, text, tool calls.
    ``limit``: set when another vendor's model answered
    (``nonoka.serve.messages_translate``), the request's ``max_tokens``: its reasoning
    streams as it comes, as thinking blocks with an empty signature (there is none to
    wait for), its errors take their Anthropic type from their status, and an answer
    whose output reached ``limit`` stopped at ``max_tokens`` (the turn does not carry
    another API's finish reason through)."""

    def __init__(self, model: str, emit: Emit | None,
                 opened: Callable[[str], None] | None, limit: int | None = None) -> None:
        self.model = model
        self.limit = limit
        self.translated = limit is not None
        self.emit = emit
        self.opened = opened
        self.id = "msg_" + secrets.token_hex(12)
        self.content: list[dict[str, Any]] = []
        self.thinking: list[str] = []
        self.held: list[tuple[str, Any]] = []
        self.failure: Failure | None = None
        self.finish: Finish | None = None
        self.started = False
        self.open_text: int | None = None
        self.open_thinking: int | None = None
        """The thinking block another vendor's reasoning is streaming into."""
        self.stopped: dict[str, Any] = {}
        """Anthropic's stop reason as the adapter kept it, when the finish loses it."""

    def on_event(self, event: BaseEvent) -> None:
        if isinstance(event, SessionInit):
            if self.opened is not None:
                self.opened(event.session_id)
        elif isinstance(event, ReasoningDeltaEvent) and self.translated:
            self._think(event.text)
        elif isinstance(event, ReasoningDeltaEvent):
            self.thinking.append(event.text)
            self.held.append(("thinking", event.text))
            if len(self.thinking) % _PING_EVERY == 1:
                self._ping()  # bytes keep flowing while the thinking is held
        elif isinstance(event, TextDelta):
            self._after_thinking(("text", event.text))
        elif isinstance(event, ToolCallEvent):
            self._after_thinking(("tool", event))
        elif isinstance(event, AssistantMetadata):
            stopped = (event.provider_metadata or {}).get(PROVIDER)
            if isinstance(stopped, dict) and isinstance(stopped.get("stop_reason"), str):
                self.stopped = stopped  # stop_sequence (and which), pause_turn, refusal
            self._thinking_done([] if self.translated else event.reasoning)
        elif isinstance(event, ErrorEvent):
            provider = event.details.get("provider")
            self.failure = Failure(event.code, event.message, event.retryable,
                                   provider if isinstance(provider, dict) else None)
        elif isinstance(event, Finish):
            self.finish = event
            self._thinking_done([])
            self._end()

    def _after_thinking(self, item: tuple[str, Any]) -> None:
        if self.held:
            self.held.append(item)
        else:
            self._apply(item)

    def _thinking_done(self, reasoning: list[ReasoningPart]) -> None:
        held, self.held = self.held, []
        for part in reasoning:
            sent = (part.provider_metadata or {}).get(PROVIDER) or {}
            data = sent.get("data", sent.get("redactedData"))
            if isinstance(data, str):
                self._block({"type": "redacted_thinking", "data": data})
            else:
                self._block({"type": "thinking", "thinking": part.text,
                             "signature": str(sent.get("signature") or "")})
        for kind, value in held:
            if kind != "thinking":
                self._apply((kind, value))

    def _apply(self, item: tuple[str, Any]) -> None:
        kind, value = item
        if kind == "text":
            if self.open_text is None:
                self._close_text()
                self.content.append({"type": "text", "text": ""})
                self.open_text = len(self.content) - 1
                self._send({"type": "content_block_start", "index": self.open_text,
                            "content_block": {"type": "text", "text": ""}})
            self.content[self.open_text]["text"] += value
            self._send({"type": "content_block_delta", "index": self.open_text,
                        "delta": {"type": "text_delta", "text": value}})
        else:
            event: ToolCallEvent = value
            try:
                given = json.loads(event.arguments or "{}")
            except ValueError:
                given = {}
            self._block({"type": "tool_use", "id": event.tool_call_id,
                         "name": event.tool_name,
                         "input": given if isinstance(given, dict) else {}},
                        event.arguments or "{}")

    def _block(self, block: dict[str, Any], arguments: str = "") -> None:
        """A whole block: its start, its one delta, its stop."""
        self._close_text()
        index = len(self.content)
        self.content.append(block)
        kind = block["type"]
        start: dict[str, Any]
        if kind == "thinking":
            start = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [{"type": "thinking_delta", "thinking": block["thinking"]},
                      {"type": "signature_delta", "signature": block["signature"]}]
        elif kind == "tool_use":
            start = {**block, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": arguments}]
        else:
            start, deltas = block, []
        self._send({"type": "content_block_start", "index": index, "content_block": start})
        for delta in deltas:
            self._send({"type": "content_block_delta", "index": index, "delta": delta})
        self._send({"type": "content_block_stop", "index": index})

    def _think(self, text: str) -> None:
        """Another vendor's reasoning, streamed into a thinking block as it comes."""
        if self.open_thinking is None:
            self._close_text()
            self.content.append({"type": "thinking", "thinking": "", "signature": ""})
            self.open_thinking = len(self.content) - 1
            self._send({"type": "content_block_start", "index": self.open_thinking,
                        "content_block": {"type": "thinking", "thinking": "",
                                          "signature": ""}})
        self.content[self.open_thinking]["thinking"] += text
        self._send({"type": "content_block_delta", "index": self.open_thinking,
                    "delta": {"type": "thinking_delta", "thinking": text}})

    def _close_text(self) -> None:
        if self.open_thinking is not None:  # no signature: nothing could verify one
            self._send({"type": "content_block_delta", "index": self.open_thinking,
                        "delta": {"type": "signature_delta", "signature": ""}})
            self._send({"type": "content_block_stop", "index": self.open_thinking})
            self.open_thinking = None
        if self.open_text is not None:
            self._send({"type": "content_block_stop", "index": self.open_text})
            self.open_text = None

    def _send(self, event: dict[str, Any]) -> None:
        if self.emit is None:
            return
        self._start()
        self.emit(event)

    def _ping(self) -> None:
        if self.emit is None:
            return
        if self.started:
            self.emit({"type": "ping"})
        else:
            self._start()

    def _start(self) -> None:
        if self.emit is not None and not self.started:
            self.started = True
            self.emit({"type": "message_start", "message": {
                **self._message([], None), "usage": {"input_tokens": 0, "output_tokens": 0}}})
            self.emit({"type": "ping"})

    def _end(self) -> None:
        if self.emit is None:
            return
        if self.failure is not None:
            if self.started:  # the stream says so; before it, the request fails
                self._close_text()
                self.emit(self._error(self.failure).body())
            return
        self._close_text()
        self._start()
        usage = self.usage()
        self.emit({"type": "message_delta",
                   "delta": {"stop_reason": self.stop_reason(),
                             "stop_sequence": self.stop_sequence()},
                   "usage": usage})
        self.emit({"type": "message_stop"})

    def stop_reason(self) -> str:
        reason = self.finish.finish_reason if self.finish is not None else "stop"
        if any(b["type"] == "tool_use" for b in self.content):
            return "tool_use"
        if self.stopped:
            return str(self.stopped["stop_reason"])
        model_finish = self.finish.model_finish if self.finish is not None else None
        if model_finish in MODEL_STOPS:
            return MODEL_STOPS[str(model_finish)]
        if self.limit is not None and self.finish is not None and \
                self.finish.usage.output_tokens >= self.limit:
            return "max_tokens"
        return {"limit": "max_tokens", "length": "max_tokens"}.get(str(reason), "end_turn")

    def stop_sequence(self) -> str | None:
        sequence = self.stopped.get("stop_sequence")
        return sequence if isinstance(sequence, str) and \
            self.stop_reason() == "stop_sequence" else None

    def usage(self) -> dict[str, Any]:
        totals = self.finish.usage if self.finish is not None else None
        if totals is None:
            return {"input_tokens": 0, "output_tokens": 0}
        read = totals.cache_read_tokens or 0
        written = totals.cache_write_tokens or 0
        return {"input_tokens": max(0, totals.input_tokens - read - written),
                "output_tokens": totals.output_tokens,
                "cache_read_input_tokens": read, "cache_creation_input_tokens": written}

    def _message(self, content: list[dict[str, Any]], stop: str | None) -> dict[str, Any]:
        return {"id": self.id, "type": "message", "role": "assistant", "model": self.model,
                "content": content, "stop_reason": stop,
                "stop_sequence": self.stop_sequence() if stop else None}

    def text(self) -> str:
        """The answer's text blocks, joined."""
        return "".join(b["text"] for b in self.content if b["type"] == "text")

    def _error(self, failure: Failure) -> MessagesError:
        """Anthropic's error for ``failure``: another vendor's error body is not
        Anthropic's, so its type comes from its status."""
        if self.translated:
            error = _as_messages_error(failure_error(failure))
            overflow = overflow_message(failure)
            return error if overflow is None else MessagesError(
                error.status, overflow, type=error.type, retry_after=error.retry_after)
        return failure_message_error(failure)

    def result(self) -> dict[str, Any]:
        if self.failure is not None and not self.started:
            raise self._error(self.failure)
        return {**self._message(self.content, self.stop_reason()), "usage": self.usage()}
