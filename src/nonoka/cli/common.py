"""What the human commands share: the project's stores, session look-up, clean failures."""

from __future__ import annotations

import os
from pathlib import Path

from nonoka.errors import NonokaError, failure_of
from nonoka.store.project import DEFAULT_DATABASE, ProjectStores, database_url_from_env
from nonoka.store.records import SessionIndex, SessionRecord


class CliError(Exception):
    """A failure to report in one line (no traceback) with the command's exit code."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


class AmbiguousSessionError(CliError):
    """A prefix matches several sessions; ``candidates`` are shown so people can pick."""

    def __init__(self, prefix: str, candidates: list[SessionRecord]) -> None:
        super().__init__(f"{prefix!r} matches {len(candidates)} sessions; "
                         "give more of the id")
        self.candidates = candidates


def open_stores(project: Path) -> ProjectStores:
    """The project's stores, as the bridge opens them (``NONOKA_DATABASE_URL`` honoured).

    A database that cannot be opened (truncated, from a newer nonoka, read-only, a full
    disk) or a ``.nonoka/`` that cannot be made is a ``CliError`` that says what to do,
    not a traceback.
    """
    from nonoka.turn.project import open_stores as open_project

    try:
        return open_project(project)
    except NonokaError as exc:
        raise CliError(failure_of(exc).message) from None


def open_for_reading(project: Path, url: str | None = None) -> ProjectStores:
    """The project's stores for a command that only reads (list, show, search, export,
    ``db check``/``stats``): a SQLite file this process cannot write (a read-only
    ``.nonoka/``, file or mount) is opened read-only, creating and migrating nothing;
    anything else opens as ``open_stores`` does. ``url`` names another database."""
    from nonoka.store.project import database_target, open_project_stores
    from nonoka.store.sqlite.database import writable

    chosen = url if url is not None else database_url_from_env()
    try:
        engine, target = database_target(project, chosen)
        if engine != "sqlite" or writable(target):
            if url is None:
                return open_stores(project)
            return open_project_stores(project, url)
        return open_project_stores(project, chosen, read_only=True)
    except NonokaError as exc:
        raise CliError(failure_of(exc).message) from None


def can_write(project: Path) -> bool:
    """Whether the project's database (when it is a SQLite file) may be written here."""
    from nonoka.store.project import database_target
    from nonoka.store.sqlite.database import writable

    try:
        engine, target = database_target(project, database_url_from_env())
    except NonokaError:
        return True  # let the command that opens it say what is wrong
    return engine != "sqlite" or writable(target)


def has_database(project: Path) -> bool:
    """Whether there is anything to read: reading commands must not create a database.

    Anything at the database's path counts (a symlink, a FIFO), so that opening it can
    refuse it with a reason instead of reporting an empty project; a ``.nonoka`` that is
    not nonoka's own directory (a link, a file) is a ``CliError`` saying so.
    """
    if database_url_from_env() is not None:
        return True
    from nonoka.store.statedir import check_state_dir

    try:
        check_state_dir(project / DEFAULT_DATABASE.parent)
    except NonokaError as exc:
        raise CliError(failure_of(exc).message) from None
    return os.path.lexists(project / DEFAULT_DATABASE)


async def find_session(index: SessionIndex, ref: str) -> SessionRecord:
    """The session whose id is ``ref`` or starts with it; ``CliError`` when none or several."""
    ref = ref.strip()
    if not ref:
        raise CliError("give a session id (or the start of one); `nonoka sessions list` "
                       "shows them")
    candidates = await index.find_sessions_by_prefix(ref, limit=21)
    for record in candidates:
        if record.session_id == ref:
            return record
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise CliError(f"no session id starts with {ref!r} in this project; "
                       "`nonoka sessions list --all` shows them")
    raise AmbiguousSessionError(ref, candidates)
