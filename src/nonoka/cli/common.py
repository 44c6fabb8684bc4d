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


def has_database(project: Path) -> bool:
    """Whether there is anything to read: reading commands must not create a database.

    Anything at the database's path counts (a symlink, a FIFO), so that opening it can
    refuse it with a reason instead of reporting an empty project.
    """
    return database_url_from_env() is not None or os.path.lexists(project / DEFAULT_DATABASE)


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
