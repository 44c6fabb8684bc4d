"""A damaged database is read where it can be, never written.

SQLite reads around a damaged page until a query happens to touch it, so a command can
seem to work on a file ``nonoka db check`` calls malformed — and a write there can spread
the damage or fail half way. Before a command writes, the file gets SQLite's
``quick_check`` (it reads every page: milliseconds for a few megabytes); a damaged one is
refused with what to do. Reading commands do not check: they show what they still can.
"""

from __future__ import annotations

import os
import sqlite3
from contextlib import closing

from nonoka.cli.common import CliError, Place
from nonoka.cli.voice import DAMAGED_CODE, damaged_advice, is_damage

BUSY_TIMEOUT = 5.0
"""Seconds to wait for a writer that holds the file (the check only reads)."""


def damage_of(path: str) -> str | None:
    """What SQLite finds wrong with the file at ``path`` (``None``: sound, or absent)."""
    if not os.path.isfile(path):
        return None
    try:
        with closing(sqlite3.connect(path, timeout=BUSY_TIMEOUT)) as db:
            rows = db.execute("PRAGMA quick_check(3)").fetchall()
    except sqlite3.DatabaseError as exc:
        if is_damage(str(exc)):
            return str(exc)
        return None  # locked, unreadable: the command that opens it says so
    problems = [str(row[0]) for row in rows if row and row[0] != "ok"]
    return "; ".join(" ".join(p.split()) for p in problems) or None


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
