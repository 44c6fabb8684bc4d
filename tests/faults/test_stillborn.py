"""A new session's first snapshot and its index row are one write: a process killed
around it leaves both or neither, never a snapshot no listing or recovery can find."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest

from nonoka.testing import text
from tests.faults.test_retries import killed_at
from tests.pg import connect, schema_url, temp_schema
from tests.support.bridge import Bridge, chat, user

POINTS = ["checkpoint.save.before:1", "checkpoint.save.after:1", "index.update.before:1",
          "index.update.after:1"]


def _sessions(bridge: Bridge) -> tuple[set[str], set[str]]:
    con = sqlite3.connect(bridge.db)
    try:
        snapshots = {r[0] for r in con.execute("SELECT session_id FROM checkpoints")}
        rows = {r[0] for r in con.execute("SELECT session_id FROM cli_sessions")}
    finally:
        con.close()
    return snapshots, rows


@pytest.mark.parametrize("point", POINTS)
def test_a_kill_around_the_first_save_leaves_no_stillborn_session(
        bridge: Bridge, scripted: list[Any], point: str) -> None:
    scripted.append(text("never delivered"))
    killed_at(bridge, point, chat([user("hello")], new_session=True))
    snapshots, rows = _sessions(bridge)
    assert snapshots == rows, f"snapshots without an index row: {snapshots - rows}"


@pytest.fixture
def schema() -> Iterator[str]:
    with temp_schema() as name:
        yield name


def test_postgresql_too(bridge: Bridge, scripted: list[Any], schema: str) -> None:
    bridge.env["NONOKA_DATABASE_URL"] = schema_url(schema)
    scripted.append(text("never delivered"))
    killed_at(bridge, "checkpoint.save.after:1", chat([user("hello")], new_session=True))
    with connect(schema) as conn:
        snapshots = {r[0] for r in conn.execute("SELECT session_id FROM checkpoints")}
        rows = {r[0] for r in conn.execute("SELECT session_id FROM cli_sessions")}
    assert snapshots and snapshots == rows
