"""A background response's stream, kept so a client can attach to it again.

Every event a background response emits is appended, in order, to its session's timeline
(kind ``serve_event``, one writer per response) while this process also keeps it in
memory for clients attached now. ``GET /v1/responses/{id}?stream=true&starting_after=N``
sends the events after ``N``: from memory while the response runs here (then follows it
live), else from the timeline — after a restart too, where a response whose process died
mid-stream ends with its final event as ``GET`` reads it (``response.incomplete``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from nonoka.serve.ids import parse_response_id
from nonoka.store.records import EventLog

EVENT = "serve_event"
"""The timeline kind of a background response's streamed event."""
FINAL = ("response.completed", "response.incomplete", "response.failed", "error")


class Live:
    """The events of one background response being made in this process."""

    def __init__(self, log: EventLog) -> None:
        self.events: list[dict[str, Any]] = []
        self.written = 0
        """The events in the timeline: only those are streamed to attached clients, so a
        client has seen nothing a restart could lose."""
        self.done = False
        self._changed = asyncio.Event()
        self._log = log
        self._writes: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._writer: asyncio.Task[None] | None = None
        self.response_id: str | None = None

    def add(self, event: dict[str, Any]) -> None:
        if self.response_id is None and event.get("type") == "response.created":
            self.response_id = str(event["response"]["id"])
            self._writer = asyncio.create_task(self._write(self.response_id))
        self.events.append(event)
        self._writes.put_nowait(event)

    async def close(self) -> None:
        """Every event written; followers told the stream ended."""
        self._writes.put_nowait(None)
        if self._writer is not None:
            await asyncio.shield(self._writer)
        self.written = len(self.events) if self._writer is not None else 0
        self.done = True
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _write(self, response_id: str) -> None:
        point = parse_response_id(response_id)
        assert point is not None
        while (event := await self._writes.get()) is not None:
            await self._log.append_event(point.session_id, EVENT,
                                         {"id": response_id, "event": event})
            self.written += 1
            self._wake()

    async def follow(self, after: int) -> AsyncIterator[dict[str, Any]]:
        """The events numbered after ``after``, as they come, to the stream's end."""
        at = max(after + 1, 0)
        while True:
            changed = self._changed
            while at < self.written:
                yield self.events[at]
                at += 1
            if self.done:
                return
            await changed.wait()


async def stored_events(log: EventLog, response_id: str) -> list[dict[str, Any]]:
    """A background response's events as its timeline keeps them, in order."""
    point = parse_response_id(response_id)
    if point is None:
        return []
    return [e.data["event"] for e in await log.list_events(point.session_id, limit=1 << 62)
            if e.kind == EVENT and isinstance(e.data, dict) and e.data.get("id") == response_id
            and isinstance(e.data.get("event"), dict)]


def final_event(response: dict[str, Any], sequence: int) -> dict[str, Any]:
    """The event a stream ends with for ``response`` as it reads now."""
    kind = {"completed": "response.completed", "incomplete": "response.incomplete"
            }.get(response["status"], "response.failed")
    return {"type": kind, "sequence_number": sequence, "response": response}
