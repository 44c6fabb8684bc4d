"""Opening a nonoka SQLite file: permissions, sanity checks, pragmas, migrations.

Shared by everything that keeps tables in the same file (the checkpoint store, the
session index and event log), so they all get the same guarantees:

- a new file (and SQLite's ``-wal``/``-shm`` files, which copy its mode) is created
  owner-only, and a parent directory we create is ``0700``;
- a file that is not a SQLite database, or is visibly truncated, is refused with a
  ``StoreError`` naming the path, before SQLite is allowed to write to it;
- a file migrated by a newer nonoka is refused with ``UnsupportedVersionError``, also
  before anything is written;
- WAL journal, ``synchronous=NORMAL`` (durable across process crashes; a power loss can
  lose the last commits, never corrupt the file) and a busy timeout, so concurrent
  processes wait for each other instead of failing.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from pathlib import Path

from nonoka.errors import StoreError
from nonoka.store.sqlite.migrations import apply_migrations, check_known

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


def open_database(path: str | os.PathLike[str]) -> sqlite3.Connection:
    """Open (creating if needed) and migrate the database at ``path``.

    The connection is in autocommit mode (``isolation_level=None``): callers open their
    own transactions, ``BEGIN IMMEDIATE`` for writes. It may be used from any thread;
    callers serialise access.
    """
    file = Path(path)
    where = f"database {file}"
    _create_private(file)
    _check_header(file, where)
    try:
        db = sqlite3.connect(
            file, isolation_level=None, check_same_thread=False, timeout=busy_timeout()
        )
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open {where}: {exc}") from exc
    try:
        _configure(db, where)
    except BaseException:
        db.close()
        raise
    return db


def _configure(db: sqlite3.Connection, where: str) -> None:
    try:
        # Read-only checks first: a foreign or newer file must not be touched.
        db.execute("SELECT count(*) FROM sqlite_master").fetchone()
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


def _create_private(file: Path) -> None:
    """Create the parent (0700) and an empty file (0600) unless they exist."""
    parent = file.parent
    if not parent.exists():
        try:
            parent.mkdir(mode=0o700, parents=True)
        except FileExistsError:
            pass  # another process made it first
        else:
            os.chmod(parent, 0o700)  # mkdir's mode is filtered by the umask
    try:
        fd = os.open(file, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    except OSError as exc:
        raise StoreError(f"cannot create database {file}: {exc}") from exc
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


def _check_header(file: Path, where: str) -> None:
    """Refuse a non-empty file that is not SQLite, or is shorter than its header says."""
    try:
        with file.open("rb") as handle:
            head = handle.read(_HEADER_SIZE)
            size = os.fstat(handle.fileno()).st_size
    except OSError as exc:
        raise StoreError(f"cannot read {where}: {exc}") from exc
    if not head:
        return  # a new, empty database
    if len(head) < _HEADER_SIZE or not head.startswith(_MAGIC):
        raise StoreError(
            f"{where} is not a SQLite database (bad or truncated header); "
            "the file was left as it is. Move it away or pick another path."
        )
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(head[28:32], "big")
    size_is_valid = head[24:28] == head[92:96] and pages > 0
    # While a WAL file holds frames a checkpoint may be half done; trust the header only
    # when there is none.
    if size_is_valid and size < page_size * pages and not _has_wal(file):
        raise StoreError(
            f"{where} is truncated ({size} bytes, its header says {page_size * pages}); "
            "the file was left as it is. Restore it from a backup or move it away."
        )


def _has_wal(file: Path) -> bool:
    with contextlib.suppress(OSError):
        return os.stat(f"{file}-wal").st_size > 0
    return False


def sqlite_error(path: Path, exc: sqlite3.Error) -> StoreError:
    """A failed statement as a ``StoreError``; a lock held too long may be retried.

    Another process holding the write lock past the busy timeout is a passing state:
    nothing was written, and the same request sent again is expected to succeed.
    """
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None and code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
        return StoreError(
            f"database {path}: {exc} (another process held it for over "
            f"{busy_timeout():g} s); nothing was written: send the request again",
            retryable=True)
    return StoreError(f"database {path}: {exc}")
