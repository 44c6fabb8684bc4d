"""Where the Files API keeps its files: the project's own database.

A file's bytes go to the store's content-addressed ``media`` table
(``nonoka.store.media``), once by digest whatever the number of files and session
entries holding them; its metadata to ``serve_files`` (id, owner, name, purpose, media
type, digest, size, times). A delete marks the row (``deleted_at``) and, in the same
transaction, collects the bytes unless an entry row or another live file still refers to
them: a session that was sent the file keeps it. Every read names the owner, so another
owner's file is not found, exactly as one that never existed.

The SQLite and PostgreSQL stores share the project stores' connection (and their
transactions' locking with the media collection); a ``memory:`` database keeps the files
in this object.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

from nonoka.store.media import Media, digest_of


@dataclass(frozen=True)
class FileRecord:
    """A file as ``serve_files`` keeps it (its bytes are the ``media`` table's)."""

    file_id: str
    owner: str
    filename: str
    purpose: str
    media_type: str
    digest: str
    size: int
    created_at: float


@dataclass(frozen=True)
class Page:
    """One page of an owner's files: what ``list`` asked for, in its order."""

    owner: str
    purpose: str | None
    limit: int
    descending: bool
    after: FileRecord | None


class FileStore(Protocol):
    async def add(self, record: FileRecord, data: bytes) -> None: ...
    async def get(self, owner: str, file_id: str) -> FileRecord | None: ...
    async def content(self, owner: str, file_id: str) -> bytes | None: ...
    async def page(self, page: Page) -> list[FileRecord]: ...
    async def delete(self, owner: str, file_id: str) -> bool: ...
    async def every(self, deleted: bool = False) -> list[FileRecord]: ...


_COLUMNS = "file_id, owner, filename, purpose, media_type, digest, bytes, created_at"


def _where(page: Page, mark: str) -> tuple[str, list[Any]]:
    """The ``WHERE`` and ``ORDER BY`` of a page (``mark``: the driver's placeholder)."""
    sql = f"owner = {mark} AND deleted_at IS NULL"
    args: list[Any] = [page.owner]
    if page.purpose is not None:
        sql += f" AND purpose = {mark}"
        args.append(page.purpose)
    order = "DESC" if page.descending else "ASC"
    if page.after is not None:
        sql += f" AND (created_at, file_id) {'<' if page.descending else '>'} ({mark}, {mark})"
        args += [page.after.created_at, page.after.file_id]
    return (f"{sql} ORDER BY created_at {order}, file_id {order} LIMIT {int(page.limit)}",
            args)


class SQLiteFiles:
    """The files in the project's SQLite file, through its checkpoint store's connection
    (one writer at a time: a delete's collection and an upload of the same bytes cannot
    interleave)."""

    def __init__(self, store: Any) -> None:
        self._store = store
        """A ``SQLiteCheckpointStore``."""

    async def add(self, record: FileRecord, data: bytes) -> None:
        from nonoka.store.sqlite import media as stored_media

        with self._store.transaction() as db:
            stored_media.keep(db, [Media(record.digest, record.media_type, data)])
            db.execute(f"INSERT INTO serve_files ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?)",
                       _row(record))

    async def get(self, owner: str, file_id: str) -> FileRecord | None:
        with self._store.transaction(write=False) as db:
            row = db.execute(f"SELECT {_COLUMNS} FROM serve_files WHERE file_id = ? AND "
                             "owner = ? AND deleted_at IS NULL", (file_id, owner)).fetchone()
        return None if row is None else FileRecord(*row)

    async def content(self, owner: str, file_id: str) -> bytes | None:
        with self._store.transaction(write=False) as db:
            row = db.execute("SELECT m.data FROM serve_files f JOIN media m ON m.digest = "
                             "f.digest WHERE f.file_id = ? AND f.owner = ? AND "
                             "f.deleted_at IS NULL", (file_id, owner)).fetchone()
        return None if row is None else bytes(row[0])

    async def page(self, page: Page) -> list[FileRecord]:
        where, args = _where(page, "?")
        with self._store.transaction(write=False) as db:
            rows = db.execute(f"SELECT {_COLUMNS} FROM serve_files WHERE {where}",
                              args).fetchall()
        return [FileRecord(*row) for row in rows]

    async def every(self, deleted: bool = False) -> list[FileRecord]:
        with self._store.transaction(write=False) as db:
            rows = db.execute(f"SELECT {_COLUMNS} FROM serve_files {_every(deleted)}"
                              ).fetchall()
        return [FileRecord(*row) for row in rows]

    async def delete(self, owner: str, file_id: str) -> bool:
        from nonoka.store.sqlite import media as stored_media

        with self._store.transaction() as db:
            row = db.execute("UPDATE serve_files SET deleted_at = ? WHERE file_id = ? AND "
                             "owner = ? AND deleted_at IS NULL RETURNING digest",
                             (time.time(), file_id, owner)).fetchone()
            if row is None:
                return False
            stored_media.collect(db, [row[0]])
        return True


class PostgresFiles:
    """The files in the project's PostgreSQL schema, through its checkpoint store's pool;
    the bytes are kept and collected with the locks session saves take
    (``keep_media``, ``collect_media``)."""

    def __init__(self, database: Any) -> None:
        self._db = database
        """A ``PostgresDatabase``."""

    async def _rows(self, sql: str, args: Any) -> list[tuple[Any, ...]]:
        async def work(conn: Any) -> list[tuple[Any, ...]]:
            cursor = await conn.execute(sql, args)
            return list(await cursor.fetchall())
        return list(await self._db.run(work))

    async def add(self, record: FileRecord, data: bytes) -> None:
        from nonoka.store.postgres.checkpoints import keep_media

        async def work(conn: Any) -> None:
            await keep_media(conn, [Media(record.digest, record.media_type, data)])
            await conn.execute(f"INSERT INTO serve_files ({_COLUMNS}) "
                               "VALUES (%s,%s,%s,%s,%s,%s,%s,%s)", _row(record))
        await self._db.run(work, transaction=True)

    async def get(self, owner: str, file_id: str) -> FileRecord | None:
        rows = await self._rows(f"SELECT {_COLUMNS} FROM serve_files WHERE file_id = %s "
                                "AND owner = %s AND deleted_at IS NULL", (file_id, owner))
        return FileRecord(*rows[0]) if rows else None

    async def content(self, owner: str, file_id: str) -> bytes | None:
        rows = await self._rows("SELECT m.data FROM serve_files f JOIN media m ON m.digest "
                                "= f.digest WHERE f.file_id = %s AND f.owner = %s AND "
                                "f.deleted_at IS NULL", (file_id, owner))
        return bytes(rows[0][0]) if rows else None

    async def page(self, page: Page) -> list[FileRecord]:
        where, args = _where(page, "%s")
        rows = await self._rows(f"SELECT {_COLUMNS} FROM serve_files WHERE {where}", args)
        return [FileRecord(*row) for row in rows]

    async def every(self, deleted: bool = False) -> list[FileRecord]:
        rows = await self._rows(f"SELECT {_COLUMNS} FROM serve_files {_every(deleted)}", ())
        return [FileRecord(*row) for row in rows]

    async def delete(self, owner: str, file_id: str) -> bool:
        from nonoka.store.postgres.checkpoints import collect_media

        async def work(conn: Any) -> bool:
            cursor = await conn.execute(
                "UPDATE serve_files SET deleted_at = %s WHERE file_id = %s AND owner = %s "
                "AND deleted_at IS NULL RETURNING digest", (time.time(), file_id, owner))
            row = await cursor.fetchone()
            if row is None:
                return False
            await collect_media(conn, [row[0]])
            return True
        return bool(await self._db.run(work, transaction=True))


class MemoryFiles:
    """Files of a ``memory:`` database (tests): kept in this object, bytes by digest."""

    def __init__(self) -> None:
        self._records: dict[str, FileRecord] = {}
        self._bytes: dict[str, bytes] = {}

    async def add(self, record: FileRecord, data: bytes) -> None:
        self._bytes.setdefault(record.digest, data)
        self._records[record.file_id] = record

    async def get(self, owner: str, file_id: str) -> FileRecord | None:
        found = self._records.get(file_id)
        return found if found is not None and found.owner == owner else None

    async def content(self, owner: str, file_id: str) -> bytes | None:
        found = await self.get(owner, file_id)
        return None if found is None else self._bytes.get(found.digest)

    async def page(self, page: Page) -> list[FileRecord]:
        mine = sorted((r for r in self._records.values() if r.owner == page.owner and
                       page.purpose in (None, r.purpose)),
                      key=lambda r: (r.created_at, r.file_id), reverse=page.descending)
        if page.after is not None:
            mark = (page.after.created_at, page.after.file_id)
            mine = [r for r in mine if ((r.created_at, r.file_id) < mark) == page.descending
                    and (r.created_at, r.file_id) != mark]
        return mine[:page.limit]

    async def every(self, deleted: bool = False) -> list[FileRecord]:
        return sorted(self._records.values(), key=lambda r: (r.created_at, r.file_id))

    async def delete(self, owner: str, file_id: str) -> bool:
        found = await self.get(owner, file_id)
        if found is None:
            return False
        del self._records[file_id]
        if all(r.digest != found.digest for r in self._records.values()):
            self._bytes.pop(found.digest, None)
        return True


def _every(deleted: bool) -> str:
    """Every owner's files, oldest first; with ``deleted``, deleted ones' rows too."""
    return ("" if deleted else "WHERE deleted_at IS NULL ") + "ORDER BY created_at, file_id"


def _row(record: FileRecord) -> tuple[Any, ...]:
    return (record.file_id, record.owner, record.filename, record.purpose,
            record.media_type, record.digest, record.size, record.created_at)


def open_files(checkpoints: object) -> FileStore:
    """The file store over the project stores' checkpoint store (its engine's tables)."""
    from nonoka.store.sqlite.checkpoints import SQLiteCheckpointStore

    if isinstance(checkpoints, SQLiteCheckpointStore):
        return SQLiteFiles(checkpoints)
    database = getattr(checkpoints, "database", None)
    if type(checkpoints).__name__ == "PostgresCheckpointStore" and database is not None:
        return PostgresFiles(database)
    return MemoryFiles()


def new_record(file_id: str, owner: str, filename: str, purpose: str, media_type: str,
               data: bytes) -> FileRecord:
    """The record of a file being uploaded now."""
    return FileRecord(file_id, owner, filename, purpose, media_type, digest_of(data),
                      len(data), time.time())

