"""``docs/schema.md`` is the schema a fresh database holds, and the live text of the
entry rows' view and triggers is the text a fresh SQLite file runs."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from nonoka.store.postgres.schema import ENTRY_VECTOR, MEDIA_REFS
from nonoka.store.sqlite import entries, packing
from nonoka.store.sqlite.database import open_database
from tests.store import schema_doc

_REWRITE = "the schema changed: run `python -m tests.store.schema_doc` and read the diff"


def test_the_sqlite_section_is_what_a_new_file_holds() -> None:
    written = schema_doc.section(schema_doc.DOC.read_text(), schema_doc.SQLITE_BEGIN)
    assert written == schema_doc.sqlite_schema(), _REWRITE


def test_the_postgresql_section_is_what_a_new_schema_holds() -> None:
    written = schema_doc.section(schema_doc.DOC.read_text(), schema_doc.POSTGRES_BEGIN)
    assert written == schema_doc.postgres_schema(), _REWRITE


def test_a_new_file_runs_the_entry_rules_as_entries_writes_them(tmp_path: Path) -> None:
    """No trigger SQL is built at run time: what a new file holds is the literal text of
    ``entries.SCHEMA`` and ``entries.SEARCH_TABLE`` (a change to them needs a migration
    that installs the new text)."""
    db = open_database(tmp_path / "new.db")
    try:
        stored = {name: sql for name, sql in db.execute(
            "SELECT name, sql FROM sqlite_master WHERE tbl_name IN ('session_entries', "
            "'search_text', 'session_search', 'search_stale') "
            "AND type IN ('view', 'trigger', 'table')")}
    finally:
        db.close()
    assert {s for n, s in stored.items() if n != "session_entries"} == {
        *entries.SCHEMA, entries.SEARCH_TABLE}


def test_the_live_postgresql_expressions_are_the_indexes_expressions() -> None:
    """A query uses an expression index only when it repeats its expression."""
    section = schema_doc.section(schema_doc.DOC.read_text(), schema_doc.POSTGRES_BEGIN)
    vector = ENTRY_VECTOR.format(e="entry_json").replace("'simple'", "'simple'::regconfig")
    assert f"USING gin ({vector})" in section
    assert f"USING gin ({MEDIA_REFS.format(m='media')})" in section


def test_the_view_gives_each_entry_its_search_text() -> None:
    """The view's text, as the index sees it: content and tool calls, whether the row
    holds its JSON as text or deflated; a row that is not JSON as it is."""
    db = sqlite3.connect(":memory:")
    packing.register(db)
    db.execute("CREATE TABLE session_entries (doc INTEGER PRIMARY KEY, entry_json TEXT)")
    db.execute(entries.SCHEMA[1])
    long = '{"content": "okapi ' + "zebra " * 40 + '", "metadata": {}}'
    deflated = packing.pack(long)
    assert isinstance(deflated, bytes)
    db.executemany("INSERT INTO session_entries VALUES (?, ?)", [
        (1, '{"content": "okapi", "metadata": {"tool_calls": [{"name": "grep"}]}}'),
        (2, "not json {"), (3, deflated)])
    assert db.execute("SELECT body FROM search_text ORDER BY doc").fetchall() == [
        ('okapi [{"name":"grep"}]',), ("not json {",), ("okapi " + "zebra " * 40 + " ",)]
