"""A warm process keeps the project's SQLite stores open between requests, and opens
them anew whenever they no longer stand for the file on disk."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

from nonoka.store.kept import KeptStores
from nonoka.store.project import ProjectStores, open_project_stores
from nonoka.store.sqlite.checkpoints import SQLiteCheckpointStore


def _opener(project: Path, opened: list[ProjectStores],
            url: str | None = None) -> Callable[[], ProjectStores]:
    def open_stores() -> ProjectStores:
        stores = open_project_stores(project, url)
        opened.append(stores)
        return stores
    return open_stores


def _closed(stores: ProjectStores) -> bool:
    store = stores.checkpoints
    assert isinstance(store, SQLiteCheckpointStore)
    return store._db is None


async def test_the_same_file_is_not_opened_again(tmp_path: Path) -> None:
    kept, opened = KeptStores(), list[ProjectStores]()
    first = await kept.take("db", _opener(tmp_path, opened))
    await kept.give_back("db", first)
    second = await kept.take("db", _opener(tmp_path, opened))
    assert second is first and len(opened) == 1 and not _closed(first)
    await kept.give_back("db", second)
    await kept.close()
    assert _closed(first)
    assert not (tmp_path / ".nonoka" / "sessions.db-wal").exists()  # folded back at close


async def test_a_database_removed_or_replaced_meanwhile_is_opened_anew(tmp_path: Path) -> None:
    kept, opened = KeptStores(), list[ProjectStores]()
    db = tmp_path / ".nonoka" / "sessions.db"
    first = await kept.take("db", _opener(tmp_path, opened))
    await kept.give_back("db", first)
    os.rename(db, tmp_path / "moved.db")  # another program moved it away
    second = await kept.take("db", _opener(tmp_path, opened))
    assert second is not first and _closed(first) and db.exists()
    await kept.give_back("db", second)
    # Restored from a copy: same path, another file.
    os.replace(tmp_path / "moved.db", db)
    for suffix in ("-wal", "-shm"):
        (db.parent / f"sessions.db{suffix}").unlink(missing_ok=True)
    third = await kept.take("db", _opener(tmp_path, opened))
    assert third is not second and _closed(second) and len(opened) == 3
    await kept.give_back("db", third)
    await kept.close()


async def test_a_schema_changed_by_another_process_goes_through_the_opening_checks(
        tmp_path: Path) -> None:
    kept, opened = KeptStores(), list[ProjectStores]()
    first = await kept.take("db", _opener(tmp_path, opened))
    await kept.give_back("db", first)
    other = sqlite3.connect(tmp_path / ".nonoka" / "sessions.db")
    other.execute("CREATE TABLE added_by_a_newer_version (x)")
    other.commit()
    other.close()
    second = await kept.take("db", _opener(tmp_path, opened))
    assert second is not first and _closed(first)
    await kept.give_back("db", second)
    await kept.close()


async def test_another_key_closes_what_was_kept(tmp_path: Path) -> None:
    kept, opened = KeptStores(), list[ProjectStores]()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = await kept.take("a", _opener(tmp_path / "a", opened))
    await kept.give_back("a", first)
    second = await kept.take("b", _opener(tmp_path / "b", opened))
    assert second is not first and _closed(first)
    await kept.give_back("b", second)
    await kept.close()
    assert _closed(second)


async def test_stores_that_are_not_a_writable_file_are_closed_not_kept(tmp_path: Path) -> None:
    kept, opened = KeptStores(), list[ProjectStores]()
    memory = await kept.take("memory", _opener(tmp_path, opened, "memory:"))
    await kept.give_back("memory", memory)  # nothing kept: a new memory store each time
    again = await kept.take("memory", _opener(tmp_path, opened, "memory:"))
    assert again is not memory and len(opened) == 2
    await kept.give_back("memory", again)
    await kept.close()
