"""Where a host's history splits: what was said before, and what this request adds.

The bridge's runtime path (``nonoka.bridge.history``, on typed messages) and its early
dispatch (``nonoka.bridge.early``, on the decoded JSON, before pydantic is loaded) must
cut a request's messages and join its new user messages the same way, so both call these.
"""

from __future__ import annotations

from nonoka.protocol.frames import message_field

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: the early dispatch's import budget
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import TypeVar

    M = TypeVar("M")


def split_after_reply(messages: Sequence[M]) -> tuple[list[M], list[M]]:
    """The messages up to the host's last assistant message, and those after it (all of
    them when there is none)."""
    for index in range(len(messages) - 1, -1, -1):
        if message_field(messages[index], "role") == "assistant":
            return list(messages[:index + 1]), list(messages[index + 1:])
    return [], list(messages)


def joined_prompt(messages: Sequence[object]) -> str | None:
    """The user messages among ``messages``, joined as one prompt; ``None`` if there are none.

    A host that sends several user messages in a row gets one stored turn.
    """
    users = [message_field(m, "content") or "" for m in messages
             if message_field(m, "role") == "user"]
    return "\n\n".join(users) if users else None
