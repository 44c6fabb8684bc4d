"""A pooled PostgreSQL connection that the server drops (``idle_session_timeout``,
``pg_terminate_backend``, a pooler's idle limit) must not cost a turn its answer.

Real server, real bridge processes: the model answers slowly while the server ends the
bridge's idle connections; the save after the answer must get a working connection.
"""

from __future__ import annotations

import json
import secrets
import socket
import subprocess
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest

from nonoka.errors import StoreError
from nonoka.store.postgres.database import CONNECT_TIMEOUT, PostgresDatabase
from nonoka.store.postgres.schema import MIGRATION_LOCK
from nonoka.testing import text
from nonoka.testing.server import Delay, Step
from tests.conftest import ScriptItem
from tests.pg import PG_URL, connect, temp_schema
from tests.support.bridge import BRIDGE, Bridge, chat, of_type, one, text_of, user


@pytest.fixture
def schema() -> Iterator[str]:
    with temp_schema() as name:
        yield name


def _url(schema: str, app: str, *, idle_ms: int | None = None) -> str:
    options = f"-csearch_path={schema}"
    if idle_ms is not None:
        options += f" -cidle_session_timeout={idle_ms}"
    joiner = "&" if "?" in PG_URL else "?"
    return f"{PG_URL}{joiner}application_name={app}&options={quote(options, safe='')}"


def _stored(schema: str, session_id: str) -> tuple[list[str], dict[str, Any]]:
    with connect(schema) as conn:
        rows = conn.execute("SELECT entry_json FROM session_entries WHERE session_id = %s "
                            "ORDER BY seq", (session_id,)).fetchall()
        state = conn.execute("SELECT state_json FROM checkpoints WHERE session_id = %s",
                             (session_id,)).fetchone()
    assert state is not None
    snapshot = json.loads(str(state[0]))
    return ([json.loads(str(r[0]))["content"] for r in rows],
            snapshot["runtime_state"]["usage"])


def _turn_survives(bridge: Bridge, schema: str, app: str, *, idle_ms: int | None,
                   during: Any = None) -> None:
    bridge.env["NONOKA_DATABASE_URL"] = _url(schema, app, idle_ms=idle_ms)
    events = bridge.run(chat([user("think hard")], new_session=True, request_id="r1"))
    sid = one(events, "session_init")["session_id"]
    assert not of_type(events, "error"), of_type(events, "error")
    assert events[-1]["finish_reason"] == "stop"
    assert text_of(events) == "the long answer"
    contents, usage = _stored(schema, sid)
    assert contents == ["think hard", "the long answer"]
    assert usage["model_turns"] == 1 and usage["output_tokens"] > 0


def test_a_long_turn_outlives_an_idle_session_timeout(
        bridge: Bridge, scripted: list[ScriptItem], schema: str) -> None:
    """The answer takes 3 s; the server ends every connection idle for 1 s."""
    scripted.append(Delay(3.0, text("the long answer")))
    _turn_survives(bridge, schema, f"nonoka_idle_{secrets.token_hex(4)}", idle_ms=1000)


@pytest.mark.slow
def test_a_30s_turn_outlives_a_5s_idle_session_timeout(
        bridge: Bridge, scripted: list[ScriptItem], schema: str) -> None:
    scripted.append(Delay(30.0, text("the long answer")))
    _turn_survives(bridge, schema, f"nonoka_idle_{secrets.token_hex(4)}", idle_ms=5000)


def test_a_backend_terminated_mid_turn(bridge: Bridge, scripted: list[ScriptItem],
                                       schema: str) -> None:
    """While the model answers, an operator (or a failover) ends the bridge's backends."""
    app = f"nonoka_kill_{secrets.token_hex(4)}"
    killed: list[int] = []

    def answer(body: dict[str, Any]) -> Step:
        # Called by the model server when the request arrives: the bridge is mid-turn.
        with connect() as conn:
            rows = conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                "WHERE application_name = %s", (app,)).fetchall()
        killed.extend(1 for r in rows if r[0])
        return Delay(0.5, text("the long answer"))

    scripted.append(answer)
    _turn_survives(bridge, schema, app, idle_ms=None)
    assert killed, "no backend of the bridge was terminated"


# -- the database layer ---------------------------------------------------------------------


async def test_work_on_a_lost_connection_runs_again_on_a_fresh_one(schema: str) -> None:
    database = PostgresDatabase(_url(schema, "nonoka_retry"))
    calls: list[int] = []

    async def work(conn: Any) -> int:
        calls.append(1)
        if len(calls) == 1:  # the backend dies under the first attempt's statement
            await conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")
        row = await (await conn.execute("SELECT 41 + 1")).fetchone()
        return int(row[0])

    try:
        assert await database.run(work, transaction=True) == 42
        assert len(calls) == 2
    finally:
        await database.close()


