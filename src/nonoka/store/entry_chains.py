"""``EntryChainStore``: an optional capability, the stored conversation's digest chain.

A store that keeps the chain of its entries (``nonoka.digests``) tells, from one row, how
long a session's conversation is and the chain of its last entry, so a front end can
tell whether a host's history continues it without decoding the entries. The SQLite
engine keeps it (``nonoka.store.sqlite.chains``); with another engine the caller
compares decoded entries. Standard library only.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol, runtime_checkable

from nonoka.digests import Chain


class StoredChain(NamedTuple):
    """A session's checkpoint revision, number of entries, and the chain after the last."""

    revision: int
    entries: int
    chain: Chain


@runtime_checkable
class EntryChainStore(Protocol):
    def entry_chain(self, session_id: str) -> StoredChain | None:
        """The session's stored chain, or ``None`` when the session is unknown (or its
        rows predate the chain)."""
        ...
