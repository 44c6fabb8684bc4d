"""The session operations as people run them: real ``nonoka`` processes on real turns.

Search, export, import, delete and prune on sessions ``nonoka run`` stored; hostile
inputs (a 2 GB file to import, an export to a full disk); ``db copy`` from SQLite to
PostgreSQL and back, compared byte for byte; the ``retention`` setting.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from nonoka.store.records import SessionRecord
from nonoka.testing import call, text
from tests import pg
from tests.cli.conftest import Project
from tests.conftest import ScriptItem
from tests.support.processes import NONOKA

DAY = 86400.0


def two_turns(project: Project, scripted: list[ScriptItem]) -> list[str]:
    """Two sessions from real ``nonoka run`` turns; the first calls a tool."""
    scripted += [call("read_file", {"path": "src/app.py"}),
                 text("The axolotl launches from src/app.py."),
                 text("A lizard is not an axolotl; capybaras are rodents.")]
    ids = []
    for prompt in ("what does the axolotl app do?", "tell me about capybaras"):
        done = project.nonoka("run", prompt)
        assert done.returncode == 0, done.stderr
        ids.append(done.stderr.split("[session ", 1)[1].split("]", 1)[0])
    return ids


def as_json(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_search_export_import_and_delete(project: Project, scripted: list[ScriptItem],
                                         tmp_path: Path) -> None:
    first, second = two_turns(project, scripted)
    hits = as_json(project.nonoka("sessions", "search", "axolotl", "--json"))
    assert isinstance(hits, list)
    assert (hits[0]["session_id"], hits[0]["role"]) == (first, "title")  # titles first
    answers = [h["session_id"] for h in hits if h["role"] == "assistant"]
    assert answers[0] == second  # then entries, newest first
    assert {h["session_id"] for h in hits} == {first, second}
    assert any("[axolotl]" in h["snippet"] for h in hits)
    tool = as_json(project.nonoka("sessions", "search", "src/app.py", "--json"))
    assert first in {h["session_id"] for h in tool}
    plain = project.nonoka("sessions", "search", "capybaras", "--status", "completed")
    assert plain.returncode == 0 and second[:8] in plain.stdout and "[capybaras]" in plain.stdout
    bad = project.nonoka("sessions", "search", "x", "--status", "finished")
    assert bad.returncode == 2 and "unknown status finished" in bad.stderr

    out = tmp_path / "all.jsonl"
    done = project.nonoka("sessions", "export", first[:8], second, "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text().splitlines()[0])["format"] == "nonoka-sessions"
    markdown = project.nonoka("sessions", "export", first, "--format", "markdown")
    assert markdown.returncode == 0
    assert "## User\n\nwhat does the axolotl app do?" in markdown.stdout
    assert "<details><summary>tool call: read_file</summary>" in markdown.stdout
    assert "## Usage" in markdown.stdout

    other = Project(tmp_path / "other", project.server)
    other.path.mkdir()
    report = as_json(other.nonoka("sessions", "import", str(out), "--json"))
    assert report == {"imported": [first, second], "skipped": [], "renamed": {}}
    shown = as_json(other.nonoka("sessions", "show", first, "--json"))
    assert shown["session"]["session_id"] == first
    again = other.nonoka("sessions", "import", str(out), "--on-conflict", "fail")
    assert again.returncode == 1 and "already stored" in again.stderr

    removed = as_json(project.nonoka("sessions", "delete", first[:8], "--json"))
    assert removed["removed"] == [first] and removed["bytes_freed"] > 0
    after = as_json(project.nonoka("sessions", "search", "axolotl", "--json"))
    assert {h["session_id"] for h in after} == {second}
    assert as_json(project.nonoka("db", "check", "--json")) == []
    stats = as_json(project.nonoka("db", "stats", "--json"))
    assert stats["sessions"] == 1 and stats["largest"][0]["session_id"] == second
    assert project.nonoka("db", "vacuum").returncode == 0


def test_a_branch_shares_its_search_hits_and_outlives_its_parent(
        project: Project, scripted: list[ScriptItem]) -> None:
    first, _ = two_turns(project, scripted)
    done = project.nonoka("sessions", "fork", first[:8])
    assert done.returncode == 0, done.stderr
    child = done.stdout.strip()
    answers = [h for h in as_json(project.nonoka("sessions", "search", "launches", "--json"))]
    assert [(h["session_id"], h["shared_with"]) for h in answers] == [(first, [child])]
    plain = project.nonoka("sessions", "search", "launches").stdout
    assert f"also in 1 branch sharing this entry: {child[:8]}" in plain
    mine = as_json(project.nonoka("sessions", "search", "launches", "--session", child[:8],
                                  "--json"))
    assert [(h["session_id"], h["position"], h["shared_with"]) for h in mine] == [
        (child, answers[0]["position"], [])]
    before = project.nonoka("sessions", "export", child).stdout.splitlines()[1:]
    assert sum(json.loads(line)["type"] == "entry" for line in before) == \
        answers[0]["position"] + 1

    removed = as_json(project.nonoka("sessions", "delete", first, "--json"))
    assert removed["removed"] == [first]
    assert project.nonoka("sessions", "export", child).stdout.splitlines()[1:] == before
    after = as_json(project.nonoka("sessions", "search", "launches", "--json"))
    assert [(h["session_id"], h["shared_with"]) for h in after] == [(child, [])]
    assert as_json(project.nonoka("db", "check", "--json")) == []


def test_export_to_a_full_disk_fails_cleanly(project: Project, scripted: list[ScriptItem]
                                             ) -> None:
    two_turns(project, scripted)
    done = project.nonoka("sessions", "export", "--all", "-o", "/dev/full")
    assert done.returncode == 1
    assert "No space left on device" in done.stderr and "Traceback" not in done.stderr
    with open("/dev/full", "w") as full:
        piped = subprocess.run([*NONOKA, "sessions", "export", "--all"], cwd=project.path,
                               env=project.env, stdout=full, stderr=subprocess.PIPE,
                               text=True, timeout=60, check=False)
    assert piped.returncode == 1 and "No space left on device" in piped.stderr
    assert "Traceback" not in piped.stderr
    assert not list(project.path.glob("*.partial"))


@pytest.mark.parametrize("header", [b"", b'{"format":"nonoka-sessions","version":1}\n'])
def test_a_2gb_file_is_refused_quickly_and_imports_nothing(project: Project, tmp_path: Path,
                                                           header: bytes) -> None:
    big = tmp_path / "big.jsonl"
    with big.open("wb") as handle:
        handle.write(header)
        handle.truncate(2 * 1024**3)  # sparse: 2 GB of zero bytes, no newline
    started = time.monotonic()
    done = project.nonoka("sessions", "import", str(big))
    assert time.monotonic() - started < 30
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "nothing was imported" in done.stderr
    assert "header" in done.stderr or "longer than" in done.stderr
    assert project.records() == []


def test_prune_and_the_retention_setting(project: Project) -> None:
    now = time.time()
    rows = {name: SessionRecord(session_id=f"{name}-0000", title=name, status=status,
                                last_active=now - age * DAY, created_at=now - age * DAY)
            for name, status, age in [("old", "completed", 40), ("older", "failed", 50),
                                      ("paused", "paused", 60), ("new", "completed", 1)]}
    project.seed(*rows.values())
    dry = as_json(project.nonoka("sessions", "prune", "--older-than", "30d", "--dry-run",
                                 "--json"))
    assert sorted(dry["removed"]) == ["old-0000", "older-0000"] and dry["dry_run"]
    kept = as_json(project.nonoka("sessions", "prune", "--older-than", "30d", "--status",
                                  "failed", "--json"))
    assert kept["removed"] == ["older-0000"]
    bad = project.nonoka("sessions", "prune", "--older-than", "soon")
    assert bad.returncode == 2 and "not an age" in bad.stderr

    config = project.path / ".nonoka" / "config.toml"
    config.write_text('[retention]\nolder_than = "30d"\nkeep_last = 1\n')
    listed = project.nonoka("sessions", "list", "--all")
    assert listed.returncode == 0 and "retention removed 1 old session" in listed.stderr
    assert {r.session_id for r in project.records(purpose=None)} == {"paused-0000", "new-0000"}
    assert (project.path / ".nonoka" / "retention.stamp").is_file()
    project.seed(rows["old"])  # applied at most once a day: not removed again today
    assert "retention" not in project.nonoka("sessions", "list").stderr
    assert "old-0000" in {r.session_id for r in project.records(purpose=None)}


def _rows(path: Path) -> dict[str, list[tuple[object, ...]]]:
    """Every stored row of the session tables, as stored (text stays text, compared byte
    for byte), but the index metadata (compared as JSON)."""
    queries = {
        "checkpoints": "SELECT session_id, state_json, revision, entry_count, "
                       "memory_generation, created_at, updated_at FROM checkpoints",
        "session_entries": "SELECT session_id, seq, entry_json FROM session_entries",
        "step_updates": "SELECT session_id, step_id, update_type, payload_json, updated_at "
                        "FROM step_updates",
        "events": "SELECT session_id, seq, at, kind, data_json FROM events",
        "cli_sessions": "SELECT session_id, title, model, created_at, last_active, status, "
                        "turn_count, message_count, input_tokens, output_tokens, cost_usd, "
                        "metadata FROM cli_sessions",
        "serve_files": "SELECT file_id, owner, filename, purpose, media_type, digest, bytes, "
                       "created_at FROM serve_files WHERE deleted_at IS NULL",
        "file_bytes": "SELECT m.digest, m.media_type, m.size, m.data FROM media m JOIN "
                      "serve_files f ON f.digest = m.digest WHERE f.deleted_at IS NULL",
    }
    with sqlite3.connect(path) as db:
        rows = {name: sorted(db.execute(sql).fetchall()) for name, sql in queries.items()}
    # PostgreSQL keeps index metadata as jsonb, which orders an object's keys its own way:
    # that column is compared as JSON, every other one as stored.
    rows["cli_sessions"] = [(*r[:-1], json.loads(str(r[-1]))) for r in rows["cli_sessions"]]
    return rows


def upload_files(project: Project) -> list[str]:
    """Three files of ``nonoka serve``'s Files API in the project's database (two owners,
    two files with the same bytes) and a deleted fourth; the live files' ids."""
    from nonoka.store.files import new_record, open_files
    from nonoka.store.project import open_project_stores

    notes = b"capybara notes\n"
    uploads = [("local", "notes.txt", "text/plain", notes),
               ("alice", "report.pdf", "application/pdf", b"%PDF-1.1 " * 500),
               ("alice", "same.txt", "text/plain", notes),
               ("bob", "gone.txt", "text/plain", b"deleted before the copy")]

    async def upload() -> None:
        async with open_project_stores(project.path) as stores:
            files = open_files(stores.checkpoints)
            for n, (owner, name, kind, data) in enumerate(uploads):
                await files.add(new_record(f"file-{n:04}", owner, name, "user_data", kind,
                                           data), data)
            assert await files.delete("bob", "file-0003")
    asyncio.run(upload())
    return ["file-0000", "file-0001", "file-0002"]


