"""``db check`` on damage only raw SQL can make: entry rows without their checkpoint, a
checkpoint missing entry rows, stored values an export cannot carry, on SQLite and
PostgreSQL (the queries are shared); the SQLite entries' digest chain, and its repair."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nonoka.errors import StoreError
from nonoka.ops.copy import copy_database
from nonoka.ops.maintenance import check, repair
from nonoka.store.project import ProjectStores, open_project_stores
from nonoka.store.sqlite import packing
from tests import pg
from tests.conformance.ops_suite import add_session, branch, continue_session, export_text

Raw = Callable[[str, tuple[object, ...]], None]


@pytest.fixture(params=["sqlite", "postgres"])
def engine(request: pytest.FixtureRequest, tmp_path: Path
           ) -> Iterator[tuple[Callable[[], ProjectStores], Raw]]:
    if request.param == "sqlite":
        path = tmp_path / "s.db"

        def sqlite_raw(sql: str, args: tuple[object, ...]) -> None:
            with sqlite3.connect(path) as db:
                db.execute(sql.replace("%s", "?"), args)

        yield (lambda: open_project_stores(tmp_path, f"sqlite:{path}")), sqlite_raw
        return
    schema = pg.create_schema()

    def pg_raw(sql: str, args: tuple[object, ...]) -> None:
        with pg.connect(schema) as conn:
            conn.execute(sql, args)

    try:
        yield (lambda: open_project_stores(tmp_path, pg.schema_url(schema))), pg_raw
    finally:
        pg.drop_schema(schema)


def test_check_finds_orphan_rows_and_missing_entries(
        engine: tuple[Callable[[], ProjectStores], Raw]) -> None:
    open_stores, raw = engine

    async def run() -> tuple[str, list[tuple[str, str, str | None]]]:
        async with open_stores() as stores:
            sid = await add_session(stores, title="s")
            child = await branch(stores, sid, 5)
            assert await check(stores) == []
            raw("INSERT INTO session_entries (session_id, seq, entry_json) "
                "VALUES ('zz-gone', 0, '{}')", ())
            raw("DELETE FROM session_entries WHERE session_id = %s AND seq = 5", (child,))
            return child, [(f.level, f.kind, f.session_id) for f in await check(stores)
                           if f.kind != "search_index"]

    child, found = asyncio.run(run())
    assert found == [("error", "orphan_rows", "zz-gone"), ("error", "entry_count", child),
                     ("error", "unreadable", child), ("error", "unexportable", child)]


def test_check_and_repair_the_session_list_order(
        engine: tuple[Callable[[], ProjectStores], Raw]) -> None:
    """Rows whose list order another writer broke (a stale order on a row that is not
    the list's top, none at all) are found, listed out of place until the repair, and
    put back by it, on both SQL engines; a top row that kept its place between its turns
    is not a finding."""
    open_stores, raw = engine

    async def run() -> None:
        async with open_stores() as stores:
            old, middle, new = [await add_session(stores, title=t, age=age)
                                for t, age in (("old", 300), ("middle", 200), ("new", 100))]
            record = await stores.index.get_session(new)
            assert record is not None  # its next turn: it keeps its place at the top
            await stores.index.upsert_session(record.model_copy(update={
                "last_active": record.last_active + 50}))
            assert await check(stores) == []
            raw("UPDATE cli_sessions SET list_order = last_active + 1000 "
                "WHERE session_id = %s", (old,))
            raw("UPDATE cli_sessions SET list_order = NULL WHERE session_id = %s", (middle,))
            # ``old`` now sorts above ``new``, whose kept place is then stale too.
            found = [(f.level, f.kind, f.session_id) for f in await check(stores)]
            assert sorted(found) == sorted(("warning", "list_order", sid)
                                           for sid in (old, middle, new))
            listed = [r.session_id for r in await stores.index.list_sessions()]
            assert listed != [new, middle, old]
            repaired = [(f.kind, f.session_id) for f in await repair(stores)]
            assert sorted(repaired) == sorted(("list_order", sid) for sid in (old, middle, new))
            assert await check(stores) == []
            assert [r.session_id for r in await stores.index.list_sessions()] == [
                new, middle, old]

    asyncio.run(run())


def test_check_and_repair_the_digest_chain_of_branches(tmp_path: Path) -> None:
    path = tmp_path / "s.db"

    async def run() -> None:
        async with open_project_stores(tmp_path, f"sqlite:{path}") as stores:
            parent = await add_session(stores, title="p")
            child = await branch(stores, parent, 5)
            grandchild = await branch(stores, child, 3)  # its shared rows are the parent's
            deeper = await branch(stores, child, 6)  # shares the parent's and the child's
            assert await check(stores) == []
            with sqlite3.connect(path) as db:
                db.execute("UPDATE session_entries SET key_chain = NULL WHERE session_id = ?",
                           (parent,))
                db.execute("UPDATE session_entries SET key_chain = 'x:y:' || lower(hex(key_chain)) "
                           "WHERE session_id = ?", (child,))  # an older form: still right
            found = {(f.kind, f.session_id) for f in await check(stores)}
            # Every branch's own rows continue the parent's chain: none of them is wrong.
            assert found == {("digest_chain", parent)}
            with sqlite3.connect(path) as db:
                db.execute("UPDATE session_entries SET key_chain = 'wrong' WHERE "
                           "session_id = ? AND seq = 5", (child,))
            found = {(f.kind, f.session_id) for f in await check(stores)}
            assert found == {("digest_chain", parent), ("digest_chain", child)}
            repaired = await repair(stores)
            assert {f.session_id for f in repaired} == {parent, child}
            assert await check(stores) == [] and await repair(stores) == []
            for sid in (parent, child, grandchild, deeper):
                await continue_session(stores, sid)
            assert await check(stores) == []

    asyncio.run(run())


def test_check_names_stored_values_export_cannot_carry(
        engine: tuple[Callable[[], ProjectStores], Raw]) -> None:
    open_stores, raw = engine

    async def run() -> tuple[str, list[tuple[str, str, str | None]]]:
        async with open_stores() as stores:
            sid = await add_session(stores, title="s")
            raw("UPDATE checkpoints SET updated_at = %s WHERE session_id = %s",
                (float("inf"), sid))
            with pytest.raises(StoreError) as error:
                await export_text(stores)
            assert str(error.value).startswith(
                f"session {sid}: its stored updated_at is inf, not a finite number; nothing "
                "was changed.")
            return sid, [(f.level, f.kind, f.session_id) for f in await check(stores)]

    sid, found = asyncio.run(run())
    assert found == [("error", "unexportable", sid)]


def test_copy_leaves_a_damaged_session_and_says_why(
        engine: tuple[Callable[[], ProjectStores], Raw], tmp_path: Path) -> None:
    open_stores, raw = engine

    async def run() -> None:
        async with open_stores() as stores, open_project_stores(
                tmp_path, f"sqlite:{tmp_path}/copy.db") as target:
            damaged, fine = await add_session(stores, title="d"), await add_session(
                stores, title="f")
            raw("UPDATE checkpoints SET created_at = %s WHERE session_id = %s",
                (float("nan") if "postgres" in stores.url else float("-inf"), damaged))
            report = await copy_database(stores, target)
            assert report.copied == [fine] and not report.ok
            assert list(report.damaged) == [damaged]
            assert "its stored created_at is" in report.damaged[damaged]
            assert await target.checkpoints.load_session(damaged) is None

    asyncio.run(run())


def test_check_and_repair_entry_rows_moved_out_of_their_place(tmp_path: Path) -> None:
    """Another program's update moves a session's rows off its block (``entries``):
    the session no longer loads, ``db check`` says which, ``--repair`` moves them back
    and builds the full-text index again, and the session goes on."""
    from nonoka.ops.model import SearchQuery
    from nonoka.ops.search import search

    path = tmp_path / "s.db"

    async def run() -> None:
        async with open_project_stores(tmp_path, f"sqlite:{path}") as stores:
            moved = await add_session(stores, title="m", words="okapi")
            kept = await add_session(stores, title="k", words="okapi")
            assert await check(stores) == []
            before = {h.session_id for h in await search(stores, SearchQuery(text="okapi"))}
            with sqlite3.connect(path) as db:
                db.execute("UPDATE session_entries SET doc = -1000 - seq "
                           "WHERE session_id = ? AND seq >= 2", (moved,))
            with pytest.raises(StoreError):
                await stores.checkpoints.load_session(moved)
            found = await check(stores)
            assert ("entry_place", moved) in {(f.kind, f.session_id) for f in found}
            assert {f.session_id for f in found} == {moved}  # (it does not load either)
            repaired = await repair(stores)
            assert [(f.kind, f.session_id) for f in repaired] == [("entry_place", moved)]
            assert await check(stores) == []
            await continue_session(stores, moved)
            await continue_session(stores, kept)
            after = {h.session_id for h in await search(stores, SearchQuery(text="okapi"))}
            assert after == before  # (the search indexed the new turns first)
            with sqlite3.connect(path) as db:
                packing.register(db)  # the index reads entry rows through ``entry_text``
                db.execute("INSERT INTO session_search (session_search, rank) "
                           "VALUES ('integrity-check', 1)")

    asyncio.run(run())


def test_a_row_another_program_put_in_a_sessions_way_is_mended(tmp_path: Path) -> None:
    """Another program inserts a row of one session without its place: SQLite gives it
    the next rowid, which is where the newest session's next entry goes. That session's
    next save is refused with a line that names the remedy; ``db check`` finds the
    row, ``--repair`` moves it to its own session's place, and both sessions go on."""
    path = tmp_path / "s.db"

    async def run() -> None:
        async with open_project_stores(tmp_path, f"sqlite:{path}") as stores:
            older = await add_session(stores, title="older")
            newer = await add_session(stores, title="newer")
            with sqlite3.connect(path) as db:
                (count,) = db.execute("SELECT entry_count FROM checkpoints WHERE "
                                      "session_id = ?", (older,)).fetchone()
                db.execute("INSERT INTO session_entries (session_id, seq, entry_json) "
                           "VALUES (?, ?, ?)", (older, count, '{"role": "user", '
                           '"content": "added by hand", "metadata": {}, "tokens": 3}'))
                db.execute("UPDATE checkpoints SET entry_count = entry_count + 1 "
                           "WHERE session_id = ?", (older,))
            db.close()
            with pytest.raises(StoreError, match="db check --repair` moves that row"):
                await continue_session(stores, newer)
            found = {(f.kind, f.session_id) for f in await check(stores)}
            assert ("entry_place", older) in found
            assert [(f.kind, f.session_id) for f in await repair(stores)] == [
                ("entry_place", older), ("digest_chain", older)]  # (written without one)
            assert await check(stores) == []
            state = await stores.checkpoints.load_session(older)
            assert state is not None and state.memory_entries[-1].content == "added by hand"
            await continue_session(stores, newer)
            await continue_session(stores, older)

    asyncio.run(run())
