"""The human commands against real SQLite and a real scripted OpenAI-compatible server.

``nonoka`` runs the command as a subprocess (``python -m nonoka ...``) in the project
directory, so nothing about stdout/stderr, exit codes or terminals is simulated;
``invoke`` uses click's runner in-process where only the output matters.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from nonoka.cli.commands import cli
from nonoka.store.project import open_project_stores
from nonoka.store.records import EventRecord, SessionRecord
from nonoka.testing.server import ScriptedOpenAIServer
from tests.support.processes import model_env, run_nonoka


class Project:
    """A project directory, the environment pointing at the scripted server, and helpers."""

    def __init__(self, path: Path, server: ScriptedOpenAIServer) -> None:
        self.path = path
        self.server = server
        self.env = {**os.environ, **model_env(server.base_url, api_key="test")}
        for name in ("NONOKA_DATABASE_URL", "FORCE_COLOR", "NO_COLOR"):
            self.env.pop(name, None)

    def nonoka(self, *args: str, input: str | None = None, timeout: float = 60,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """Run ``python -m nonoka ARGS`` here, output piped."""
        return run_nonoka(self.path, *args, env=env or self.env, input=input, timeout=timeout)

    def invoke(self, *args: str, monkeypatch: pytest.MonkeyPatch) -> Result:
        """Run the click group in this process (cwd and environment set for the call)."""
        monkeypatch.chdir(self.path)
        for name in ("NONOKA_DATABASE_URL", "FORCE_COLOR", "NO_COLOR"):
            monkeypatch.delenv(name, raising=False)
        overrides = {k: self.env[k] for k in ("NONOKA_MODEL", "OPENAI_API_KEY",
                                              "OPENAI_BASE_URL")}
        return CliRunner().invoke(cli, list(args), env=overrides, catch_exceptions=False)

    def records(self, *, purpose: str | None = None) -> list[SessionRecord]:
        async def load() -> list[SessionRecord]:
            async with open_project_stores(self.path) as stores:
                return await stores.index.list_sessions(limit=100, purpose=purpose)

        return asyncio.run(load())

    def events(self, session_id: str) -> list[EventRecord]:
        async def load() -> list[EventRecord]:
            async with open_project_stores(self.path) as stores:
                return await stores.events.list_events(session_id, limit=500)

        return asyncio.run(load())

    def seed(self, *records: SessionRecord) -> None:
        """Write index rows directly (for listing tests that need chosen ids and times)."""
        async def write() -> None:
            async with open_project_stores(self.path) as stores:
                for record in records:
                    await stores.index.upsert_session(record)

        asyncio.run(write())

    def sent(self, request: int) -> list[tuple[str, str]]:
        """``(role, content)`` of the messages the model got in request number ``request``."""
        return [(m["role"], m.get("content") or "")
                for m in self.server.requests[request]["messages"]]


@pytest.fixture
def project(tmp_path: Path, server: ScriptedOpenAIServer) -> Project:
    path = tmp_path / "project"
    path.mkdir()
    (path / "notes.txt").write_text("alpha\nthe launch code is 1234\nomega\n")
    (path / "src").mkdir()
    (path / "src" / "app.py").write_text("def launch():\n    return 'go'\n")
    return Project(path, server)


def kinds(events: Sequence[EventRecord]) -> list[str]:
    return [e.kind for e in events]


def no_ansi(*texts: str) -> bool:
    return not any("\x1b[" in text for text in texts)

