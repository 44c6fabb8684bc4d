"""The row a ``NextCallStore`` reads back (``nonoka.store.next_calls``), on its own.

The bridge's early dispatch reads it before anything else is loaded; the store
protocols beside it need ``typing`` (~2 ms), so this plain class lives apart.
"""

from __future__ import annotations


class StoredNextCall:
    """A session's template with what it was computed from, read in one transaction.

    A plain class, not a named tuple or a dataclass: either would make the early path
    import ``typing`` or ``dataclasses``."""

    __slots__ = ("entries", "revision", "status", "template")

    def __init__(self, template: str, revision: int, status: str | None,
                 entries: list[str]) -> None:
        self.template = template
        """The template as saved."""
        self.revision = revision
        """The checkpoint revision, which the template was computed from."""
        self.status = status
        """The session's stored status (``completed``, ``paused``...)."""
        self.entries = entries
        """The stored conversation entries (``MemoryEntry`` JSON), oldest first, the
        files their rows refer to put back (``nonoka.store.media``)."""

    def __repr__(self) -> str:
        return (f"StoredNextCall(revision={self.revision!r}, status={self.status!r}, "
                f"entries={len(self.entries)})")
