"""Opening a nonoka SQLite file: permissions, sanity checks, pragmas, migrations.

Shared by everything that keeps tables in the same file (the checkpoint store, the
session index and event log), so they all get the same guarantees:

- a new file (and SQLite's ``-wal``/``-shm`` files, which copy its mode) is created
  owner-only, and a parent directory we create is ``0700``;
- a file that is not a SQLite database, or is visibly truncated, is refused with a
  ``StoreError`` naming the path, before SQLite is allowed to write to it; so is a
  symlink (a repository can commit one pointing at any file: nothing is followed), a
  FIFO or device, an empty file that is not new (an emptied database), and, at the
  project's own ``.nonoka/sessions.db`` (``ours_only``), a SQLite database that is not
  nonoka's (tables, but no ``nonoka_migrations``): a database named explicitly may
  share its file with the application's own tables;
- a file migrated by a newer nonoka is refused with ``UnsupportedVersionError``, also
  before anything is written;
- WAL journal, ``synchronous=NORMAL`` (durable across process crashes; a power loss can
  lose the last commits, never corrupt the file) and a busy timeout, so concurrent
  processes wait for each other instead of failing.

``open_read_only`` is for reading a database this process may not write (a read-only
``.nonoka/``, file or mount): the same checks, nothing created, migrated or written
(``mode=ro``, ``query_only``). SQLite reads a WAL database through its ``-shm`` file,
which it must create when absent; where it cannot (a read-only directory) and no ``-wal``
holds commits, every commit is in the main file and nobody can write a new one (a writer
would need to create the ``-wal``), so the file is opened ``immutable=1``: read without
locks or the ``-shm``, as the constant file it is.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import time
from pathlib import Path

from nonoka.errors import StoreError
from nonoka.store.sqlite.entries import INDEX_DAMAGE_CODES
from nonoka.store.sqlite.ledger import apply_migrations, check_known, missing
from nonoka.store.sqlite.packing import register

BUSY_TIMEOUT_SECONDS = 5.0
"""How long a statement waits for another process's write lock, unless
``NONOKA_SQLITE_BUSY_TIMEOUT`` (seconds) says otherwise."""


def busy_timeout() -> float:
    """The busy timeout in seconds: ``NONOKA_SQLITE_BUSY_TIMEOUT``, or the default."""
    raw = os.environ.get("NONOKA_SQLITE_BUSY_TIMEOUT", "").strip()
    try:
        return max(float(raw), 0.0) if raw else BUSY_TIMEOUT_SECONDS
    except ValueError:
        return BUSY_TIMEOUT_SECONDS
_MAGIC = b"SQLite format 3\x00"
_HEADER_SIZE = 100
NEW_FILE_SECONDS = 10.0
"""An empty file younger than this is a database another process is creating."""
_COMPANIONS = ("-wal", "-shm", "-journal")


def open_database(path: str | os.PathLike[str], *, ours_only: bool = False
                  ) -> sqlite3.Connection:
    """Open (creating if needed) and migrate the database at ``path``.

    The connection is in autocommit mode (``isolation_level=None``): callers open their
    own transactions, ``BEGIN IMMEDIATE`` for writes. It may be used from any thread;
    callers serialise access.
    """
    file = Path(path)
    where = f"database {file}"
    created = _create_private(file)
    try:
        identity, size = _check_file(file, where, created)
        try:
            db = sqlite3.connect(
                file, isolation_level=None, check_same_thread=False, timeout=busy_timeout()
            )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open {where}: {exc}") from exc
        try:
            if _identity(file) != identity:  # swapped between the checks and the open
                raise StoreError(f"{where} was replaced while it was being opened; "
                                 "the file was left as it is. Try again")
            _configure(db, file, where, size, ours_only)
        except BaseException:
            db.close()
            raise
    except BaseException:
        if created:
            _forget_empty(file)
        raise
    return db


def _forget_empty(file: Path) -> None:
    """Remove a database file this open created when nothing was written into it (a
    full disk, say): an empty file left behind would be refused by every later open,
    although the error asked to free space and try again."""
    with contextlib.suppress(OSError):
        if file.stat().st_size == 0:
            file.unlink()
            for suffix in ("-wal", "-shm", "-journal"):
                Path(f"{file}{suffix}").unlink(missing_ok=True)


def writable(path: str | os.PathLike[str]) -> bool:
    """Whether this process may write the database and create its ``-wal``/``-shm``
    beside it (``access(2)``: permissions, a read-only mount, ``chattr +i``)."""
    file = Path(path)
    return os.access(file.parent, os.W_OK) and (
        not os.path.lexists(file) or os.access(file, os.W_OK))


def open_read_only(path: str | os.PathLike[str], *, ours_only: bool = False
                   ) -> sqlite3.Connection:
    """Open the existing database at ``path`` for reading only: nothing is created,
    migrated or written (see the module). A database an older nonoka wrote, which needs
    a migration first, is a ``StoreError`` that says so."""
    file = Path(path)
    where = f"database {file}"
    if not os.path.lexists(file):
        raise StoreError(f"{where} does not exist")
    identity, size = _check_file(file, where, created=False)
    db = connect_read_only(file, where, size=size)
    try:
        if _identity(file) != identity:
            raise StoreError(f"{where} was replaced while it was being opened; "
                             "the file was left as it is. Try again")
        if ours_only:
            _check_ours(db, where)
        lacking = missing(db, where)
        if lacking:
            raise StoreError(
                f"{where} was written by an older nonoka and needs upgrading ({lacking} "
                "schema migration(s)), which needs write access: run any nonoka command "
                "once where the database is writable; nothing was changed")
        db.execute("PRAGMA query_only = 1")
    except sqlite3.DatabaseError as exc:
        db.close()
        raise StoreError(f"{where} is not a usable SQLite database ({exc}); "
                         "the file was left as it is") from exc
    except BaseException:
        db.close()
        raise
    return db


def connect_read_only(file: Path, where: str | None = None, *, size: int | None = None
                      ) -> sqlite3.Connection:
    """A read-only connection: ``mode=ro``; ``immutable=1`` when the ``-shm`` cannot be
    made and no ``-wal`` holds commits (see the module). With the ``size`` ``_check_file``
    found, the header is checked too (``_check_header``); without, nothing is."""
    where = where or f"database {file}"
    uri = Path(os.path.abspath(file)).as_uri()
    for query in ("mode=ro", "immutable=1"):
        try:
            db = sqlite3.connect(f"{uri}?{query}", uri=True, isolation_level=None,
                                 check_same_thread=False, timeout=busy_timeout())
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open {where} for reading: {exc}") from exc
        try:
            if size is not None:
                _check_header(db, file, where, size)
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()
            register(db)
            return db
        except StoreError:
            db.close()
            raise
        except sqlite3.OperationalError as exc:
            db.close()
            if exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_CANTOPEN or query != "mode=ro":
                raise StoreError(f"cannot read {where}: {exc}; the file was left as it "
                                 "is") from exc
            if _has_wal(file):
                raise StoreError(
                    f"cannot read {where}: its latest commits are in {file.name}-wal, "
                    f"which SQLite reads through a {file.name}-shm file it cannot create "
                    f"in the read-only {file.parent}. Open it once with write access "
                    "(any nonoka command there folds them in), or copy the directory "
                    "somewhere writable") from exc
    raise AssertionError("unreachable")


def _configure(db: sqlite3.Connection, file: Path, where: str, size: int,
               ours_only: bool) -> None:
    register(db)  # ``entry_text``: the search index reads entry rows through it
    try:
        # Read-only checks first: a foreign or newer file must not be touched.
        _check_header(db, file, where, size)
        db.execute("SELECT count(*) FROM sqlite_master").fetchone()
        if ours_only:
            _check_ours(db, where)
        check_known(db, where)
        _enable_wal(db, where)
        db.execute("PRAGMA synchronous = NORMAL")
        apply_migrations(db, where)
    except sqlite3.OperationalError as exc:
        advice = ("another process holds it locked; try again" if "locked" in str(exc)
                  else "check that the disk has free space and the directory is writable")
        raise StoreError(
            f"cannot open {where}: {exc}; {advice}. The file was left as it is"
        ) from exc
    except sqlite3.DatabaseError as exc:
        raise StoreError(
            f"{where} is not a usable SQLite database ({exc}); the file was left as it is"
        ) from exc


def _enable_wal(db: sqlite3.Connection, where: str) -> None:
    """Switch a new file to WAL; an existing one already is, and is only read.

    Switching needs an exclusive lock, and SQLite reports a competing opener as busy
    without calling the busy handler, so the retry is ours.
    """
    if str(db.execute("PRAGMA journal_mode").fetchone()[0]).lower() == "wal":
        return
    deadline = time.monotonic() + busy_timeout()
    while True:
        try:
            mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            break
        except sqlite3.OperationalError as exc:
            busy = exc.sqlite_errorcode & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
            if not busy or time.monotonic() > deadline:
                raise
            time.sleep(0.002)
    if str(mode).lower() != "wal":
        raise StoreError(f"{where}: cannot use the WAL journal mode (got {mode!r})")


def _check_ours(db: sqlite3.Connection, where: str) -> None:
    """Refuse a SQLite database of something else: it would get nonoka's tables."""
    tables = db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    if tables and ("nonoka_migrations",) not in tables:
        raise StoreError(
            f"{where} is a SQLite database, but not nonoka's (it has no nonoka_migrations "
            "table); the file was left as it is. Point NONOKA_DATABASE_URL elsewhere or "
            "move the file away"
        )


