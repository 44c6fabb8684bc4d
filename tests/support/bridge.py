"""Real ``nonoka bridge`` processes, and the protocol's requests and events as plain dicts."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nonoka.testing import text
from nonoka.testing.server import ScriptedOpenAIServer
from tests.support.processes import model_env
from tests.support.stores import load_stored

BRIDGE = [sys.executable, "-m", "nonoka", "bridge"]


def chat(messages: Sequence[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    """A chat request in the protocol's shape."""
    from nonoka.protocol.frames import conversation_key

    request: dict[str, Any] = {"type": "chat", "protocol": {"version": "1"},
                               "messages": list(messages)}
    key = conversation_key(messages)
    if key is not None:
        request["conversation_key"] = key
    request.update(fields)
    return request


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str, tool_calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return message


def tool_message(call_id: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "content": content, "tool_call_id": call_id}


class Bridge:
    """Spawns bridge processes in one project directory."""

    def __init__(self, project: Path, server: ScriptedOpenAIServer | None) -> None:
        self.project = project
        self.env = {**os.environ,
                    **model_env(server.base_url if server else "http://127.0.0.1:9/v1")}
        self.env.pop("NONOKA_DATABASE_URL", None)

    @property
    def db(self) -> Path:
        return self.project / ".nonoka" / "sessions.db"

    def run_lines(self, data: bytes, *, timeout: float = 60) -> tuple[list[dict[str, Any]], str]:
        done = subprocess.run(BRIDGE, input=data, capture_output=True, cwd=self.project,
                              env=self.env, timeout=timeout, check=False)
        assert done.returncode == 0, done.stderr.decode()
        events = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
        return events, done.stderr.decode()

    def run(self, *requests: dict[str, Any]) -> list[dict[str, Any]]:
        data = b"".join(json.dumps({"cwd": str(self.project), **r}).encode() + b"\n"
                        for r in requests)
        return self.run_lines(data)[0]

    def spawn(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(BRIDGE, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, cwd=self.project, env=self.env)

    def db_digest(self) -> str:
        """A digest of every database file, to prove a request changed nothing."""
        digest = hashlib.sha256()
        for path in sorted(self.db.parent.glob("sessions.db*")):
            digest.update(path.name.encode() + path.read_bytes())
        return digest.hexdigest()


def of_type(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == kind]


def one(events: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = of_type(events, kind)
    assert len(found) == 1, f"expected one {kind} event in {events}"
    return found[0]


def text_of(events: list[dict[str, Any]]) -> str:
    return "".join(e["text"] for e in of_type(events, "text_delta"))


def read_events_until(proc: subprocess.Popen[bytes], kind: str) -> list[dict[str, Any]]:
    """Events from a spawned bridge's stdout, up to and including the first ``kind``."""
    assert proc.stdout is not None
    events: list[dict[str, Any]] = []
    while True:
        line = proc.stdout.readline()
        assert line, "the bridge closed stdout early"
        events.append(json.loads(line))
        if events[-1]["type"] == kind:
            return events


def load_state(bridge: Bridge, session_id: str) -> Any:
    """The stored ``SessionState`` (or ``None``), loaded as a fresh process would."""
    return load_stored(bridge.db, session_id)


def first_turn(bridge: Bridge, scripted: list[Any], prompt: str = "keep me",
               answer: str = "stored answer") -> tuple[str, list[dict[str, Any]]]:
    """A new session with one exchange; its id and the events of the turn."""
    scripted.append(text(answer))
    events = bridge.run(chat([user(prompt)], new_session=True))
    return one(events, "session_init")["session_id"], events
