"""Custom and namespace tools' calls, for a model that takes function tools only.

A ``custom`` (freeform) tool and a ``namespace``'s tools are the client's to run, so any
model can be offered them: a model other than the Responses API's (Chat Completions,
Anthropic Messages...) gets each custom tool as a function whose one string argument
``input`` is the freeform text, and a namespace's tools as functions by their own names
(``nonoka.serve.hosted.host_tools``).

Its calls are stored as the Responses API upstream's would be, so that ``GET``,
``input_items``, a conversation's items and the stream give the client the forms it
offered: ``Calls.answer`` makes a custom tool's call a custom call (its ``input`` as the
call's arguments) and marks a namespace tool's call with its namespace. The arguments
the model wrote for a custom call are kept beside (``AS_FUNCTION``), and ``sent_as_functions`` turns
each custom call back into that function call whenever the model is sent the
conversation again (after a restart too), so the model sees what it wrote; a custom
call the model never wrote (one a client sent in its own history) goes as
``{"input": ...}``. A ``tool_choice`` naming a custom tool names its function
(``function_choice``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

from nonoka.llm.base import CallOptions, ModelResponse
from nonoka.llm.responses import CUSTOM_CALL, OPENAI_RESPONSES
from nonoka.serve.hosted import custom_call
from nonoka.state.entries import EntryMessages, MemoryEntry
from nonoka.state.messages import Message, ToolCall

AS_FUNCTION = "as_function"
"""The ``provider_metadata`` key of a custom call's function form: the ``arguments``
the model wrote."""


@dataclasses.dataclass(frozen=True)
class Calls:
    """Which of the names a model calls are the request's custom tools, and which are
    a namespace's tools (the namespace, by name)."""

    custom: frozenset[str] = frozenset()
    namespaces: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, tools: Sequence[dict[str, Any]]) -> Calls:
        custom: set[str] = set()
        namespaces: dict[str, str] = {}
        for tool in tools:
            kind = tool.get("type")
            if kind == "custom":
                custom.add(str(tool["name"]))
            elif kind == "namespace":
                for member in tool["tools"]:
                    namespaces[str(member["name"])] = str(tool["name"])
                    if member.get("type") == "custom":
                        custom.add(str(member["name"]))
        return cls(frozenset(custom), namespaces)

    def answer(self, answer: ModelResponse) -> ModelResponse:
        """``answer`` with its calls of custom and namespace tools in the forms stored."""
        if not answer.tool_calls or not (self.custom or self.namespaces):
            return answer
        return dataclasses.replace(answer, tool_calls=[self._call(c)
                                                       for c in answer.tool_calls])

    def _call(self, call: ToolCall) -> ToolCall:
        own: dict[str, Any] = {}
        if call.name in self.custom:
            own["type"] = CUSTOM_CALL
        if call.name in self.namespaces:
            own["namespace"] = self.namespaces[call.name]
        if not own:
            return call
        metadata: dict[str, Any] = {**(call.provider_metadata or {}), OPENAI_RESPONSES: own}
        if call.name not in self.custom:
            return call.model_copy(update={"provider_metadata": metadata})
        metadata[AS_FUNCTION] = {"arguments": call.arguments}
        return ToolCall(id=call.id, name=call.name, arguments=freeform_input(call.arguments),
                        provider_metadata=metadata)


def freeform_input(arguments: str) -> str:
    """The text of a custom tool's function call: its ``input``; arguments that hold no
    string ``input`` are passed on as the model wrote them, for the client to judge."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return arguments
    given = value.get("input") if isinstance(value, dict) else None
    return given if isinstance(given, str) else arguments


def sent_as_functions(messages: Sequence[Message]) -> Sequence[Message]:
    """The conversation with each custom call as the function call the model wrote (or
    ``{"input": ...}``); the entries and messages without one are passed as they are."""
    if isinstance(messages, EntryMessages):
        entries = messages.entries
        changed = [_entry(e) for e in entries]
        if all(new is None for new in changed):
            return messages
        return EntryMessages([new if new is not None else old
                              for old, new in zip(entries, changed, strict=True)])
    out: list[Message] = []
    touched = False
    for message in messages:
        calls = message.tool_calls
        if calls and any(custom_call(c.provider_metadata) for c in calls):
            touched = True
            message = message.model_copy(update={"tool_calls": [
                c.model_copy(update={"arguments": function_arguments(
                    c.arguments, c.provider_metadata)}) for c in calls]})
        out.append(message)
    return out if touched else messages


def _entry(entry: MemoryEntry) -> MemoryEntry | None:
    """``entry`` with its custom calls as function calls, or ``None`` when it has none."""
    metadata = entry.metadata
    calls = metadata.get("tool_calls") if metadata else None
    if entry.role != "assistant" or not calls or \
            not any(custom_call(c.get("provider_metadata")) for c in calls):
        return None
    functions = [{**c, "arguments": function_arguments(str(c.get("arguments", "")),
                                                        c.get("provider_metadata"))}
                 if custom_call(c.get("provider_metadata")) else c for c in calls]
    return entry.model_copy(update={"metadata": {**metadata, "tool_calls": functions}})


def function_arguments(text: str, metadata: Any) -> str:
    """A custom call's arguments as a function call's: as the model wrote them, else
    its text as ``input``."""
    written = metadata.get(AS_FUNCTION) if isinstance(metadata, dict) else None
    if isinstance(written, dict) and isinstance(written.get("arguments"), str):
        return str(written["arguments"])
    return json.dumps({"input": text}, ensure_ascii=False)


def function_choice(options: CallOptions | None) -> CallOptions | None:
    """``options`` with a ``tool_choice`` naming a custom tool as the choice of its
    function (``{"type": "custom", "name": ...}`` is the Responses API's alone)."""
    choice = options.tool_choice if options is not None else None
    if options is None or not isinstance(choice, Mapping) or choice.get("type") != "custom":
        return options
    return dataclasses.replace(options, tool_choice={
        "type": "function", "function": {"name": choice.get("name")}})
