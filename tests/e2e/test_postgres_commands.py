"""``NONOKA_DATABASE_URL=postgresql://…``: the bridge, ``run`` and ``sessions`` use it.

Nothing else changes for the user: two project directories (two workers) that point at
one PostgreSQL schema see and continue the same sessions, and nothing is written to
``.nonoka/sessions.db``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nonoka.testing import text
from nonoka.testing.server import ScriptedOpenAIServer
from tests.conftest import ScriptItem
from tests.pg import schema_url, temp_schema


@pytest.fixture
def database_url() -> Iterator[str]:
    with temp_schema() as schema:
        yield schema_url(schema)


def nonoka(cwd: Path, env: dict[str, str], *args: str, stdin: bytes | None = None,
           ) -> subprocess.CompletedProcess[bytes]:
    done = subprocess.run([sys.executable, "-m", "nonoka", *args], cwd=cwd, env=env,
                          input=stdin, capture_output=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr.decode()
    return done


def test_bridge_run_and_sessions_share_one_postgres_database(
        tmp_path: Path, database_url: str, scripted: list[ScriptItem],
        server: ScriptedOpenAIServer) -> None:
    env = {**os.environ, "NONOKA_DATABASE_URL": database_url, "NONOKA_MODEL": "openai:pg-test",
           "OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": server.base_url}
    worker_a, worker_b = tmp_path / "a", tmp_path / "b"
    worker_a.mkdir()
    worker_b.mkdir()

    scripted.append(text("stored in postgres"))
    request: dict[str, Any] = {"type": "chat", "protocol": {"version": "1"},
                               "messages": [{"role": "user", "content": "hello"}],
                               "new_session": True, "cwd": str(worker_a)}
    out = nonoka(worker_a, env, "bridge", stdin=json.dumps(request).encode() + b"\n").stdout
    events = [json.loads(line) for line in out.splitlines()]
    sid = next(e["session_id"] for e in events if e["type"] == "session_init")
    assert events[-1]["finish_reason"] == "stop"

    # Another worker, another directory: the same database, so the same session.
    scripted.append(text("continued elsewhere"))
    ran = nonoka(worker_b, env, "run", "--session", sid[:8], "--json", "and again")
    assert json.loads(ran.stdout)["session_id"] == sid
    listed = json.loads(nonoka(worker_b, env, "sessions", "list", "--json").stdout)
    assert [(r["session_id"], r["turn_count"]) for r in listed] == [(sid, 2)]
    shown = json.loads(nonoka(worker_a, env, "sessions", "show", sid, "--json").stdout)
    assert shown["usage"]["model_calls"] == 2
    assert [m["content"] for m in server.requests[-1]["messages"] if m["role"] == "user"] == [
        "hello", "and again"]
    assert not (worker_a / ".nonoka" / "sessions.db").exists()
    assert not (worker_b / ".nonoka" / "sessions.db").exists()
