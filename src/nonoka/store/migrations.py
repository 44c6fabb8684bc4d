"""Named schema migrations, and the one runner both SQL engines use.

A migration is a function of the engine's connection, registered in order with the
decorator ``registrar`` returns; its ``__name__`` is the name a database records in its
``nonoka_migrations`` table. ``migrate`` brings a database up to date at start-up:

1. it reads the recorded names and refuses a database that lists one this code does not
   know (a newer nonoka migrated it) before anything is changed;
2. when nothing is missing it stops there: the common start-up only reads;
3. otherwise, inside one exclusive write transaction of the engine's, it reads the names
   again (another process may have migrated meanwhile), applies the missing migrations
   in order and records each; a failure rolls all of them back.

So migrating is idempotent, and processes that start together on a fresh database apply
each migration exactly once. Never rename, reorder or edit a migration that has shipped:
its name is what databases remember. Standard library only: the bridge's early dispatch
checks a SQLite file's migrations before pydantic is loaded.
"""

from __future__ import annotations

from nonoka.errors import UnsupportedVersionError

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: the early path's import budget
if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Sequence
    from contextlib import AbstractAsyncContextManager
    from typing import Any, Protocol, TypeVar

    M = TypeVar("M", bound=Callable[..., Any])
    M_contra = TypeVar("M_contra", bound=Callable[..., Any], contravariant=True)
    T = TypeVar("T")

    class Ledger(Protocol[M_contra]):
        """What an engine gives the runner: its ledger table and its write transaction.

        For the type checker only: engines implement it structurally, nothing checks it
        at run time, so importing this module costs no ``typing`` machinery.
        """

        async def applied(self) -> list[str]:
            """The names recorded, oldest first; empty when there is no ledger yet."""
            ...

        def exclusive(self) -> AbstractAsyncContextManager[object]:
            """A write transaction that no other migrating process runs at the same
            time, with the ledger table created if missing; rolled back if the block
            raises."""
            ...

        async def apply(self, migration: M_contra) -> None:
            """Run ``migration`` inside the exclusive transaction and record its name."""
            ...


def registrar(migrations: list[M]) -> Callable[[M], M]:
    """A decorator that appends a migration to ``migrations`` (names must be unique)."""

    def register(migration: M) -> M:
        if migration.__name__ in names(migrations):
            raise ValueError(f"duplicate migration name {migration.__name__!r}")
        migrations.append(migration)
        return migration

    return register


def names(migrations: Sequence[Callable[..., Any]]) -> list[str]:
    """The recorded names of ``migrations``, in order."""
    return [m.__name__ for m in migrations]


def check_known(applied: Sequence[str], migrations: Sequence[Callable[..., Any]],
                where: str) -> None:
    """``UnsupportedVersionError`` when ``applied`` names a migration this code lacks."""
    known = set(names(migrations))
    unknown = [name for name in applied if name not in known]
    if unknown:
        raise UnsupportedVersionError(
            f"{where} was written by a newer nonoka (unknown schema migrations: "
            f"{', '.join(unknown)}). Upgrade nonoka to use it; nothing was changed."
        )


async def migrate(ledger: Ledger[M], migrations: Sequence[M], where: str) -> list[str]:
    """Apply the migrations ``ledger`` lacks; return the names applied (usually none)."""
    applied = await ledger.applied()
    check_known(applied, migrations, where)
    if len(applied) == len(migrations):  # names are unique, so every one is applied
        return []
    async with ledger.exclusive():
        done = await ledger.applied()
        check_known(done, migrations, where)
        new = [m for m in migrations if m.__name__ not in done]
        for migration in new:
            await ledger.apply(migration)
    return names(new)


def run_sync(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to completion without an event loop.

    For a synchronous driver (sqlite3) behind the async ``Ledger``: its coroutines never
    suspend, so one ``send`` finishes them. One that does suspend is a bug, reported as
    such rather than waited for.
    """
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coroutine.close()
    raise RuntimeError("a synchronous migration ledger suspended")
