"""The Responses API's built-in client tools: ``local_shell``, ``shell``, ``apply_patch``.

OpenAI's model calls them with items of their own (``local_shell_call``, ``shell_call``,
``apply_patch_call``) which the client runs, answering with ``*_call_output`` items. To
nonoka they are tool calls like any other (the turn pauses on them): a ``ToolCall``
named after the tool (``shell``...), its arguments the call's ``action`` (or
``operation``) as JSON, and the item the API gave kept whole in its
``provider_metadata`` (``builtin_call``), so it goes back exactly as it came
(``builtin_item``). The client's output is kept as the tool result's text: the output
item's fields as JSON (``output_text``), from which the output item is made again, in
its form, whenever the conversation is sent or shown (``output_item``).

Internal: not part of the public API (docs/architecture.md, "Public API").
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from nonoka.state.messages import ToolCall

OPENAI_RESPONSES = "openai_responses"
"""The ``provider_metadata`` key of what the Responses API adapter keeps."""
TOOL_OF: Mapping[str, str] = MappingProxyType({
    "local_shell_call": "local_shell", "shell_call": "shell", "apply_patch_call": "apply_patch"})
"""Each built-in call item's tool (the name its ``ToolCall`` has)."""
BUILTIN_TOOLS = frozenset(TOOL_OF.values())
BUILTIN_CALLS = frozenset(TOOL_OF)
BUILTIN_OUTPUTS = frozenset(f"{kind}_output" for kind in TOOL_OF)
_IDS = ("type", "id", "call_id")


def builtin_call(item: Mapping[str, Any]) -> ToolCall:
    """The call a built-in call item makes (``call_id`` is its id), the item kept."""
    kind = str(item.get("type"))
    given = item.get("action") if "action" in item else item.get("operation")
    return ToolCall(id=str(item.get("call_id") or item.get("id") or ""), name=TOOL_OF[kind],
                    arguments=json.dumps(given if given is not None else {}),
                    provider_metadata={OPENAI_RESPONSES: {"type": kind, "item": dict(item)}})


def builtin_kind(metadata: Any) -> str | None:
    """The call item type a call's ``provider_metadata`` marks it as, if built-in."""
    own = metadata.get(OPENAI_RESPONSES) if isinstance(metadata, Mapping) else None
    kind = own.get("type") if isinstance(own, Mapping) else None
    return kind if kind in BUILTIN_CALLS else None


def builtin_item(metadata: Any) -> dict[str, Any] | None:
    """The call item a built-in call keeps, as the API (or the client) gave it."""
    if builtin_kind(metadata) is None:
        return None
    item = metadata[OPENAI_RESPONSES].get("item")
    return dict(item) if isinstance(item, Mapping) else None


def output_text(item: Mapping[str, Any]) -> str:
    """A client's output item as the tool result's text: its fields but its type and ids."""
    return json.dumps({k: v for k, v in item.items() if k not in _IDS}, ensure_ascii=False)


def output_call_id(item: Mapping[str, Any]) -> Any:
    """The call an output item answers (a ``local_shell_call_output`` names it ``id``)."""
    if item.get("type") == "local_shell_call_output":
        return item.get("call_id") or item.get("id")
    return item.get("call_id")


def output_item(call_kind: str, call_id: str, text: str) -> dict[str, Any]:
    """The output item answering a built-in call of ``call_kind``, from the tool result's
    text (``output_text``; a text that is not, from a model's own tool run, as
    ``output``)."""
    try:
        fields = json.loads(text)
    except ValueError:
        fields = None
    kind = f"{call_kind}_output"
    if not isinstance(fields, dict):
        fields = {"output": [{"stdout": text, "stderr": "", "outcome": {
            "type": "exit", "exit_code": 0}}]} if kind == "shell_call_output" else \
            {"output": text, **({"status": "completed"}
                                if kind == "apply_patch_call_output" else {})}
    named = {"id": call_id} if kind == "local_shell_call_output" else {"call_id": call_id}
    return {"type": kind, **named, **fields}
