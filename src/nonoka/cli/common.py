"""What the human commands share: where the database is, session look-up, clean failures."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from nonoka.cli.voice import AmbiguousSessionError, CliError, complaint_of
from nonoka.errors import NonokaError
from nonoka.store.project import (
    DEFAULT_DATABASE,
    ENV_VAR,
    ProjectStores,
    database_url_from_env,
)
from nonoka.store.records import SessionIndex, SessionRecord


@dataclass(frozen=True)
class Place:
    """Where a command works: the project directory and the database URL (``None``: the
    project's own ``.nonoka/sessions.db``). ``--dir`` and ``--db`` choose them; without
    them, the current directory and ``NONOKA_DATABASE_URL``."""

    project: Path
    url: str | None = None
    named_by: str = ""
    """The option that named ``url`` (``--db``, ``--to``...), if one did."""

    @classmethod
    def of(cls, where: Place | Path) -> Place:
        """A ``Place``; a bare path is that project with the environment's database."""
        return where if isinstance(where, Place) else cls(where, database_url_from_env())

    @classmethod
    def here(cls, directory: Path | None = None, url: str | None = None,
             option: str = "--db") -> Place:
        """The place ``--dir`` and ``--db`` (or ``option``) name; either may be absent."""
        project = Path(os.path.abspath(directory if directory is not None else Path.cwd()))
        given = (url or "").strip()
        if given:
            return cls(project, given, option)
        return cls(project, database_url_from_env())

    def blame(self, message: str) -> str:
        """A store's message naming the option that chose the database, when one did,
        rather than the environment variable."""
        return message.replace(ENV_VAR, self.named_by) if self.named_by else message


def open_stores(where: Place | Path) -> ProjectStores:
    """The project's stores, as the bridge opens them (the place's database URL).

    A database that cannot be opened (truncated, from a newer nonoka, read-only, a full
    disk) or a ``.nonoka/`` that cannot be made is a ``CliError`` that says what to do,
    not a traceback.
    """
    from nonoka.errors import WorkspaceError
    from nonoka.store.project import open_project_stores

    place = Place.of(where)
    try:
        try:
            return open_project_stores(place.project, place.url)
        except OSError as exc:
            raise WorkspaceError(
                f"cannot create {place.project / '.nonoka'}: {exc.strerror or exc}; make the "
                f"workspace writable for this user, or point --db (or {ENV_VAR}) at a "
                "writable place") from None
    except NonokaError as exc:
        raise failed_at(place, exc) from None


def open_for_reading(where: Place | Path, url: str | None = None) -> ProjectStores:
    """The project's stores for a command that only reads (list, show, search, export,
    ``db check``/``stats``): a SQLite file this process cannot write (a read-only
    ``.nonoka/``, file or mount) is opened read-only, creating and migrating nothing;
    anything else opens as ``open_stores`` does. ``url`` names another database."""
    from nonoka.store.project import database_target, open_project_stores
    from nonoka.store.sqlite.database import writable

    place = Place.of(where)
    if url is not None:
        place = Place(place.project, url)
    try:
        engine, target = database_target(place.project, place.url)
        if engine != "sqlite" or writable(target):
            return open_stores(place)
        return open_project_stores(place.project, place.url, read_only=True)
    except NonokaError as exc:
        raise failed_at(place, exc) from None


def failed_at(place: Place, exc: NonokaError) -> CliError:
    """A store failure at ``place`` in the command's voice, naming what chose the database."""
    complaint = complaint_of(exc)
    assert complaint is not None
    return CliError(place.blame(complaint.message), complaint.exit_code, complaint.code)


def can_write(where: Place | Path) -> bool:
    """Whether the project's database (when it is a SQLite file) may be written here."""
    from nonoka.store.project import database_target
    from nonoka.store.sqlite.database import writable

    place = Place.of(where)
    try:
        engine, target = database_target(place.project, place.url)
    except NonokaError:
        return True  # let the command that opens it say what is wrong
    return engine != "sqlite" or writable(target)


def has_database(where: Place | Path) -> bool:
    """Whether there is anything to read: reading commands must not create a database.

    Anything at the database's path counts (a symlink, a FIFO), so that opening it can
    refuse it with a reason instead of reporting an empty project; a ``.nonoka`` that is
    not nonoka's own directory (a link, a file) is a ``CliError`` saying so.
    """
    place = Place.of(where)
    if place.url is not None:
        return True
    from nonoka.store.statedir import check_state_dir

    try:
        check_state_dir(place.project / DEFAULT_DATABASE.parent)
    except NonokaError as exc:
        from nonoka.errors import failure_of

        raise CliError(failure_of(exc).message) from None
    return os.path.lexists(place.project / DEFAULT_DATABASE)


def no_database(where: Place | Path) -> CliError:
    """The failure of a command that needs sessions where there is no database."""
    place = Place.of(where)
    return CliError(f"there are no sessions in {place.project} yet (no {DEFAULT_DATABASE}); "
                    "start one with: nonoka run \"hello\" (or name another database with "
                    f"--db, or the project with --dir)", code="no_database")


async def find_session(index: SessionIndex, ref: str) -> SessionRecord:
    """The session whose id is ``ref`` or starts with it; ``CliError`` when none or several."""
    ref = ref.strip()
    if not ref:
        raise CliError("the session id is empty; give a session id (or the start of one): "
                       "`nonoka sessions list` shows them", exit_code=2, code="usage_error")
    candidates = await index.find_sessions_by_prefix(ref, limit=21)
    for record in candidates:
        if record.session_id == ref:
            return record
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise CliError(f"no session id starts with {ref!r} in this project; "
                       "`nonoka sessions list -n 100` shows the latest ones",
                       code="not_found")
    raise AmbiguousSessionError(ref, candidates)
