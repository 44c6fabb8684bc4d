"""Response and item ids that say where their point lives, so nothing maps them.

A response id is ``resp_`` and 48 hex digits: the session's UUID (32), the entry the
response's input starts at (8) and a random nonce (8). The session's own entries say
which response wrote them (``nonoka.serve.record``), so an id resolves with one load of
its session and nothing else: after a restart, in another process, against a copy of
the database. The nonce makes an id impossible to guess from a session id, and tells
two responses apart that a line could otherwise give the same place.

An item id is the response's 48 digits, the entry's offset from the response's start
(6) and the item's place in that entry (2): ``msg_``, ``fc_``, ``fco_`` or ``rs_`` in
front, as the Responses API names its kinds. Item ids are made from where the item is
stored, so the same item always has the same id, in a stream, in ``GET`` and in
``input_items``.

Standard library only.
"""

from __future__ import annotations

import re
import secrets
import uuid
from dataclasses import dataclass

RESPONSE_PREFIX = "resp_"
ITEM_PREFIXES = ("msg_", "fc_", "fco_", "rs_")
"""A message, a function call, a function call's output, a reasoning item."""

_RESPONSE = re.compile(r"resp_([0-9a-f]{32})([0-9a-f]{8})([0-9a-f]{8})")
_ITEM = re.compile(r"(msg|fco|fc|rs)_([0-9a-f]{32})([0-9a-f]{8})([0-9a-f]{8})"
                   r"([0-9a-f]{6})([0-9a-f]{2})")

ENTRY_MESSAGE = 1
"""An entry's message item (a user, system or assistant message)."""
ENTRY_REASONING = 0
"""An assistant entry's reasoning item, before its message."""
ENTRY_OUTPUT = 0
"""A tool entry's one item: the output of the call it answers."""
FIRST_CALL = 2
"""An assistant entry's first function call; the next ones follow."""
LATER_MESSAGE = 0x80
"""An assistant entry's second message item onwards (an answer the upstream split around
a hosted tool's item): ``LATER_MESSAGE + 1``, ``+ 2``..."""


@dataclass(frozen=True)
class ResponsePoint:
    """Where a response's input starts: its session and entry, and its nonce."""

    session_id: str
    start: int
    nonce: str

    @property
    def id(self) -> str:
        return RESPONSE_PREFIX + self._digits

    @property
    def _digits(self) -> str:
        return f"{uuid.UUID(self.session_id).hex}{self.start:08x}{self.nonce}"

    def item_id(self, prefix: str, offset: int, place: int) -> str:
        """The id of item ``place`` of the entry ``offset`` entries after ``start``."""
        return f"{prefix}{self._digits}{offset:06x}{place:02x}"


def new_point(session_id: str, start: int) -> ResponsePoint:
    """A fresh response starting at entry ``start`` of ``session_id`` (a UUID)."""
    uuid.UUID(session_id)  # a session serve did not make has no ids: fail loudly
    return ResponsePoint(session_id, start, secrets.token_hex(4))


def parse_response_id(text: str) -> ResponsePoint | None:
    """The point a response id names, or ``None`` when ``text`` is not one of ours."""
    found = _RESPONSE.fullmatch(text) if isinstance(text, str) else None
    if found is None:
        return None
    return ResponsePoint(str(uuid.UUID(found.group(1))), int(found.group(2), 16),
                         found.group(3))


@dataclass(frozen=True)
class ItemPlace:
    """Where an item id points: its response, the entry's offset, its place in it."""

    response: ResponsePoint
    offset: int
    place: int
    kind: str
    """``msg``, ``fc``, ``fco`` or ``rs``."""

    @property
    def entry(self) -> int:
        return self.response.start + self.offset


def parse_item_id(text: str) -> ItemPlace | None:
    """The place an item id names, or ``None`` when ``text`` is not one of ours."""
    found = _ITEM.fullmatch(text) if isinstance(text, str) else None
    if found is None:
        return None
    point = ResponsePoint(str(uuid.UUID(found.group(2))), int(found.group(3), 16),
                          found.group(4))
    return ItemPlace(point, int(found.group(5), 16), int(found.group(6), 16), found.group(1))


def plain_id(prefix: str) -> str:
    """An id that names nothing stored (a chat completion's, a response not stored)."""
    return prefix + secrets.token_hex(24)
