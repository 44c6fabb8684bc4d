"""Security checks: ids and keys are validated where they enter, secrets never reach the
event log, and the state directory is the owner's alone — all through real processes."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from nonoka import Agent, Plan, Runner, Step
from nonoka.errors import ConfigurationError
from nonoka.protocol.frames import conversation_key
from nonoka.provider import NonokaProvider
from nonoka.state.messages import ToolResult
from nonoka.store.sqlite import SQLiteCheckpointStore
from nonoka.store.sqlite.packing import register, unpack
from nonoka.testing import ScriptedModel, call, text
from nonoka.testing.server import Delay, HttpError, ScriptedOpenAIServer
from tests.support.bridge import Bridge, assistant, chat, of_type, one, user
from tests.support.files import mode
from tests.support.processes import model_env, run_nonoka

HOSTILE_IDS = [
    "../../etc/passwd", "..", "/abs/path", "x' OR '1'='1", "a; DROP TABLE checkpoints; --",
    "*", "%", "_", "[a-z]*", "a" * 129, "-leading-dash", "has space", "new\nline", "nul\x00",
    "ünïcode", "C:\\windows", "abc\n", "trailing-newline\n",
]


def table_dump(db: Path) -> list[Any]:
    """Every row of every table except the event log, to prove a request changed nothing."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    register(con)  # the search index's content is read through ``entry_text``
    try:
        tables = [r[0] for r in con.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        return [(t, sorted(map(repr, con.execute(f"SELECT * FROM {t}"))))
                for t in tables if t != "events"]
    finally:
        con.close()


def test_the_bridge_refuses_hostile_session_ids(bridge: Bridge, seeded: str) -> None:
    before = table_dump(bridge.db)
    requests = [chat([user("keep me"), assistant("stored answer"), user("x")],
                     session_id=bad, request_id=f"r{i}", purpose=purpose)
                for i, bad in enumerate(HOSTILE_IDS) for purpose in ("chat", "title")]
    events = bridge.run(*requests)
    errors = of_type(events, "error")
    assert len(errors) == len(requests), events
    assert {e["code"] for e in errors} == {"invalid_request"}
    assert all("session_id" in e["message"] for e in errors)
    assert not of_type(events, "session_init"), "a hostile id reached a session"
    assert table_dump(bridge.db) == before


HOSTILE_KEYS = ["' OR 1=1 --", "%", "*", "../../x", "A" * 64, "g" * 64, "0" * 63, "0" * 65]


def test_a_malformed_conversation_key_is_ignored(bridge: Bridge, seeded: str,
                                                 scripted: list[Any]) -> None:
    history = [user("keep me"), assistant("stored answer"), user("and now?")]
    scripted += [text("fresh")] * len(HOSTILE_KEYS)
    events = bridge.run(*({**chat(history), "conversation_key": key, "request_id": f"k{i}"}
                          for i, key in enumerate(HOSTILE_KEYS)))
    for i in range(len(HOSTILE_KEYS)):
        mine = [e for e in events if e.get("request_id") == f"k{i}"]
        codes = [w["code"] for w in of_type(mine, "warning")]
        assert codes[0] == "conversation_key_ignored", (HOSTILE_KEYS[i], codes)
        started = one(mine, "session_init")
        assert started["session_id"] != seeded and not started["recovered"]
    con = sqlite3.connect(bridge.db)
    try:
        keys = [json.loads(m).get("conversation_key")
                for (m,) in con.execute("SELECT metadata FROM cli_sessions")]
    finally:
        con.close()
    assert keys.count(None) == len(HOSTILE_KEYS), "a malformed key was stored"
    assert not set(keys) & set(HOSTILE_KEYS)


def test_a_well_formed_key_still_recovers(bridge: Bridge, seeded: str,
                                          scripted: list[Any]) -> None:
    history = [user("keep me"), assistant("stored answer"), user("and now?")]
    scripted.append(text("recovered"))
    events = bridge.run(chat(history))
    assert one(events, "session_init")["session_id"] == seeded
    assert not of_type(events, "warning")


HOSTILE_REFS = ["*", "?", "[0-9a-f]*", "' OR 1=1 --", "%", "../", "_"]


def test_cli_session_references_match_ids_literally(bridge: Bridge, seeded: str) -> None:
    before = table_dump(bridge.db)
    for ref in HOSTILE_REFS:
        shown = run_nonoka(bridge.project, "sessions", "show", ref, "--json", env=bridge.env)
        assert shown.returncode != 0 and seeded not in shown.stdout, (ref, shown.stdout)
        assert "no session id starts with" in shown.stderr, (ref, shown.stderr)
        assert "Traceback" not in shown.stderr
    for ref in HOSTILE_REFS[:1]:  # the same look-up as show; each run costs a process start
        ran = run_nonoka(bridge.project, "run", "--session", ref, "hello", env=bridge.env)
        assert ran.returncode != 0 and "no session id starts with" in ran.stderr, ran.stderr
        assert "Traceback" not in ran.stderr
    assert table_dump(bridge.db) == before


async def test_runner_entry_points_validate_session_ids(tmp_path: Path) -> None:
    store = SQLiteCheckpointStore(tmp_path / "s.db")
    runner = Runner(store)
    agent = Agent(model=ScriptedModel([]))
    plan = Plan(steps=[Step(id="a", prompt="p")])
    try:
        for bad in HOSTILE_IDS:
            calls = [runner.run_react(agent, "hi", session_id=bad),
                     runner.run_plan(agent, plan, session_id=bad),
                     runner.resume(agent, bad),
                     runner.submit_tool_results(agent, bad, [ToolResult(tool_call_id="c",
                                                                        content="x")]),
                     runner.approve_tool_call(bad, "c"), runner.cancel_session(bad),
                     runner.load_session(bad)]
            for pending in calls:
                with pytest.raises(ConfigurationError, match="invalid session id"):
                    await pending
        assert store.connection.execute("SELECT count(*) FROM checkpoints").fetchone() == (0,)
    finally:
        await store.close()


JUNK_ID_FILES: list[bytes] = [
    b"../../etc/passwd\n", b"x' OR '1'='1\n", b"a" * 10_000, b"\xff\xfe\x00binary",
    b"id with spaces\n", b"ok-looking\nsecond-line\n",
]


async def test_the_id_file_is_validated_before_use(
        bridge: Bridge, seeded: str, scripted: list[Any]) -> None:
    id_file = bridge.project / ".nonoka" / "provider-session.id"
    history: list[dict[str, Any]] = [user("keep me"), assistant("stored answer")]
    for i, junk in enumerate(JUNK_ID_FILES):
        id_file.write_bytes(junk)
        provider = NonokaProvider(bridge.project, env=bridge.env, timeout=60)
        assert provider.session_id is None, f"junk {i} from the id file was taken for an id"
        history.append(user(f"more {i}"))
        scripted.append(text(f"recovered {i}"))
        result = await provider.chat(history)
        history.append(assistant(result.text))
        assert result.request.session_id is None
        assert result.session_id == seeded and result.recovery_reason == "session_id_missing"
        assert id_file.read_text().strip() == seeded


async def test_a_symlinked_id_file_is_neither_trusted_nor_written_through(
        bridge: Bridge, seeded: str, scripted: list[Any], tmp_path: Path) -> None:
    target = tmp_path / "precious.txt"
    target.write_text("precious contents\n")
    id_file = bridge.project / ".nonoka" / "provider-session.id"
    id_file.symlink_to(target)
    provider = NonokaProvider(bridge.project, env=bridge.env, timeout=60)
    assert provider.session_id is None
    scripted.append(text("ok"))
    await provider.chat([user("keep me"), assistant("stored answer"), user("more")])
    assert target.read_text() == "precious contents\n", "the id was written through a link"
    assert not id_file.is_symlink() and id_file.read_text().strip() == seeded


SECRET_KEY = "nk-live-0123456789abcdefSECRETVALUE"
"""An API key in no well-known shape: only masking the known value can catch it."""
BEARER = "ghp_0123456789abcdefTOKEN"
SK_TOKEN = "sk-proj-abcdefghijklmnop0123"
OTHER_KEY = "other-provider-key-42"
"""A key that is not in this process's environment, printed by a tool."""


async def test_the_event_log_never_holds_a_key_or_token(project: Path,
                                                        scripted: list[Any],
                                                        server: ScriptedOpenAIServer) -> None:
    env = {**model_env(server.base_url, api_key=SECRET_KEY), "NONOKA_DATABASE_URL": ""}
    provider = NonokaProvider(project, env=env, timeout=60)
    tools = [{"name": "read", "parameters": {"type": "object"}}]
    history: list[dict[str, Any]] = [user("show me the environment")]
    scripted.append(HttpError(401, {"error": {"message": (
        f"Incorrect API key provided: {SECRET_KEY}. Authorization: Bearer {SECRET_KEY}")}}))
    failed = await provider.chat(history, tools)
    assert failed.finish_reason == "error"
    assert SECRET_KEY not in failed.errors[0].message
    scripted.append(call("read", {"path": f"token={SK_TOKEN}"}, id="c1"))
    paused = await provider.chat(history, tools)
    assert paused.finish_reason == "tool_calls"
    history.append(paused.assistant_message().model_dump(exclude_none=True))
    history.append({"role": "tool", "tool_call_id": "c1", "content": (
        f"OPENAI_API_KEY={SECRET_KEY}\nAuthorization: Bearer {BEARER}\napi_key: {SK_TOKEN}\n"
        f"ANTHROPIC_API_KEY={OTHER_KEY}")})
    scripted.append(text("done"))
    assert (await provider.chat(history, tools)).finish_reason == "stop"
    assert server.headers[0]["authorization"] == f"Bearer {SECRET_KEY}"  # the key was used

    con = sqlite3.connect(project / ".nonoka" / "sessions.db")
    try:
        logged = "\n".join(unpack(r[0]) for r in con.execute("SELECT data_json FROM events"))
        kinds = {r[0] for r in con.execute("SELECT kind FROM events")}
    finally:
        con.close()
    assert {"error", "tool_call", "tool_result"} <= kinds, kinds
    for secret in (SECRET_KEY, BEARER, SK_TOKEN, OTHER_KEY):
        assert secret not in logged, f"{secret} reached the event log"
    shown = run_nonoka(project, "sessions", "show", str(paused.session_id), "--json",
                       env={**os.environ, **env})
    assert shown.returncode == 0, shown.stderr
    for secret in (SECRET_KEY, BEARER, SK_TOKEN, OTHER_KEY):
        assert secret not in shown.stdout


async def test_state_files_are_owner_only_even_with_a_lax_umask(
        project: Path, scripted: list[Any], server: ScriptedOpenAIServer) -> None:
    env = {**model_env(server.base_url), "NONOKA_DATABASE_URL": ""}
    scripted.append(Delay(0.8, text("hi")))
    old = os.umask(0)  # the bridge inherits it; the provider writes the id file under it
    try:
        provider = NonokaProvider(project, env=env, timeout=60)
        turn = asyncio.create_task(provider.chat([user("hello")]))
        deadline = time.monotonic() + 20
        while not server.requests:  # mid-turn: the database and its WAL files are open
            assert time.monotonic() < deadline, "the model was never called"
            await asyncio.sleep(0.02)
        state = project / ".nonoka"
        open_files = sorted(p.name for p in state.iterdir())
        assert {"sessions.db", "sessions.db-wal", "sessions.db-shm"} <= set(open_files)
        assert mode(state) == 0o700
        for name in open_files:
            assert mode(state / name) == 0o600, f"{name} is {oct(mode(state / name))}"
        assert (await turn).finish_reason == "stop"
        for path in state.iterdir():
            assert mode(path) == 0o600, f"{path.name} is {oct(mode(path))}"
        assert (state / "provider-session.id").exists()
    finally:
        os.umask(old)
    assert conversation_key([user("hello")]) is not None
