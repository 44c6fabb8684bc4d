"""Answers a turn streamed but never finished, read back from its event log.

While the model streams, the journal logs what it streamed in pieces (``partial_answer``,
``nonoka.turn.journal``). When the answer is stored whole, a ``model_call`` entry follows
them and they were only a copy. When something else follows first — the ``finish`` or
``error`` of a turn that ended mid-answer, the ``request`` of a next turn after a killed
process — or nothing does, they are all that is left of the answer: an *unfinished*
answer. ``nonoka sessions show``, the Markdown export and ``nonoka ui`` all decide it
here. An unfinished answer lives only in the event log: it is never part of the
conversation the model is sent.

A piece adds its ``text`` to the answer; a piece with ``from`` replaces the answer's text
from that offset on (the journal masks the answer whole as it grows, and the rest of a
credential may change how its start is masked).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

PARTIAL = "partial_answer"
STORED = "model_call"
"""Follows the pieces of an answer that was stored whole."""
CLOSING = (STORED, "request", "finish", "error")
"""The entries that close a streamed answer; other entries (warnings, tool calls) do not."""


@dataclass(frozen=True)
class Unfinished:
    """The text streamed of one answer never stored."""

    text: str
    at: float
    """When its first piece was logged."""
    ended_by: str
    """The entry that followed it: ``request`` (its process ended mid-turn), ``finish``
    or ``error`` (its turn ended mid-answer), or ``""`` (the log ends with it: its
    process ended, or it is still streaming)."""

    @property
    def process_ended(self) -> bool:
        """Whether what cut it short is (or may be) the end of its process rather than
        its turn ending mid-answer."""
        return self.ended_by in ("request", "")


class Event(Protocol):
    @property
    def kind(self) -> str: ...
    @property
    def at(self) -> float: ...
    @property
    def data(self) -> Mapping[str, Any] | str: ...


class Streamed:
    """Follows an event log in order and says when a streamed answer was left unfinished
    (``see``, then ``end`` after the last entry); it holds only the pieces of the
    answer being streamed, so a log can be read as it comes."""

    def __init__(self) -> None:
        self._pieces: list[str] = []
        self._at = 0.0

    def see(self, event: Event) -> Unfinished | None:
        """The unfinished answer ``event`` closes, if it closes one."""
        if event.kind == PARTIAL:
            if not self._pieces:
                self._at = event.at
            text, start = _piece(event.data)
            if start is not None:
                self._pieces = ["".join(self._pieces)[:start]]
            self._pieces.append(text)
            return None
        if event.kind not in CLOSING:
            return None
        left = self._close(event.kind)
        return None if event.kind == STORED else left

    def end(self) -> Unfinished | None:
        """The unfinished answer the log ends with, if any."""
        return self._close("")

    def _close(self, by: str) -> Unfinished | None:
        if not self._pieces:
            return None
        text, self._pieces = "".join(self._pieces), []
        return Unfinished(text, self._at, by)


def unfinished_answers(events: Iterable[Event]) -> list[tuple[int, Unfinished]]:
    """The unfinished answers in ``events`` (a log, oldest first), each with the position
    of the entry that closed it (the number of events when the log ends with it)."""
    found: list[tuple[int, Unfinished]] = []
    streamed = Streamed()
    count = 0
    for event in events:
        left = streamed.see(event)
        if left is not None:
            found.append((count, left))
        count += 1
    left = streamed.end()
    if left is not None:
        found.append((count, left))
    return found


def _piece(data: Mapping[str, Any] | str) -> tuple[str, int | None]:
    """A piece's text and where it goes (``None``: after the rest) from its data
    (decoded, or its stored JSON text); a damaged piece adds nothing."""
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except ValueError:
            return "", None
        if not isinstance(data, dict):
            return "", None
    start = data.get("from")
    if not isinstance(start, int) or isinstance(start, bool) or start < 0:
        start = None
    return str(data.get("text", "")), start