def _identity(file: Path) -> tuple[int, int] | None:
    with contextlib.suppress(OSError):
        info = os.lstat(file)
        return info.st_dev, info.st_ino
    return None


def _create_private(file: Path) -> bool:
    """Create the parent (0700) and an empty file (0600) unless they exist; whether the
    file was created here."""
    parent = file.parent
    if not parent.exists():
        try:
            parent.mkdir(mode=0o700, parents=True)
        except FileExistsError:
            pass  # another process made it first
        else:
            os.chmod(parent, 0o700)  # mkdir's mode is filtered by the umask
    try:
        fd = os.open(file, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return False
    except OSError as exc:
        raise StoreError(f"cannot create database {file}: {exc}") from exc
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
    return True


def _check_file(file: Path, where: str, created: bool) -> tuple[tuple[int, int], int]:
    """Refuse what is not a regular file of our own (a symlink, a FIFO, SQLite's side
    files as symlinks) and an old empty file, from the file's metadata alone. Returns the
    file's identity, checked again once open, and its size.

    The file itself is not opened here: POSIX locks belong to the process, and closing
    any descriptor of a file drops all of them, so a read and close of the header while
    another connection of this process had the file open (``nonoka serve`` opens it for
    its keys too) let another process take the file for unused, fold the write-ahead log
    in and delete it under that connection, whose later commits went nowhere. The header
    is checked through SQLite instead (``_check_header``), which shares one descriptor
    per file among a process's connections. Only a file beside a rollback journal, which
    SQLite would replay into it on its first read (nonoka's files never have one: they
    are WAL), is read here first."""
    for companion in _COMPANIONS:
        with contextlib.suppress(FileNotFoundError):
            if not stat.S_ISREG(os.lstat(f"{file}{companion}").st_mode):
                raise StoreError(
                    f"{where}: {file.name}{companion} is not a regular file (a symlink?); "
                    "nonoka does not follow links for its database. Remove it")
    try:
        info = os.lstat(file)
    except OSError as exc:
        raise StoreError(f"cannot read {where}: {exc}") from exc
    if stat.S_ISLNK(info.st_mode):
        raise StoreError(
            f"{where} is a symlink; nonoka does not follow links for its database (a "
            "repository could commit one pointing at any file). Remove the link, or "
            "point NONOKA_DATABASE_URL at the real file")
    if not stat.S_ISREG(info.st_mode):
        raise StoreError(f"{where} is not a regular file (a FIFO, device or socket); "
                         "the file was left as it is. Move it away")
    if not os.access(file, os.R_OK):
        raise StoreError(f"cannot read {where}: permission denied")
    identity = (info.st_dev, info.st_ino)
    if info.st_size == 0:
        if not created and time.time() - info.st_mtime > NEW_FILE_SECONDS \
                and not _has_wal(file):
            raise StoreError(
                f"{where} is empty (0 bytes) but not new: a database that was emptied, or "
                "a file that is not nonoka's; the file was left as it is. Restore it from "
                "a backup, or move it away to start a new one")
    elif _has_journal(file):
        _check_raw_header(file, where, info.st_size)
    return identity, info.st_size


def _check_header(db: sqlite3.Connection, file: Path, where: str, size: int) -> None:
    """Refuse, through the connection and before anything is written, a non-empty file
    that is not SQLite and one shorter than its header says: SQLite reports the first as
    not a database and the second (with no write-ahead log to make up the difference) as
    malformed, when it first reads the header."""
    if size == 0:
        return
    try:
        db.execute("PRAGMA page_count").fetchone()
    except sqlite3.DatabaseError as exc:
        code = exc.sqlite_errorcode & 0xFF
        if code == sqlite3.SQLITE_NOTADB:
            raise StoreError(
                f"{where} is not a SQLite database (bad or truncated header); "
                "the file was left as it is. Move it away or pick another path.") from exc
        if code == sqlite3.SQLITE_CORRUPT:
            # A damaged file, refused anyway: its own bytes say whether it is cut short.
            _check_raw_header(file, where, size)
            raise StoreError(f"{where} is not a usable SQLite database ({exc}); the file "
                             "was left as it is") from exc
        raise


def _check_raw_header(file: Path, where: str, size: int) -> None:
    """The header's checks on the file's own bytes, for a file SQLite must not read
    first (see ``_check_file``)."""
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            head = os.pread(fd, _HEADER_SIZE, 0)
        finally:
            os.close(fd)
    except OSError as exc:
        raise StoreError(f"cannot read {where}: {exc}") from exc
    if len(head) < _HEADER_SIZE or not head.startswith(_MAGIC):
        raise StoreError(
            f"{where} is not a SQLite database (bad or truncated header); "
            "the file was left as it is. Move it away or pick another path."
        )
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(head[28:32], "big")
    size_is_valid = head[24:28] == head[92:96] and pages > 0
    if size_is_valid and size < page_size * pages and not _has_wal(file):
        raise StoreError(
            f"{where} is truncated ({size} bytes, its header says {page_size * pages}); "
            "the file was left as it is. Restore it from a backup or move it away."
        )


def _has_journal(file: Path) -> bool:
    with contextlib.suppress(OSError):
        return os.stat(f"{file}-journal").st_size > 0
    return False


def _has_wal(file: Path) -> bool:
    with contextlib.suppress(OSError):
        return os.stat(f"{file}-wal").st_size > 0
    return False


def sqlite_error(path: Path, exc: sqlite3.Error) -> StoreError:
    """A failed statement as a ``StoreError``; a lock held too long may be retried.

    Another process holding the write lock past the busy timeout is a passing state:
    nothing was written, and the same request sent again is expected to succeed. A
    damaged full-text index (``entries.INDEX_DAMAGE_CODES``) is derived data: the
    message says how to make it again, not that the file is lost.
    """
    code = getattr(exc, "sqlite_errorcode", None)
    if code in INDEX_DAMAGE_CODES:
        return StoreError(
            f"database {path}: its full-text search index is damaged ({exc}); nothing was "
            "written and the sessions are intact: `nonoka db check --repair` rebuilds the "
            "index from them")
    if code == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY and "session_entries.doc" in str(exc):
        return StoreError(
            f"database {path}: another program stored an entry row where this session's "
            "next entry goes; nothing was written: `nonoka db check --repair` moves that "
            "row to its own session's place")
    if code is not None and code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
        return StoreError(
            f"database {path}: {exc} (another process held it for over "
            f"{busy_timeout():g} s); nothing was written: send the request again",
            retryable=True)
    return StoreError(f"database {path}: {exc}")
