"""A damaged database is read where it can be, never written.

SQLite reads around a damaged page until a query happens to touch it, so a command can
seem to work on a file ``nonoka db check`` calls malformed — and a write there can spread
the damage or fail half way. Before a command writes, the file gets SQLite's
``quick_check`` (it reads every page: milliseconds for a few megabytes); a damaged one is
refused with what to do. Reading commands do not check: they show what they still can.
The file is opened as the store opens it for reading, so a symlink, a truncated file or
one from another nonoka is left for the command's own opening to name.
"""

from __future__ import annotations

import os
import sqlite3

from nonoka.cli.common import Place
from nonoka.cli.voice import (
    DAMAGED_CODE,
    CliError,
    damage_words,
    damaged_advice,
    is_damage,
)


def damage_of(path: str) -> str | None:
    """SQLite's words for what is wrong with the database file at ``path``; ``None`` when
    it is sound, absent, or refused for another reason (a symlink, a truncated file, one
    that needs a migration: the command's own opening of it says so)."""
    from nonoka.errors import StoreError
    from nonoka.store.sqlite.database import open_read_only

    if not os.path.lexists(path):
        return None
    try:
        db = open_read_only(path)  # the store's own checks first, then a read-only look
    except StoreError as exc:
        return damage_words(str(exc)) if is_damage(str(exc)) else None
    try:
        rows = db.execute("PRAGMA quick_check(3)").fetchall()
    except sqlite3.DatabaseError as exc:
        return damage_words(str(exc)) if is_damage(str(exc)) else None
    finally:
        db.close()
    problems = [" ".join(str(row[0]).split()) for row in rows if row and row[0] != "ok"]
    return "; ".join(problems) or None


def refuse_if_damaged(place: Place) -> None:
    """Raise a ``CliError`` if the place's SQLite database is damaged."""
    from nonoka.errors import NonokaError
    from nonoka.store.project import database_target

    try:
        engine, target = database_target(place.project, place.url)
    except NonokaError:
        return  # a bad URL: opening it reports that
    if engine != "sqlite":
        return
    found = damage_of(target)
    if found is not None:
        raise CliError(damaged_advice(f"the database {target}", found), code=DAMAGED_CODE)
