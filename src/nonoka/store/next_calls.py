"""An optional store capability: each session's next-call template, for early dispatch.

After a bridge turn the runtime stores what the session's next model request will look
like (``nonoka.bridge.early`` decides what goes in it; to the store it is opaque text),
tied to the checkpoint revision it was computed from. The next bridge process reads it
back before the runtime has loaded, and, if the request fits, takes the session's lease
and sends the model request at once. A store that keeps templates implements
``NextCallStore``; ``nonoka.store.project.open_next_call_store`` opens the project's one
for the early path, which runs on the standard library only (and reads rows as
``nonoka.store.next_call_row.StoredNextCall``, without this module's ``typing``).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from nonoka.store.next_call_row import StoredNextCall

__all__ = ("ClosableNextCallStore", "NextCallStore", "StoredNextCall")


@runtime_checkable
class NextCallStore(Protocol):
    """Keeps one next-call template per session. Calls are synchronous and short: the
    early path runs before any event loop exists."""

    def save_next_call(self, session_id: str, revision: int, template: str) -> bool:
        """Store ``template`` if the session's checkpoint is still at ``revision``
        (replacing any earlier one); whether it was stored."""
        ...

    def load_next_call(self, session_id: str, *, entries: bool = True
                       ) -> StoredNextCall | None:
        """The template, if it was computed from the current checkpoint, and the session
        as stored (its entries left out, ``[]``, unless ``entries``); ``None`` when there
        is none, the checkpoint moved on, or another owner holds a live lease on the
        session."""
        ...

    def lease_at_revision(self, session_id: str, revision: int, owner: str,
                          ttl_seconds: float) -> bool:
        """Take the session's lease for ``owner`` (as ``SessionLeases.acquire_lease``
        does) only if its checkpoint is still at ``revision``; whether it was taken."""
        ...


class ClosableNextCallStore(NextCallStore, Protocol):
    """A ``NextCallStore`` opened for the early path alone, closed when it is done."""

    def close(self) -> None: ...
