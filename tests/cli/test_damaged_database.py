"""A damaged database is read where it can be and never written.

A real project database gets one page garbled — a page of the search index, which a turn
never reads, so SQLite alone would let ``nonoka run -c`` write on — and real commands run
against it: the writers refuse it and say how to recover, leaving the file as it was;
the readers still list and show; ``db check --json`` reports the damage as JSON.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import pytest

from nonoka.testing import text
from tests.cli.conftest import Project
from tests.cli.test_voice import FAILED, voiced
from tests.conftest import ScriptItem


def damage(db: Path, table: str) -> None:
    """Overwrite the root page of ``table`` with garbage (its whole page)."""
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        (root,) = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?",
                               (table,)).fetchone()
        (size,) = conn.execute("PRAGMA page_size").fetchone()
    conn.close()
    data = bytearray(db.read_bytes())
    data[(root - 1) * size: root * size] = b"\xab" * size
    db.write_bytes(bytes(data))


def files(project: Project) -> tuple[str, int]:
    """A digest of the database file, and the bytes its write-ahead log holds (SQLite
    makes an empty one, and its -shm index, for any reader of a WAL database)."""
    folder = project.path / ".nonoka"
    wal = folder / "sessions.db-wal"
    return (hashlib.sha256((folder / "sessions.db").read_bytes()).hexdigest(),
            wal.stat().st_size if wal.exists() else 0)


@pytest.fixture
def damaged(project: Project, scripted: list[ScriptItem]) -> str:
    scripted.append(text("first answer"))
    done = project.nonoka("run", "first")
    assert done.returncode == 0, done.stderr
    sid = project.records()[0].session_id
    damage(project.path / ".nonoka" / "sessions.db", "session_search_data")
    return sid


def test_commands_that_write_refuse_it_and_change_nothing(project: Project,
                                                          damaged: str) -> None:
    before = files(project)
    assert before[1] == 0
    for args in (("run", "-c", "more", "--json"), ("sessions", "fork", damaged[:8]),
                 ("sessions", "delete", damaged[:8], "--json"),
                 ("sessions", "prune", "--older-than", "0s", "--json"),
                 ("db", "vacuum", "--json")):
        voiced(project.nonoka(*args), FAILED, "database_damaged", "is damaged",
               "nothing was written", "sessions export --all", "backup")
        assert files(project) == before, args


def test_commands_that_read_still_work(project: Project, damaged: str) -> None:
    listed = project.nonoka("sessions", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [row["session_id"] for row in json.loads(listed.stdout)] == [damaged]
    shown = project.nonoka("sessions", "show", damaged[:8])
    assert shown.returncode == 0 and "first" in shown.stdout, shown.stderr
    exported = project.nonoka("sessions", "export", damaged[:8])
    assert exported.returncode == 0 and damaged in exported.stdout, exported.stderr


def test_db_check_reports_the_damage_as_json(project: Project, damaged: str) -> None:
    done = project.nonoka("db", "check", "--json")
    assert done.returncode == 1, done.stderr
    findings = json.loads(done.stdout)
    assert [f["level"] for f in findings].count("error") >= 1, findings
    assert "Traceback" not in done.stderr


def test_a_damaged_search_index_is_found_and_rebuilt(project: Project,
                                                     scripted: list[ScriptItem]) -> None:
    """The full-text index alone damaged (its structure record zeroed): SQLite's own
    check finds nothing, ``db check`` finds it in one line, a write that meets it says
    so and how to mend it, and ``db check --repair`` rebuilds it from the entries,
    which stay as they were."""
    scripted.append(text("first answer about okapis"))
    done = project.nonoka("run", "first question")
    assert done.returncode == 0, done.stderr
    sid = project.records()[0].session_id
    assert "okapis" in project.nonoka("sessions", "search", "okapis").stdout  # indexed
    path = project.path / ".nonoka" / "sessions.db"
    with sqlite3.connect(path) as db:
        db.execute("UPDATE session_search_data SET block = x'00' WHERE id = 10")
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        entries = db.execute("SELECT doc, entry_json FROM session_entries").fetchall()
    db.close()

    checked = project.nonoka("db", "check")
    assert checked.returncode == 1, checked.stdout
    said = [line for line in checked.stdout.splitlines() if "search_index" in line]
    assert len(said) == 1 and "db check --repair" in said[0], checked.stdout
    # A delete leaves what the index holds of its rows to the next catch-up
    # (``search_stale``): it works with the index damaged; the search that takes them
    # out of the index is what fails, and says so.
    assert project.nonoka("sessions", "delete", sid[:8]).returncode == 0
    with sqlite3.connect(path) as db:
        entries = db.execute("SELECT doc, entry_json FROM session_entries").fetchall()
    db.close()
    voiced(project.nonoka("sessions", "search", "okapis"), FAILED, "failed",
           "full-text search index is damaged", "`nonoka db check --repair` rebuilds")
    repaired = project.nonoka("db", "check", "--repair")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert "repaired: search_index" in repaired.stdout
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT doc, entry_json FROM session_entries").fetchall() == entries
    db.close()
    assert project.nonoka("db", "check").stdout.strip() == "ok: no problems found"
    searched = project.nonoka("sessions", "search", "okapis")  # the deleted rows are out
    assert searched.returncode == 0 and sid[:8] not in searched.stdout
