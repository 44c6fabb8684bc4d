"""``db check`` on damage only raw SQL can make: entry rows without their checkpoint, a
checkpoint missing entry rows, on SQLite and PostgreSQL (the queries are shared)."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nonoka.ops.maintenance import check
from nonoka.store.project import ProjectStores, open_project_stores
from tests import pg
from tests.conformance.ops_suite import add_session, branch

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
    assert found == [("error", "orphan_rows", "zz-gone"), ("error", "entry_count", child)]
