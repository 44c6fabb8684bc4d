"""A project's stores: checkpoints, session index and event log, from one database URL.

Every turn runs in a fresh process that starts here, so this module imports no engine:
``open_project_stores`` imports only the one the URL names, when called. By default each
workspace has its own file, ``<cwd>/.nonoka/sessions.db``, so projects never contend or
see each other's history; the SQLite engine opens that file once and all three stores
share the connection. A ``postgresql://`` URL puts every project in one shared database
(``?options=-csearch_path%3Dname`` picks a schema); it needs the ``postgres`` extra.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from nonoka.errors import ConfigurationError

if TYPE_CHECKING:
    from collections.abc import Callable
    from contextlib import AbstractAsyncContextManager

    from nonoka.store.base import CheckpointStore, SessionLeases
    from nonoka.store.leases import HeldLease
    from nonoka.store.next_calls import ClosableNextCallStore
    from nonoka.store.records import EventLog, SessionIndex
    from nonoka.store.reuse import StoreReuse

ENV_VAR = "NONOKA_DATABASE_URL"
DEFAULT_DATABASE = Path(".nonoka") / "sessions.db"
"""Relative to the project directory (the request's ``cwd``)."""

URL_FORMS = (
    "a file path (relative to the project), sqlite:///absolute/path.db, "
    "sqlite:relative/path.db, memory: (nothing kept; for tests) or postgresql://..."
)


@runtime_checkable
class _Closable(Protocol):
    async def close(self) -> None: ...


class ProjectStores:
    """The stores one process uses for a project. ``url`` names the database opened.

    A plain class: this module is on the bridge's early path, which a dataclass would
    make import ``dataclasses`` (and ``inspect``), several milliseconds of every turn.
    """

    __slots__ = ("checkpoints", "events", "index", "url")

    def __init__(self, checkpoints: CheckpointStore, index: SessionIndex, events: EventLog,
                 url: str) -> None:
        self.checkpoints = checkpoints
        self.index = index
        self.events = events
        self.url = url

    def __repr__(self) -> str:
        return f"ProjectStores(url={self.url!r})"

    @property
    def leases(self) -> SessionLeases:
        """Session ownership for this project (every engine's checkpoint store keeps it).

        Wrap a turn in ``nonoka.store.leases.hold_lease(stores.leases, ...)``.
        """
        from nonoka.store.base import SessionLeases

        if not isinstance(self.checkpoints, SessionLeases):
            raise ConfigurationError(
                f"the {type(self.checkpoints).__name__} store keeps no session leases")
        return self.checkpoints

    def hold(self, session_id: str,
             owner: str | None = None) -> AbstractAsyncContextManager[HeldLease]:
        """Own ``session_id`` for one turn: ``async with stores.hold(sid): ...``.

        Waits up to ``NONOKA_LEASE_WAIT`` seconds (default 0) for another process that
        runs the session, then raises ``SessionBusyError``. ``owner``: the token of a
        lease this process already took (it is renewed, not taken anew).
        """
        from nonoka.store.leases import hold_lease, lease_wait_from_env, new_lease_owner

        return hold_lease(self.leases, session_id, owner or new_lease_owner(),
                          wait=lease_wait_from_env())

    async def close(self) -> None:
        """Close the index and log first (they may borrow the checkpoints' connection)."""
        parts: list[object] = [self.index, self.events]
        try:
            for part in {id(p): p for p in parts}.values():  # often one object
                if isinstance(part, _Closable):
                    await part.close()
        finally:
            await self.checkpoints.close()

    async def __aenter__(self) -> ProjectStores:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()


def database_url_from_env() -> str | None:
    """``NONOKA_DATABASE_URL``, or ``None`` when unset or blank."""
    return os.environ.get(ENV_VAR, "").strip() or None


def open_project_stores(cwd: Path, database_url: str | None = None, *,
                        read_only: bool = False, reuse: StoreReuse | None = None
                        ) -> ProjectStores:
    """Open the stores for the project at ``cwd``.

    No URL means ``<cwd>/.nonoka/sessions.db`` (``.nonoka/`` is created ``0700`` if
    missing; the file ``0600``; a ``.nonoka`` that is a link, a file or another user's is
    a ``WorkspaceError``: ``store/statedir.py``). Relative paths are relative to ``cwd``, not to the
    process's working directory. A URL that names no known engine is a
    ``ConfigurationError`` listing the accepted forms. ``read_only`` opens an existing
    SQLite file for reading only and creates nothing (``store/sqlite/database.py``);
    the other engines open as usual. ``reuse``: what the checkpoint store keeps between
    calls, when the caller shares it between the stores it opens (``nonoka.store.reuse``).
    """
    if database_url is None:
        project = Path(os.path.abspath(cwd))
        if read_only:
            from nonoka.store.statedir import check_state_dir

            check_state_dir(project / DEFAULT_DATABASE.parent)  # a link is refused
            return _open_sqlite(database_target(cwd)[1], ours_only=True, read_only=True,
                                reuse=reuse)
        _make_private_dir(project)
        stores = _open_sqlite(database_target(cwd)[1], ours_only=True, reuse=reuse)
        from nonoka.store.statedir import ignore_everything

        # Once the database is known to be ours: a refused folder is left as it was.
        ignore_everything(project / DEFAULT_DATABASE.parent)
        return stores
    engine, target = database_target(cwd, database_url)
    if engine == "sqlite" and read_only:
        return _open_sqlite(target, read_only=True, reuse=reuse)
    return _OPENERS[engine](target, reuse)


def database_target(cwd: Path, database_url: str | None = None) -> tuple[str, str]:
    """``(engine, target)`` the project's stores live in, without opening anything.

    ``target`` is an absolute file for SQLite and the URL itself otherwise.
    """
    project = Path(os.path.abspath(cwd))
    if database_url is None:
        return "sqlite", str(project / DEFAULT_DATABASE)
    return _parse(database_url, project)


def _parse(url: str, project: Path) -> tuple[str, str]:
    """``(engine, target)``: an absolute file for SQLite, the URL itself otherwise."""
    text = url.strip()
    if not text:
        raise ConfigurationError(f"the database URL is empty; use {URL_FORMS}")
    scheme, colon, rest = text.partition(":")
    # One letter before the colon is a drive, not a scheme; "./a:b" is a path.
    is_url = colon and len(scheme) > 1 and scheme[0].isalpha() and all(
        c.isalnum() or c in "+.-" for c in scheme
    )
    if not is_url:
        return "sqlite", _file(text, project)
    scheme = scheme.lower()
    if scheme == "sqlite":
        if rest.startswith("//"):
            rest = rest[2:]
            if not rest.startswith("/"):
                raise ConfigurationError(
                    f"database URL {url!r}: sqlite:// takes an absolute path "
                    "(sqlite:///abs/path.db); for a path relative to the project use "
                    "sqlite:relative/path.db"
                )
        if not rest:
            raise ConfigurationError(f"database URL {url!r} names no file; use {URL_FORMS}")
        return "sqlite", _file(rest, project)
    if scheme == "memory" and not rest:
        return "memory", "memory:"
    if scheme in ("postgresql", "postgres"):
        return "postgresql", text
    # Name only the scheme: the rest of a URL may hold a password.
    raise ConfigurationError(
        f"unknown database URL scheme {scheme + ':'!r}; use {URL_FORMS} "
        "(prefix a path that contains a colon with ./)"
    )


def _file(path: str, project: Path) -> str:
    absolute = os.path.abspath(project / os.path.expanduser(path))
    # POSIX keeps a leading "//" (sqlite:////abs); on Linux and macOS it is just "/".
    return "/" + absolute.lstrip("/") if absolute.startswith("//") else absolute


def _make_private_dir(project: Path) -> None:
    """Create ``<project>/.nonoka`` owner-only; the project directory itself must exist."""
    if not project.is_dir():
        raise ConfigurationError(f"project directory {project} does not exist")
    from nonoka.store.statedir import ensure_state_dir

    # An existing folder keeps its mode (it may hold files with their own). The .gitignore
    # that keeps it out of git and of a host's git-based snapshots comes once it is open.
    ensure_state_dir(project / DEFAULT_DATABASE.parent, ignore=False)


# -- engines: one opener each, importing its engine only when called -----------------------


def _open_sqlite(path: str, reuse: StoreReuse | None = None, *, ours_only: bool = False,
                 read_only: bool = False) -> ProjectStores:
    """``ours_only`` for the project's own ``.nonoka/sessions.db``: no other program's
    database is taken over there."""
    from nonoka.store.sqlite.checkpoints import SQLiteCheckpointStore
    from nonoka.store.sqlite.records import SQLiteRecordStore

    checkpoints = SQLiteCheckpointStore(path, ours_only=ours_only, read_only=read_only,
                                        reuse=reuse)
    records = SQLiteRecordStore.from_checkpoints(checkpoints)
    return ProjectStores(checkpoints, records, records, f"sqlite://{path}")


def _open_memory(url: str, reuse: StoreReuse | None = None) -> ProjectStores:
    from nonoka.store.memory.checkpoints import MemoryCheckpointStore
    from nonoka.store.memory.records import MemoryRecordStore

    records = MemoryRecordStore()
    return ProjectStores(MemoryCheckpointStore(reuse=reuse), records, records, url)


def _open_postgresql(url: str, reuse: StoreReuse | None = None) -> ProjectStores:
    """Both stores share one pool, opened (and the schema migrated) on first use.

    Opening lazily keeps this call synchronous and free of I/O; a server that is down
    fails the first store call with a ``StoreError`` naming it.
    """
    # Without the extra this raises MissingExtraError, which names it.
    from nonoka.store.postgres.checkpoints import PostgresCheckpointStore
    from nonoka.store.postgres.records import PostgresRecordStore

    checkpoints = PostgresCheckpointStore(url, reuse=reuse)
    records = PostgresRecordStore(checkpoints.database)
    return ProjectStores(checkpoints, records, records, checkpoints.database.where)


_OPENERS: dict[str, Callable[[str, StoreReuse | None], ProjectStores]] = {
    "sqlite": _open_sqlite,
    "memory": _open_memory,
    "postgresql": _open_postgresql,
}


# -- the early path: the next-call store alone, before the runtime loads --------------------


def open_next_call_store(cwd: Path,
                         database_url: str | None = None) -> ClosableNextCallStore | None:
    """The project's ``NextCallStore`` for the bridge's early dispatch, on the standard
    library only; ``None`` when its engine keeps none or its database is not ready
    (nothing is created or migrated here; a database from a newer nonoka raises
    ``UnsupportedVersionError``). Close it when done."""
    engine, target = database_target(cwd, database_url)
    if engine != "sqlite":
        return None
    from nonoka.store.sqlite.next_calls import SQLiteNextCalls

    return SQLiteNextCalls.open_existing(target)
