"""Files in the human commands: named, counted and checked, never printed."""

from __future__ import annotations

import asyncio
import base64
import json
import random
from typing import Any

from nonoka.state.entries import MemoryEntry
from nonoka.state.session_state import SessionState, SessionStatus
from nonoka.store.media import digest_of
from nonoka.store.project import open_project_stores
from nonoka.store.records import SessionRecord
from tests.cli.conftest import Project, no_ansi

IMAGE = random.Random(3).randbytes(2 * 1024 * 1024)
DATA = base64.b64encode(IMAGE).decode()


def stored(project: Project) -> str:
    """A session whose user sent a 2 MiB screenshot twice and a PDF by its address."""
    def look(text: str, *files: dict[str, Any]) -> MemoryEntry:
        return MemoryEntry.make("user", text, parts=[{"type": "text", "text": text}, *files])

    shot = {"type": "file", "media_type": "image/png", "data": DATA, "filename": "shot.png"}
    entries = [MemoryEntry.make("system", "be brief"), look("what is wrong?", shot),
               MemoryEntry.assistant("the button"), look("and here?", shot, {
                   "type": "file", "media_type": "application/pdf",
                   "url": "https://example.com/spec.pdf"}),
               MemoryEntry.assistant("same")]
    sid = "5eed0000-0000-4000-8000-000000000001"

    async def save() -> None:
        async with open_project_stores(project.path) as stores:
            await stores.checkpoints.save_session(SessionState(
                session_id=sid, status=SessionStatus.COMPLETED, memory_entries=entries))
            await stores.index.upsert_session(SessionRecord(
                session_id=sid, title="screenshots", status="completed", message_count=5))

    asyncio.run(save())
    return sid


def test_show_names_each_file_and_never_prints_its_bytes(project: Project) -> None:
    sid = stored(project)
    shown = project.nonoka("sessions", "show", sid[:8])
    assert shown.returncode == 0, shown.stderr
    assert "[image shot.png, image/png, 2.0 MiB] at entry 1" in shown.stdout
    assert "[image shot.png, image/png, 2.0 MiB] at entry 3" in shown.stdout
    assert "[file https://example.com/spec.pdf, application/pdf] at entry 3" in shown.stdout
    assert DATA[:32] not in shown.stdout and no_ansi(shown.stdout, shown.stderr)
    files = json.loads(project.nonoka("sessions", "show", sid, "--json").stdout)["files"]
    assert files[0] == {"entry": 1, "media_type": "image/png", "filename": "shot.png",
                        "size": len(IMAGE), "digest": digest_of(IMAGE), "url": None,
                        "label": "[image shot.png, image/png, 2.0 MiB]"}
    assert [f["entry"] for f in files] == [1, 3, 3]


def test_stats_check_and_markdown_know_the_files(project: Project) -> None:
    sid = stored(project)
    stats = project.nonoka("db", "stats")
    assert stats.returncode == 0, stats.stderr
    assert "files     1 (2.0 MiB, each stored once)" in stats.stdout
    numbers = json.loads(project.nonoka("db", "stats", "--json").stdout)
    assert (numbers["media"], numbers["media_bytes"]) == (1, len(IMAGE))
    checked = project.nonoka("db", "check")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    markdown = project.nonoka("sessions", "export", sid, "--format", "markdown")
    assert "[image shot.png, image/png, 2.0 MiB]" in markdown.stdout
    assert DATA[:32] not in markdown.stdout
    exported = project.nonoka("sessions", "export", sid)
    lines = [json.loads(line) for line in exported.stdout.splitlines()]
    assert [line["type"] for line in lines[1:3]] == ["media", "session"]
    assert exported.stdout.count(DATA) == 1