def test_sqlite_to_postgres_and_back_is_byte_for_byte(project: Project,
                                                      scripted: list[ScriptItem],
                                                      tmp_path: Path) -> None:
    two_turns(project, scripted)
    files = upload_files(project)
    schema = pg.create_schema()
    try:
        url = pg.schema_url(schema)
        there = as_json(project.nonoka("db", "copy", "--to", url, "--json"))
        assert there["ok"] and len(there["copied"]) == 2
        assert there["files"]["copied"] == files  # the deleted one is not copied
        again = as_json(project.nonoka("db", "copy", "--to", url, "--json"))
        assert again["copied"] == [] and len(again["already"]) == 2
        assert again["files"]["copied"] == [] and again["files"]["already"] == files
        back = tmp_path / "back.db"
        home = as_json(project.nonoka("db", "copy", "--from", url, "--to",
                                      f"sqlite://{back}", "--json"))
        assert home["ok"] and len(home["copied"]) == 2 and home["files"]["copied"] == files
    finally:
        pg.drop_schema(schema)
    original = _rows(project.path / ".nonoka" / "sessions.db")
    assert original["session_entries"] and original["events"]
    assert len(original["serve_files"]) == 3 and len(original["file_bytes"]) == 3
    with sqlite3.connect(back) as db:  # the destination holds another file under an id
        db.execute("UPDATE serve_files SET filename = 'other.txt' WHERE file_id = ?",
                   (files[0],))
    clash = project.nonoka("db", "copy", "--to", f"sqlite://{back}", "--json")
    assert clash.returncode == 1 and json.loads(clash.stdout)["files"]["conflicts"] == \
        [files[0]]
    with sqlite3.connect(back) as db:
        assert db.execute("SELECT filename FROM serve_files WHERE file_id = ?",
                          (files[0],)).fetchone() == ("other.txt",)  # never overwritten
        db.execute("UPDATE serve_files SET filename = 'notes.txt' WHERE file_id = ?",
                   (files[0],))
    assert _rows(back) == original
    exports = []
    for target in (None, f"sqlite://{back}"):
        env = {**project.env, **({"NONOKA_DATABASE_URL": target} if target else {})}
        done = project.nonoka("sessions", "export", "--all", env=env)
        assert done.returncode == 0, done.stderr
        exports.append(done.stdout.split("\n", 1)[1])
    assert exports[0] == exports[1]