async def test_a_connection_lost_every_time_is_a_retryable_store_error(schema: str) -> None:
    database = PostgresDatabase(_url(schema, "nonoka_retry"))

    async def work(conn: Any) -> None:
        await conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")

    try:
        with pytest.raises(StoreError) as caught:
            await database.run(work)
        assert caught.value.retryable is True
        assert "send the request again" in caught.value.describe()
    finally:
        await database.close()


async def test_a_statement_error_is_not_retried(schema: str) -> None:
    database = PostgresDatabase(_url(schema, "nonoka_retry"))
    calls: list[int] = []

    async def work(conn: Any) -> None:
        calls.append(1)
        await conn.execute("SELECT * FROM no_such_table")

    try:
        with pytest.raises(StoreError) as caught:
            await database.run(work)
        assert caught.value.retryable is False and len(calls) == 1
    finally:
        await database.close()




# -- lost (or never had) while opening -------------------------------------------------------


def _backend_waiting_on_lock(app: str, deadline: float) -> int:
    """The pid of the bridge's opening backend once it waits for the migration lock."""
    while time.monotonic() < deadline:
        with connect() as conn:
            row = conn.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s "
                               "AND wait_event_type = 'Lock'", (app,)).fetchone()
        if row is not None:
            return int(str(row[0]))
        time.sleep(0.05)
    pytest.fail("the bridge never waited for the migration lock")


def test_a_backend_terminated_while_the_store_opens_is_retryable(
        bridge: Bridge, scripted: list[ScriptItem], schema: str) -> None:
    """The bridge's first connection migrates a fresh schema; it waits for the migration
    lock (held here), and an operator ends it there: the error says to send again, and
    sending again works."""
    app = f"nonoka_open_{secrets.token_hex(4)}"
    bridge.env["NONOKA_DATABASE_URL"] = _url(schema, app)
    scripted.append(text("the answer"))
    request = json.dumps({"cwd": str(bridge.project),
                          **chat([user("hello")], new_session=True, request_id="r1")})
    with connect() as holder, holder.transaction():
        holder.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))",
                       (MIGRATION_LOCK, schema))
        requests = bridge.project / "requests.jsonl"
        requests.write_text(request + "\n")
        with requests.open("rb") as stdin:
            proc = subprocess.Popen(BRIDGE, stdin=stdin, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, cwd=bridge.project,
                                    env=bridge.env)
        try:
            pid = _backend_waiting_on_lock(app, time.monotonic() + 30)
            with connect() as killer:
                killer.execute("SELECT pg_terminate_backend(%s)", (pid,))
            out, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    stderr = err.decode()
    assert proc.returncode == 0 and "Traceback" not in stderr, stderr
    events = [json.loads(x) for x in out.splitlines() if x.strip()]
    error = one(events, "error")
    assert error["retryable"] is True, error
    assert "send the request again" in error["message"], error
    assert events[-1]["type"] == "finish" and events[-1]["finish_reason"] == "error"
    again = bridge.run(chat([user("hello")], new_session=True, request_id="r1"))
    assert not of_type(again, "error"), again
    assert text_of(again) == "the answer"


def test_an_unreachable_server_fails_the_turn_promptly(
        bridge: Bridge, scripted: list[ScriptItem]) -> None:
    """Nothing listens on the port: an error event, a finish, well within the timeout."""
    with socket.socket() as probe:  # a local port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    bridge.env["NONOKA_DATABASE_URL"] = f"postgresql://postgres@127.0.0.1:{port}/test"
    scripted.append(text("never asked"))
    started = time.monotonic()
    events = bridge.run(chat([user("hello")], new_session=True))
    assert time.monotonic() - started < CONNECT_TIMEOUT
    error = one(events, "error")
    assert error["retryable"] is False, error
    assert str(port) in error["message"], error
    assert events[-1]["type"] == "finish" and events[-1]["finish_reason"] == "error"


def test_a_silent_server_fails_the_turn_within_the_connect_timeout(
        bridge: Bridge, scripted: list[ScriptItem]) -> None:
    """A port that accepts the TCP connection and never answers (a hung server, a
    blackholing firewall): libpq's connect_timeout, set by default, ends the wait."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        bridge.env["NONOKA_DATABASE_URL"] = (
            f"postgresql://postgres@127.0.0.1:{port}/test?connect_timeout=2")
        scripted.append(text("never asked"))
        started = time.monotonic()
        events = bridge.run(chat([user("hello")], new_session=True))
        assert time.monotonic() - started < 15
    error = one(events, "error")
    assert "timeout" in error["message"].lower(), error
    assert events[-1]["type"] == "finish" and events[-1]["finish_reason"] == "error"


def test_the_connect_timeout_is_bounded_by_default() -> None:
    database = PostgresDatabase("postgresql://postgres@127.0.0.1:5432/test")
    assert database._kwargs["connect_timeout"] == CONNECT_TIMEOUT
    own = PostgresDatabase("postgresql://postgres@127.0.0.1:5432/test?connect_timeout=3")
    assert "connect_timeout" not in own._kwargs  # the URL's own applies
