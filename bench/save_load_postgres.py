"""``save_load.py``'s measurements on PostgreSQL, beside raw psycopg on the same rows.

Run: ``.venv/bin/python bench/save_load_postgres.py [--reps N] [--url URL]`` (default: the
tests' server, ``NONOKA_TEST_POSTGRES_URL`` or the local one). Each size gets a fresh
schema, dropped afterwards. The baseline is a plain ``psycopg.AsyncConnection``
(autocommit, explicit transactions) on the same event loop as the store:

- raw append: ``BEGIN``, ``executemany`` of the same two rows (pipelined), ``COMMIT``,
  into a table of the same shape and size as the store's ``session_entries``;
- raw load: one transaction reading the store's snapshot row and entry rows, plus
  ``json.loads`` of each.

The size column is the store's tables (``pg_total_relation_size``, indexes and TOAST
included) after a ``VACUUM``, as autovacuum would leave them.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg
from psycopg import sql
from tests import pg

from bench.save_load import Backend, EntryRow, parse_args, run
from nonoka.store.base import CheckpointStore
from nonoka.store.postgres import PostgresCheckpointStore

TABLES = ("checkpoints", "session_entries", "step_updates")


class PostgresBackend:
    def __init__(self, url: str, schema: str, raw: psycopg.AsyncConnection[tuple[object, ...]]
                 ) -> None:
        self.url = url
        self.schema = schema
        self.raw = raw
        self.store: CheckpointStore = PostgresCheckpointStore(url, schema=schema)

    @classmethod
    async def open(cls, url: str) -> PostgresBackend:
        schema = f"nonoka_bench_{secrets.token_hex(4)}"
        raw = await psycopg.AsyncConnection.connect(
            url, autocommit=True, options=f"-c search_path={schema}")
        self = cls(url, schema, raw)
        await self.store.load_session("warm-up")  # connect and create the schema
        await raw.execute("CREATE TABLE raw_entries (session_id text COLLATE \"C\" NOT NULL, "
                          "seq integer NOT NULL, entry_json text NOT NULL, "
                          "PRIMARY KEY (session_id, seq))")
        return self

    async def raw_append(self, rows: list[EntryRow]) -> None:
        async with self.raw.transaction(), self.raw.cursor() as cur:
            await cur.executemany("INSERT INTO raw_entries VALUES (%s, %s, %s)", rows)

    async def raw_load(self, session_id: str) -> None:
        async with self.raw.transaction():
            cur = await self.raw.execute(
                "SELECT state_json FROM checkpoints WHERE session_id = %s", (session_id,))
            row = await cur.fetchone()
            cur = await self.raw.execute("SELECT entry_json FROM session_entries "
                                         "WHERE session_id = %s ORDER BY seq", (session_id,))
            rows = await cur.fetchall()
        assert row is not None
        json.loads(str(row[0]))
        [json.loads(str(r[0])) for r in rows]

    async def finish(self) -> int:
        try:
            await self.store.close()
            await self.raw.execute(sql.SQL("VACUUM {}").format(
                sql.SQL(", ").join(sql.Identifier(t) for t in TABLES)))
            cur = await self.raw.execute(
                "SELECT sum(pg_total_relation_size(t::regclass))::bigint FROM unnest(%s::text[]) t",
                (list(TABLES),))
            row = await cur.fetchone()
            return int(str(row[0])) if row else 0
        finally:
            await self.raw.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(
                sql.Identifier(self.schema)))
            await self.raw.close()


async def main() -> int:
    args = parse_args(extra=[("--url", pg.PG_URL, "the PostgreSQL server")])

    async def open_backend(_tmp: Path) -> Backend:
        return await PostgresBackend.open(args.url)

    async with await psycopg.AsyncConnection.connect(args.url) as conn:
        server = conn.info.parameter_status("server_version") or "?"
    return await run(open_backend, f"PostgreSQL {server}, psycopg {psycopg.__version__}", args)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
