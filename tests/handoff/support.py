"""What the hand-off tests share: the command run as a person runs it, and what the
project's database holds after."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from starlette.types import Message, Receive, Scope, Send

import tests.serve.harness as harness
from tests.serve.claude_code import MAIN_MODEL, ClaudeCode, strict_endpoint
from tests.support.stores import load_stored


def said(message: dict[str, Any]) -> str:
    content = message["content"]
    if isinstance(content, str):
        return content
    return "\n".join(str(b.get("text") or b.get("content") or "") for b in content)


def in_order(texts: list[str], before: list[dict[str, Any]]) -> None:
    """Every user and assistant text of the stored conversation ``before`` is in one of
    ``texts``, in order: the whole conversation, no summary in its place."""
    at = 0
    for entry in before:
        if entry["role"] not in ("user", "assistant") or not entry["content"]:
            continue
        found = next((n for n in range(at, len(texts)) if entry["content"] in texts[n]), None)
        assert found is not None, (entry["content"], texts)
        at = found


def claude_read_notes(project: Path, claude: ClaudeCode, note: str) -> str:
    """Claude Code reads ``notes.txt`` (holding ``note``) with its Read tool through a
    ``nonoka serve`` of ``project`` in front of the strict Anthropic endpoint; the nonoka
    session its line is stored in."""
    from tests.serve.test_claude_code import ReadingModel

    (claude.work / "notes.txt").write_text(note + "\n")
    model = ReadingModel("Read", {"file_path": str(claude.work / "notes.txt")})
    with strict_endpoint(model) as upstream:
        served = harness.ServeProcess(project, f"anthropic:{MAIN_MODEL}", {
            "ANTHROPIC_BASE_URL": upstream.base_url, "ANTHROPIC_API_KEY": "sk-ant-up",
            "NONOKA_DATABASE_URL": "", "NONOKA_MODEL": ""})
        try:
            first = claude.run(served.url.removesuffix("/v1"), "What does notes.txt say?",
                               "--allowedTools", "Read")
        finally:
            errors = served.stop()
    assert "Traceback" not in errors, errors
    assert note in first["result"]
    [line] = [r for r in sessions(project)
              if r["metadata"].get("host_session_id") == f"claude-code:{first['session_id']}"]
    return str(line["session_id"])


def stored(project: Path, session_id: str) -> list[dict[str, Any]]:
    """A session's entries (a branch's shared ones included), as a fresh process reads
    them."""
    state = load_stored(project / ".nonoka" / "sessions.db", session_id)
    assert state is not None, session_id
    return [e.model_dump(mode="json") for e in state.memory_entries]


def handoff(project: Path, session_id: str, target: str, home: Path, cwd: Path
            ) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "nonoka", "sessions", "handoff", session_id,
                           "--to", target, "--home", str(home), "--cwd", str(cwd), "--json"],
                          cwd=project, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    made: dict[str, Any] = json.loads(done.stdout)
    return made


def sessions(project: Path) -> list[dict[str, Any]]:
    done = subprocess.run([sys.executable, "-m", "nonoka", "sessions", "list", "--all",
                           "--json"], cwd=project, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    rows: list[dict[str, Any]] = json.loads(done.stdout)
    return rows


class Recording(harness.Checked):
    """``Checked``, and every Responses request body as the client sent it."""

    bodies: list[dict[str, Any]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") != "/v1/responses":
            await super().__call__(scope, receive, send)
            return
        chunks: list[bytes] = []

        async def kept() -> Message:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                Recording.bodies.append(json.loads(b"".join(chunks)))
            return message

        await super().__call__(scope, kept, send)


@pytest.fixture
def recording(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    bodies: list[dict[str, Any]] = []
    monkeypatch.setattr(Recording, "bodies", bodies)
    monkeypatch.setattr(harness, "Checked", Recording)
    return bodies
