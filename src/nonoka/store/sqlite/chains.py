"""The SQLite engine's digest chain reads (``nonoka.store.entry_chains``), standard
library only: each entry row carries the chain up to it (migration
``m006_entry_digest_chain``); the last row's stands for the conversation."""

from __future__ import annotations

import sqlite3

from nonoka.digests import Chain
from nonoka.store.entry_chains import StoredChain
from nonoka.store.sqlite import lineage

_LOAD = """
SELECT c.revision, c.entry_count, e.key_chain
FROM checkpoints c
LEFT JOIN session_entries e ON e.session_id = c.session_id AND e.seq = c.entry_count - 1
WHERE c.session_id = ?
"""


def load(db: sqlite3.Connection, session_id: str) -> StoredChain | None:
    """The session's revision, entry count and last chain, inside the caller's
    transaction; ``None`` for an unknown session or a row without its chain."""
    row = db.execute(_LOAD, (session_id,)).fetchone()
    if row is None:
        return None
    revision, count, text = row
    if count == 0:
        return StoredChain(revision, 0, Chain())
    if text is None:  # a branch whose last entry is its base's row
        found = lineage.entry_row(db, session_id, count - 1, "key_chain")
        text = None if found is None else found[0]
    if not isinstance(text, str):
        return None
    return StoredChain(revision, count, Chain.decode(text))
