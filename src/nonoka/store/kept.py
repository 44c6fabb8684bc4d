"""A project's stores kept open between the requests one process serves.

A warm ``nonoka bridge`` serves the steps of a host session one after another. Opening
the project's SQLite file for each (connect, pragmas, the file's identity and version
checks) and closing it after (the last connection folds the write-ahead log back into
the file, with an ``fsync``) cost more than the step's own reads and writes. So the
process keeps the stores of the project it served last and hands them to the next
request of the same project, after checking in a few microseconds that they still
stand for what is on disk:

- the file at the path is still the one opened (same device and inode): a database
  moved away, removed or restored by another program is opened anew;
- the schema is the one checked at opening (SQLite's ``schema_version``): a database
  migrated meanwhile by a newer nonoka goes through the opening checks again, which
  refuse what this version cannot read.

Nothing of a session is kept here that is not in the database: every request still
loads its session under its lease, and the process may be killed at any moment. Only
SQLite files are kept; other engines (PostgreSQL, ``memory:``) open and close per
request as before. ``BridgeReuse`` owns one of these (``nonoka.bridge.reuse``); the
process closes it when it leaves.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from nonoka.store.next_calls import NextCallStore

if TYPE_CHECKING:
    from collections.abc import Callable

    from nonoka.store.project import ProjectStores


class KeptStores:
    """The stores of the last project served, while they still match the disk."""

    __slots__ = ("_kept",)

    def __init__(self) -> None:
        self._kept: tuple[str, ProjectStores, tuple[int, int], int] | None = None
        """``(key, stores, (device, inode), schema_version)`` of the stores kept."""

    async def take(self, key: str, open_stores: Callable[[], ProjectStores]) -> ProjectStores:
        """The stores kept under ``key`` (the database's file) when they are still
        current, else new ones from ``open_stores`` (what was kept is closed first)."""
        kept, self._kept = self._kept, None
        if kept is not None:
            if kept[0] == key and _still(kept[1], kept[2], kept[3]):
                return kept[1]
            await _close_quietly(kept[1])
        return open_stores()

    def next_calls(self, key: str) -> NextCallStore | None:
        """The kept checkpoint store as the early path's ``NextCallStore`` (synchronous,
        left open), while it is ``key``'s and still current; ``None`` otherwise (the
        early path then opens a connection of its own)."""
        kept = self._kept
        if kept is None or kept[0] != key or not _still(kept[1], kept[2], kept[3]):
            return None
        store = kept[1].checkpoints
        return store if isinstance(store, NextCallStore) else None

    async def give_back(self, key: str, stores: ProjectStores) -> None:
        """Keep ``stores`` under ``key`` for the next request; stores that cannot be kept
        are closed."""
        found = _fingerprint(stores)
        if found is None:
            await stores.close()
            return
        previous, self._kept = self._kept, (key, stores, found[0], found[1])
        if previous is not None and previous[1] is not stores:
            await _close_quietly(previous[1])

    async def close(self) -> None:
        """Close what is kept (the process is leaving)."""
        kept, self._kept = self._kept, None
        if kept is not None:
            await _close_quietly(kept[1])


def _fingerprint(stores: ProjectStores) -> tuple[tuple[int, int], int] | None:
    """The file's identity and schema version, for a SQLite store open read-write."""
    from nonoka.store.sqlite.checkpoints import SQLiteCheckpointStore

    store = stores.checkpoints
    if not isinstance(store, SQLiteCheckpointStore) or store.read_only:
        return None
    try:
        info = os.stat(store.path)
        version = int(store.connection.execute("PRAGMA schema_version").fetchone()[0])
    except Exception:  # closed, removed, unreadable: not worth keeping
        return None
    return (info.st_dev, info.st_ino), version


def _still(stores: ProjectStores, identity: tuple[int, int], version: int) -> bool:
    found = _fingerprint(stores)
    return found is not None and found == (identity, version)


async def _close_quietly(stores: ProjectStores) -> None:
    """Close stores no request is using; a failure leaves at most a log the next opener
    folds back in, so it is not an error of any request."""
    try:
        await stores.close()
    except Exception as exc:
        import sys

        print(f"nonoka: closing the project database failed: {exc}", file=sys.stderr)
