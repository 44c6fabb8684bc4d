"""What the commands share in click: the ``--dir``/``--db`` choice and running a coroutine.

Every command that opens a project's database takes the same two options, so a person
learns once how to point any of them at another project or another database.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar, cast

import click

from nonoka.cli.common import Place, failed_at
from nonoka.cli.voice import CliError
from nonoka.errors import NonokaError

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

DB_HELP = ("The database: a file path, sqlite:///abs/path.db or postgresql://... "
           "(default: NONOKA_DATABASE_URL, else .nonoka/sessions.db in the project).")
DIR_HELP = "The project directory (default: the current directory)."


def place_options(command: F) -> F:
    """Add ``--dir DIR`` and ``--db URL``; the command receives ``place: Place``.

    Put it right above the function, so the two options are listed last. A store failure
    the command lets out names ``--db`` rather than ``NONOKA_DATABASE_URL`` when ``--db``
    chose the database.
    """
    @functools.wraps(command)
    def with_place(*args: Any, directory: Path | None, database: str | None,
                   **kwargs: Any) -> Any:
        place = Place.here(directory, database)
        try:
            return command(*args, place=place, **kwargs)
        except NonokaError as exc:  # a store failing as it is used: name what chose it
            raise failed_at(place, exc) from None
        except CliError as exc:
            if not place.named_by or place.blame(exc.message) == exc.message:
                raise
            raise CliError(place.blame(exc.message), exc.exit_code, exc.code) from None

    with_db = click.option("--db", "database", metavar="URL", help=DB_HELP)(with_place)
    return cast(F, click.option("--dir", "directory", metavar="DIR",
                                type=click.Path(file_okay=False, path_type=Path),
                                help=DIR_HELP)(with_db))


def call(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a command's coroutine so that SIGTERM, like SIGINT, cancels it once (a turn in
    progress is saved as cancelled); failures go up to ``voice.VoicedGroup``."""
    try:
        return asyncio.run(_stoppable(make))
    except asyncio.CancelledError:
        raise KeyboardInterrupt from None


async def _stoppable(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    from nonoka.signals import StopSignals

    task = asyncio.current_task()
    assert task is not None
    signals = StopSignals()
    cancelled = False

    def stop() -> None:
        nonlocal cancelled
        if not cancelled:  # a second signal must not interrupt the save the first began
            cancelled = True
            task.cancel()

    signals.install()
    signals.attach(asyncio.get_running_loop(), stop)
    try:
        return await make()
    finally:
        signals.uninstall()