def test_the_search_index_is_back_filled_for_an_existing_database(tmp_path: Path) -> None:
    from nonoka.store.sqlite import ledger, migrations
    from nonoka.store.sqlite.database import open_database
    from nonoka.store.sqlite.entries import catch_up

    path = tmp_path / "old.db"
    names = [m.__name__ for m in migrations.MIGRATIONS]
    older = migrations.MIGRATIONS[:names.index("m007_search_index")]
    with sqlite3.connect(path, isolation_level=None) as db:
        ledger.apply_migrations(db, "test", older)
        entry = json.dumps({"role": "user", "content": "the okapi sleeps", "metadata": {},
                            "tokens": 3})
        db.execute("INSERT INTO checkpoints (session_id, state_json, revision, entry_count, "
                   "memory_generation, created_at, updated_at) "
                   "VALUES ('s1', '{}', 1, 1, 0, 1, 1)")
        db.execute("INSERT INTO session_entries (session_id, seq, entry_json) "
                   "VALUES ('s1', 0, ?)", (entry,))
        db.execute("INSERT INTO cli_sessions (session_id, title, created_at, last_active) "
                   "VALUES ('s1', 'zoo notes', 1, 1)")
    upgraded = open_database(path)
    try:
        assert catch_up(upgraded) == 1
        rows = upgraded.execute(
            "SELECT d.session_id, d.seq FROM session_search f JOIN session_entries d ON "
            "d.doc = f.rowid WHERE session_search MATCH ? ORDER BY d.seq",
            ('"okapi"',)).fetchall()
    finally:
        upgraded.close()
    assert rows == [("s1", 0)]
    assert os.path.getsize(path) > 0
