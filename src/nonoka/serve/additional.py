"""``additional_tools`` input items: tools a client makes available where the item is.

The Responses API takes, among a request's input items, ``{"type": "additional_tools",
"role": "developer", "tools": [...]}``: tools offered to the model from that point of the
conversation on, as the request's ``tools`` are (Codex sends its tools this way, and no
``tools`` at all, for the models its model list marks ``code_mode_only``).

The item is stored in its place as a system entry that keeps the item whole
(``carrier``), so a continuation sends it again; the entry's text is its tools as JSON,
which no model is sent, so that a history resent with other tools there is not taken
for the stored one (and the entry counts the tokens the tools take). An
``openai-responses:`` model is sent the item as it is, in its place
(``nonoka.llm.responses`` sends a kept item as given), and its tools are not repeated
in the request's ``tools``. Another model has no such
item: it is offered the tools as the request's own (``nonoka.serve.hosted.host_tools``,
``nonoka.serve.as_functions``), and the entry is left out of what it is sent
(``without_carriers``). Either way the tools are the client's: the turn pauses on their
calls. When the conversation holds several such items, a later tool of the same kind and
name takes the place of an earlier one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from nonoka.llm.responses import OPENAI_RESPONSES
from nonoka.serve.errors import invalid
from nonoka.state.entries import EntryMessages, MemoryEntry
from nonoka.state.messages import Message

ADDITIONAL = "additional_tools"
"""The item's type."""


def carrier(item: dict[str, Any], tools: list[dict[str, Any]], param: str) -> Message:
    """The system message that holds an ``additional_tools`` item (its ``tools`` checked
    as the request's are: ``tools``)."""
    role = item.get("role", "developer")
    if role != "developer":
        raise invalid(f"an additional_tools item's role must be developer, not {role!r}",
                      f"{param}.role")
    kept = {"type": ADDITIONAL, "role": "developer", "tools": tools}
    if isinstance(item.get("id"), str) and item["id"]:
        kept["id"] = item["id"]
    return Message(role="system", content=json.dumps(tools, sort_keys=True,
                                                     ensure_ascii=False),
                   provider_metadata={OPENAI_RESPONSES: {"item": kept}})


def carried_item(provider_metadata: Any) -> dict[str, Any] | None:
    """The ``additional_tools`` item a message's ``provider_metadata`` keeps, if any."""
    own = provider_metadata.get(OPENAI_RESPONSES) if isinstance(provider_metadata, dict) \
        else None
    item = own.get("item") if isinstance(own, dict) else None
    return item if isinstance(item, dict) and item.get("type") == ADDITIONAL else None


def _entry_item(entry: MemoryEntry) -> dict[str, Any] | None:
    if entry.role != "system" or not entry.metadata:
        return None
    return carried_item(entry.metadata.get("provider_metadata"))


def carried_tools(messages: Iterable[Message | MemoryEntry]) -> list[dict[str, Any]]:
    """The tools the ``additional_tools`` items among ``messages`` offer, in order; a
    later tool of the same kind and name replaces an earlier one."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for message in messages:
        item = (_entry_item(message) if isinstance(message, MemoryEntry)
                else carried_item(message.provider_metadata) if message.role == "system"
                else None)
        for tool in (item or {}).get("tools") or ():
            key = (str(tool.get("type")), str(tool.get("name") or ""))
            found.pop(key, None)
            found[key] = tool
    return list(found.values())


def without_carriers(messages: Sequence[Message]) -> Sequence[Message]:
    """The conversation less the entries that hold ``additional_tools`` items (for a
    model other than the Responses API's, which is offered their tools instead)."""
    if isinstance(messages, EntryMessages):
        kept = [e for e in messages.entries if _entry_item(e) is None]
        return messages if len(kept) == len(messages.entries) else EntryMessages(kept)
    if not any(m.role == "system" and carried_item(m.provider_metadata) for m in messages):
        return messages
    return [m for m in messages
            if not (m.role == "system" and carried_item(m.provider_metadata))]
