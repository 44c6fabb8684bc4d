"""The SQLite engine's next-call templates (``nonoka.store.next_calls``), standard library
only.

One row per session in ``next_calls`` (migration ``m004_next_calls``). The functions
below run inside a transaction their caller opened: the checkpoint store's own
(``SQLiteCheckpointStore`` implements ``NextCallStore`` with them) or that of
``SQLiteNextCalls``, which the bridge's early dispatch opens before the runtime has
loaded. That one never creates, repairs or migrates a file: it opens only one the
engine has set up and fully migrated, and otherwise reports that there is nothing to use.
"""

from __future__ import annotations

import os
import sqlite3
import time
from urllib.parse import quote

from nonoka.store.media import needed, restored_text
from nonoka.store.next_call_row import StoredNextCall
from nonoka.store.sqlite import leases, lineage
from nonoka.store.sqlite import media as stored_media
from nonoka.store.sqlite.ledger import missing
from nonoka.store.sqlite.packing import register, unpack

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: the early path's import budget
if TYPE_CHECKING:
    from collections.abc import Callable

    _Step = Callable[[], bool]

_LOAD = """
SELECT n.template_json, c.revision, json_extract(c.state_json, '$.status'), c.entry_count,
       l.expires_at
FROM next_calls n
JOIN checkpoints c ON c.session_id = n.session_id AND c.revision = n.revision
LEFT JOIN session_leases l ON l.session_id = n.session_id
WHERE n.session_id = ?
"""


def save(db: sqlite3.Connection, session_id: str, revision: int, template: str) -> bool:
    """``NextCallStore.save_next_call`` inside the caller's write transaction."""
    row = db.execute("SELECT revision FROM checkpoints WHERE session_id = ?",
                     (session_id,)).fetchone()
    if row is None or row[0] != revision:
        return False
    # An UPDATE, not a replace: a template of the same size (a session's usually is: its
    # tools and options do not change between turns) is then rewritten in place, and
    # SQLite writes only the pages whose bytes changed, the row's leaf, instead of
    # freeing and taking again every overflow page of a ~25 KB template (9 pages a turn).
    if db.execute("UPDATE next_calls SET revision = ?, template_json = ? WHERE session_id = ?",
                  (revision, template, session_id)).rowcount == 0:
        db.execute("INSERT INTO next_calls (session_id, revision, template_json) "
                   "VALUES (?, ?, ?)", (session_id, revision, template))
    return True


def load(db: sqlite3.Connection, session_id: str, with_entries: bool = True
         ) -> StoredNextCall | None:
    """``NextCallStore.load_next_call`` inside the caller's read transaction."""
    row = db.execute(_LOAD, (session_id,)).fetchone()
    if row is None or (row[4] is not None and row[4] > time.time()):
        return None  # no current template, or another process runs the session
    template, revision, status, count, _ = row
    if not with_entries:
        return StoredNextCall(template, revision, status, [])
    rows = lineage.resolved_entries(db, session_id, columns="entry_json, media")
    if len(rows) != count:
        return None  # not what the checkpoint says: the runtime will report it
    entries = [unpack(r[0]) for r in rows]
    wanted = needed(r[1] for r in rows if r[1] is not None)
    if wanted:  # rows that refer to stored files get their bytes back, as a load does
        found = stored_media.fetch(db, wanted)
        try:
            entries = [text if row[1] is None else restored_text(text, found)
                       for text, row in zip(entries, rows, strict=True)]
        except (KeyError, ValueError):
            return None  # a file is missing or a row is damaged: the runtime reports it
    return StoredNextCall(template, revision, status, entries)


def lease_at_revision(db: sqlite3.Connection, session_id: str, revision: int, owner: str,
                      ttl_seconds: float) -> bool:
    """``NextCallStore.lease_at_revision`` inside the caller's write transaction."""
    row = db.execute("SELECT revision FROM checkpoints WHERE session_id = ?",
                     (session_id,)).fetchone()
    return row is not None and row[0] == revision and leases.acquire(
        db, session_id, owner, ttl_seconds, time.time())


class SQLiteNextCalls:
    """A ``NextCallStore`` on its own short-lived connection, for the early path."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    @classmethod
    def open_existing(cls, path: str) -> SQLiteNextCalls | None:
        """The store for the file at ``path``, or ``None`` when it does not exist, was not
        set up by the SQLite engine (WAL) or lacks migrations. A file a newer nonoka
        migrated raises ``UnsupportedVersionError``. A symlink (the file, or the folder
        holding it) is left to the engine, which refuses it."""
        if (os.path.islink(path) or os.path.islink(os.path.dirname(path))
                or not os.path.isfile(path)):
            return None
        uri = f"file:{quote(os.path.abspath(path))}?mode=rw"  # never creates the file
        # Any thread may close it: the early path leaves the close (which may checkpoint
        # the log, with an fsync) to a worker while the runtime loads.
        db = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=0.2,
                             check_same_thread=False)
        try:
            register(db)
            if str(db.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                db.close()
                return None
            db.execute("PRAGMA synchronous = NORMAL")  # as the engine writes
            if missing(db, path):
                db.close()
                return None
        except BaseException:
            db.close()
            raise
        return cls(db)

    def save_next_call(self, session_id: str, revision: int, template: str) -> bool:
        return self._write(lambda: save(self._db, session_id, revision, template))

    def load_next_call(self, session_id: str, *, entries: bool = True
                       ) -> StoredNextCall | None:
        db = self._db
        db.execute("BEGIN")
        try:
            return load(db, session_id, entries)
        finally:
            db.execute("COMMIT")

    def lease_at_revision(self, session_id: str, revision: int, owner: str,
                          ttl_seconds: float) -> bool:
        return self._write(lambda: lease_at_revision(self._db, session_id, revision, owner,
                                                     ttl_seconds))

    def _write(self, step: _Step) -> bool:
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            done = step()
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        return done

    def close(self) -> None:
        self._db.close()
