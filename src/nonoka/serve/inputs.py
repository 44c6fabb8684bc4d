"""A ``POST /v1/responses`` body, checked, and its input as what a turn brings.

The input's items become chat messages, the way nonoka stores a conversation: a user,
system or developer message is one message; an assistant's message, reasoning,
function, custom and built-in (``shell_call``...) tool calls and hosted tools' items
(``web_search_call``...: kept whole, in their place, as the Responses adapter keeps
them) that follow one another are one assistant message; a ``function_call_output``
(or ``custom_tool_call_output``, or a built-in call's output) is a tool message; an
``additional_tools`` item is a system message that keeps it
(``nonoka.serve.additional``). ``item_reference`` items (and reasoning items given by
id only) are read from the store first (``Resolver``).

What the turn then does (``plan``): a trailing user message is its prompt; the
function call outputs before it answer the calls of the message just before them (the
calls the previous response ended with, when the input starts with them: every one of
those must be answered, as in OpenAI's API); everything else is history added first,
but for its first messages that repeat what the line already holds after the response
it continues (``repeats``): those are the line's own entries.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from nonoka.bridge.entry_rules import same_message
from nonoka.llm.base import CallOptions
from nonoka.llm.responses import CUSTOM_CALL, OPENAI_RESPONSES
from nonoka.llm.responses_builtin import (
    BUILTIN_CALLS,
    BUILTIN_OUTPUTS,
    builtin_call,
    output_call_id,
    output_text,
)
from nonoka.serve.additional import ADDITIONAL, carrier
from nonoka.serve.compaction import SUMMARY_PREFIX, read_compaction
from nonoka.serve.errors import invalid
from nonoka.serve.hosted import CUSTOM_OUTPUT, HOSTED_ITEMS, client_names
from nonoka.serve.hosted import checked as checked_tool
from nonoka.serve.included import included
from nonoka.serve.items import content_of
from nonoka.serve.reasoning import unsealed
from nonoka.serve.record import ECHOED
from nonoka.state.entries import MemoryEntry
from nonoka.state.messages import Message, ReasoningPart, ToolCall, ToolResult
from nonoka.turn.service import TurnInput

Resolver = Callable[[str, str], Awaitable[dict[str, Any]]]
"""Reads the item an id names (the id, and the request parameter it came in)."""


@dataclass(frozen=True)
class CreateRequest:
    """The fields of a create request that nonoka acts on."""

    model: str | None
    input: list[Any]
    instructions: str | None
    previous_response_id: str | None
    store: bool
    stream: bool
    tools: tuple[dict[str, Any], ...]
    params: dict[str, Any]
    """The ``ECHOED`` fields the request set."""
    conversation: str | None = None
    """The conversation the response runs in (``nonoka.serve.conversations``)."""
    include: tuple[str, ...] = ()
    """The request's ``include`` values (``nonoka.serve.included``)."""

    def call_options(self, responses_api: bool = False) -> CallOptions | None:
        """The options the model call is made with, in their Chat Completions forms
        (each adapter translates them for its API); ``responses_api``: for an
        ``openai-responses:`` model, which is also given ``text.verbosity`` as asked."""
        params = self.params
        fields: dict[str, Any] = {}
        verbosity = (params.get("text") or {}).get("verbosity")
        if responses_api and isinstance(verbosity, str):
            fields["extra"] = {"verbosity": verbosity}
        if params.get("max_output_tokens") is not None:
            fields["max_tokens"] = params["max_output_tokens"]
        for name in ("temperature", "top_p"):
            if params.get(name) is not None:
                fields[name] = params[name]
        choice = params.get("tool_choice")
        if isinstance(choice, str):
            fields["tool_choice"] = choice
        elif isinstance(choice, dict) and choice.get("type") == "function":
            fields["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
        elif isinstance(choice, dict):  # a hosted or custom tool's: the Responses API's
            fields["tool_choice"] = dict(choice)
        text_format = (params.get("text") or {}).get("format")
        if isinstance(text_format, dict) and text_format.get("type") == "json_object":
            fields["response_format"] = {"type": "json_object"}
        elif isinstance(text_format, dict) and text_format.get("type") == "json_schema":
            schema = {k: v for k, v in text_format.items() if k != "type"}
            fields["response_format"] = {"type": "json_schema", "json_schema": schema}
        effort = (params.get("reasoning") or {}).get("effort")
        if isinstance(effort, str):
            fields["reasoning_effort"] = effort
        return CallOptions(**fields) if fields else None


def conversation_of(value: Any) -> str | None:
    """The conversation id a create request names (a string or ``{"id": ...}``)."""
    if value is None:
        return None
    ident = value.get("id") if isinstance(value, dict) else value
    if not isinstance(ident, str) or not ident:
        raise invalid("conversation must be a conversation id or {\"id\": ...}",
                      "conversation")
    return ident


def parse_create(body: Any) -> CreateRequest:
    """The request, or an ``ApiError`` naming the parameter that is wrong."""
    if not isinstance(body, dict):
        raise invalid("the request body must be a JSON object")
    if body.get("background") is True and body.get("store") is False:
        raise invalid("background can only be used when `store` is true", "background")
    if body.get("background") not in (None, False, True):
        raise invalid("background must be a boolean", "background")
    conversation = conversation_of(body.get("conversation"))
    if conversation is not None and body.get("previous_response_id") is not None:
        raise invalid("Mutually exclusive parameters: Ensure you are only providing one of: "
                      "'previous_response_id' or 'conversation'.", "conversation",
                      code="mutually_exclusive_parameters")
    if conversation is not None and body.get("store") is False:
        raise invalid("a response in a conversation is stored: store cannot be false",
                      "store")
    given = body.get("input")
    if isinstance(given, str):
        items: list[Any] = [{"type": "message", "role": "user", "content": given}]
    elif isinstance(given, list) and given:
        items = given
    else:
        raise invalid("input must be a string or a non-empty list of items", "input")
    model = _optional(body, "model", str)
    instructions = _optional(body, "instructions", str)
    previous = _optional(body, "previous_response_id", str)
    store = _optional(body, "store", bool)
    stream = _optional(body, "stream", bool)
    params = {name: body[name] for name in ECHOED if body.get(name) is not None}
    _check_params(params)
    return CreateRequest(model=model, input=items, instructions=instructions,
                         previous_response_id=previous, store=True if store is None else store,
                         stream=bool(stream), tools=_tools(body.get("tools")), params=params,
                         conversation=conversation,
                         include=included(body.get("include"), "include"))


def _optional(body: dict[str, Any], name: str, kind: type) -> Any:
    value = body.get(name)
    if value is not None and not isinstance(value, kind):
        raise invalid(f"{name} must be a {'boolean' if kind is bool else 'string'}", name)
    return value


def _check_params(params: dict[str, Any]) -> None:
    metadata = params.get("metadata")
    if metadata is not None and (not isinstance(metadata, dict) or len(metadata) > 16 or any(
            not isinstance(k, str) or not isinstance(v, str) for k, v in metadata.items())):
        raise invalid("metadata must be an object of at most 16 string values", "metadata")
    choice = params.get("tool_choice")
    if choice is not None and choice not in ("auto", "none", "required") and not (
            isinstance(choice, dict) and isinstance(choice.get("type"), str)):
        raise invalid("tool_choice must be auto, none, required or "
                      '{"type": "function", "name": ...} (or another tool choice object)',
                      "tool_choice")
    text = params.get("text")
    if text is not None and not isinstance(text, dict):
        raise invalid('text must be an object, e.g. {"format": {"type": "text"}, '
                      '"verbosity": "low"}', "text")
    for name in ("temperature", "top_p"):
        if name in params and not isinstance(params[name], int | float):
            raise invalid(f"{name} must be a number", name)
    limit = params.get("max_output_tokens")
    if limit is not None and (not isinstance(limit, int) or limit < 1):
        raise invalid("max_output_tokens must be a positive integer", "max_output_tokens")


def _tools(given: Any, at: str = "tools") -> tuple[dict[str, Any], ...]:
    """The tools ``given`` (the request's, or an ``additional_tools`` item's: ``at``),
    checked, a function tool with all its fields."""
    if given is None:
        return ()
    if not isinstance(given, list):
        raise invalid("tools must be a list", at)
    tools: list[dict[str, Any]] = []
    names: set[str] = set()
    for n, tool in enumerate(given):
        param = f"{at}[{n}]"
        if not isinstance(tool, dict):
            raise invalid("a tool must be an object", param)
        if tool.get("type") != "function":
            found = checked_tool(tool, param)
            for called in client_names(found):
                if called in names:
                    raise invalid(f"two tools are named {called!r}", f"{param}.name")
                names.add(called)
            tools.append(found)
            continue
        name = tool.get("name")
        if not isinstance(name, str) or not name:
            raise invalid("a function tool needs a name", f"{param}.name")
        if name in names:
            raise invalid(f"two tools are named {name!r}", f"{param}.name")
        names.add(name)
        parameters = tool.get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            raise invalid("parameters must be a JSON Schema object", f"{param}.parameters")
        description = tool.get("description")
        tools.append({"type": "function", "name": name,
                      "description": description if isinstance(description, str) else None,
                      "parameters": parameters, "strict": tool.get("strict")})
    return tuple(tools)


# -- items to messages ---------------------------------------------------------------------


async def resolved(items: Sequence[Any], resolve: Resolver) -> list[tuple[dict[str, Any], str]]:
    """The items with each reference replaced by the item it names, with its parameter."""
    out: list[tuple[dict[str, Any], str]] = []
    for n, item in enumerate(items):
        param = f"input[{n}]"
        if not isinstance(item, dict):
            raise invalid("an input item must be an object", param)
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "item_reference" or (kind == "reasoning" and item.get("id")
                                        and not item.get("summary")
                                        and not item.get("content")
                                        and not item.get("encrypted_content")):
            ident = item.get("id")
            if not isinstance(ident, str):
                raise invalid("an item reference needs the item's id", f"{param}.id")
            out.append((await resolve(ident, param), param))
        else:
            out.append(({**item, "type": kind}, param))
    return out


def messages_of(items: Sequence[tuple[dict[str, Any], str]]) -> list[Message]:
    """The items as chat messages (see the module's docstring)."""
    messages: list[Message] = []
    answer: _Answer | None = None
    for item, param in items:
        kind = item.get("type")
        role = item.get("role")
        if (kind == "message" and role == "assistant") or kind in _ANSWER_ITEMS:
            if answer is None or not answer.takes(kind):
                if answer is not None:
                    messages.append(answer.message())
                answer = _Answer()
            answer.add(item, param)
            continue
        if answer is not None:
            messages.append(answer.message())
            answer = None
        messages.append(_message(item, param))
    if answer is not None:
        messages.append(answer.message())
    return messages


def _message(item: dict[str, Any], param: str) -> Message:
    """A user, system or developer message, a compaction or a function call output."""
    kind = item.get("type")
    role = item.get("role")
    if kind == "message":
        if role not in ("user", "system", "developer"):
            raise invalid(f"message role {role!r} is not one of user, assistant, system, "
                          "developer", f"{param}.role")
        text, parts = content_of(item.get("content"), f"{param}.content")
        return Message(role="user" if role == "user" else "system", content=text,
                       parts=parts)
    if kind in ("compaction", "compaction_summary"):
        found = read_compaction(item)
        if found is None:
            raise invalid("this compaction item was not made by nonoka serve: send the "
                          "conversation it replaced instead", f"{param}.encrypted_content")
        return Message(role="user", content=SUMMARY_PREFIX + found[1])
    if kind == ADDITIONAL:
        given = item.get("tools")
        if not isinstance(given, list):
            raise invalid("an additional_tools item needs a list of tools", f"{param}.tools")
        _tools(given, f"{param}.tools")
        return carrier(item, given, param)
    if kind in BUILTIN_OUTPUTS:
        call_id = output_call_id(item)
        if not isinstance(call_id, str) or not call_id:
            named = "id" if kind == "local_shell_call_output" else "call_id"
            raise invalid(f"a {kind} needs the {named} of the call it answers",
                          f"{param}.{named}")
        return Message(role="tool", content=output_text(item), tool_call_id=call_id)
    if kind in ("function_call_output", CUSTOM_OUTPUT):
        call_id = item.get("call_id")
        if not isinstance(call_id, str) or not call_id:
            raise invalid(f"a {kind} needs the call_id it answers", f"{param}.call_id")
        output = item.get("output")
        text, parts = content_of(output if output is not None else "", f"{param}.output")
        return Message(role="tool", content=text, tool_call_id=call_id, parts=parts)
    raise invalid(f"input item type {kind!r} is not supported", f"{param}.type")


_CALLS = frozenset({"function_call", CUSTOM_CALL, *BUILTIN_CALLS})
_ANSWER_ITEMS = frozenset({"reasoning", *_CALLS, *HOSTED_ITEMS})
"""The items besides an assistant's message that make up an answer."""


class _Answer:
    """An assistant message being gathered from consecutive items."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.calls: list[ToolCall] = []
        self.reasoning: list[ReasoningPart] = []
        self.layout: list[dict[str, Any]] = []
        """The items in order, as the Responses adapter lays an answer out; kept when a
        hosted tool's item is among them."""

    def takes(self, kind: Any) -> bool:
        """Whether an item of ``kind`` still belongs to this message (a message's text
        and reasoning come before its calls)."""
        return kind in _CALLS or not self.calls

    def add(self, item: dict[str, Any], param: str) -> None:
        kind = item.get("type")
        if kind in HOSTED_ITEMS:
            self.layout.append({"type": kind, "item": item})
        elif kind in _CALLS:
            self.layout.append({"type": "function_call"})
            self.calls.append(_call(item, param))
        elif kind == "reasoning":
            parts = unsealed(item.get("encrypted_content"))
            if parts is not None:  # nonoka's own: the provider's reasoning comes back
                self.reasoning.extend(parts)
                self.layout.extend({"type": "reasoning"} for _ in parts)
                return
            self.layout.append({"type": "reasoning"})
            summary = item.get("summary") or item.get("content") or []
            text = "".join(p.get("text", "") for p in summary if isinstance(p, dict))
            if text:
                self.reasoning.append(ReasoningPart(text=text))
        else:
            text, _ = content_of(item.get("content"), f"{param}.content")
            self.layout.append({"type": "message", "text": text})
            self.texts.append(text)

    def message(self) -> Message:
        hosted = any("item" in entry for entry in self.layout)
        return Message(role="assistant", content="\n".join(self.texts),
                       tool_calls=self.calls or None, reasoning=self.reasoning or None,
                       provider_metadata={OPENAI_RESPONSES: {"items": self.layout}}
                       if hosted else None)


def _call(item: dict[str, Any], param: str) -> ToolCall:
    """A function call (``namespace`` kept for the upstream) or a custom tool's call
    (its ``input`` as the call's arguments)."""
    kind = item.get("type")
    call_id, name = item.get("call_id"), item.get("name")
    if kind in BUILTIN_CALLS:
        if not isinstance(call_id, str) or not call_id:
            raise invalid(f"a {kind} needs its call_id", f"{param}.call_id")
        return builtin_call(item)
    if not isinstance(call_id, str) or not isinstance(name, str):
        raise invalid(f"a {kind} needs call_id and name", param)
    if kind == CUSTOM_CALL:
        given = item.get("input")
        kept = {"type": CUSTOM_CALL, **({"namespace": item["namespace"]}
                                        if isinstance(item.get("namespace"), str) else {})}
        return ToolCall(id=call_id, name=name, arguments=given if isinstance(given, str)
                        else "", provider_metadata={OPENAI_RESPONSES: kept})
    arguments = item.get("arguments")
    namespace = item.get("namespace")
    return ToolCall(id=call_id, name=name,
                    arguments=arguments if isinstance(arguments, str) else "{}",
                    provider_metadata={OPENAI_RESPONSES: {"namespace": namespace}}
                    if isinstance(namespace, str) else None)


# -- what the turn brings ----------------------------------------------------------------


def repeats(history: Sequence[Message], stored: Sequence[MemoryEntry]) -> int:
    """How many of ``history``'s first messages are the entries ``stored`` holds (in
    order, as the bridge compares a host's copy: call arguments as JSON values, reasoning
    the client left out agreeing with any). A client continuing a response with
    ``previous_response_id`` may send again what the line already holds after it — the
    AI SDK resends its current turn's steps with the conversation's first id — and
    those are the stored entries, with what the client dropped (reasoning, signatures)."""
    count = 0
    for message, entry in zip(history, stored, strict=False):
        if not same_message(entry.role, entry.content, entry.metadata,
                            message.role, message.content, message):
            break
        count += 1
    return count


def resent(history: Sequence[Message], stored: Sequence[MemoryEntry]) -> int:
    """How many of ``history``'s first messages a conversation's ``stored`` entries hold
    since its last user message: the system messages right before it, that message,
    then its tool results in order (the assistant entries between them are the
    conversation's items, which a client leaves out). The AI SDK, given a
    ``conversation``, sends each step the turn's system prompt, question and earlier
    results again before the new ones."""
    asked = next((n for n in range(len(stored) - 1, -1, -1) if stored[n].role == "user"),
                 None)
    if asked is None:
        return 0
    first = asked
    while first > 0 and stored[first - 1].role == "system":
        first -= 1
    held = [*stored[first:asked + 1], *(e for e in stored[asked + 1:] if e.role == "tool")]
    return repeats(history, held)


def plan(messages: list[Message], pending: Sequence[ToolCall]) -> tuple[list[Message], TurnInput]:
    """The history added before the turn, and the turn's input (see the module's
    docstring); ``pending``: the calls the previous response ended with."""
    rest = list(messages)
    prompt = rest.pop() if rest and rest[-1].role == "user" else None
    outputs: list[Message] = []
    while rest and rest[-1].role == "tool":
        outputs.insert(0, rest.pop())
    waiting = {c.id for c in pending}
    if rest and waiting and rest[-1].role == "assistant" and rest[-1].tool_calls and \
            {c.id for c in rest[-1].tool_calls} <= waiting:
        rest.pop()  # the previous response's calls, sent again: already stored
    if waiting:
        if rest:
            raise invalid(f"No tool output found for function call {sorted(waiting)[0]}.",
                          "input")
        answers = waiting
    elif outputs:
        last = rest[-1] if rest else None
        if last is None or last.role != "assistant" or not last.tool_calls:
            raise invalid("No tool call found for function call output with call_id "
                          f"{outputs[0].tool_call_id}.", "input")
        answers = {c.id for c in last.tool_calls}
    else:
        answers = set()
    given = [m.tool_call_id for m in outputs]
    for call_id in given:
        if call_id not in answers:
            raise invalid(f"No tool call found for function call output with call_id "
                          f"{call_id}.", "input")
    missing = sorted(answers - set(given))
    if missing:
        raise invalid(f"No tool output found for function call {missing[0]}.", "input")
    prompt_message = prompt if prompt is not None and prompt.parts else None
    if outputs:
        results = [ToolResult(tool_call_id=m.tool_call_id or "", content=m.content,
                              parts=m.parts) for m in outputs]
        return rest, TurnInput("tool_results", prompt=prompt.content if prompt else None,
                               results=results, prompt_message=prompt_message)
    if prompt is None:
        raise invalid("the input must end with a user message or function_call_output "
                      "items", "input")
    return rest, TurnInput("prompt", prompt=prompt.content, prompt_message=prompt_message)
