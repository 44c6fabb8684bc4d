"""A restored session can be continued: the real commands, from ``nonoka run`` through
``sessions export``/``import`` or ``db copy`` to the next ``nonoka run`` on the restored
session; and ``db check --repair`` for a database an older import left without the
entries' digest chain."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from nonoka.store.sqlite.packing import register, unpack
from nonoka.testing import text
from tests.cli.conftest import Project
from tests.conftest import ScriptItem


def run(project: Project, *args: str) -> str:
    """``nonoka run ARGS``; the session id it reports."""
    done = project.nonoka("run", *args)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return done.stderr.split("[session ", 1)[1].split("]", 1)[0]


def entries(database: Path, sid: str) -> list[str]:
    with sqlite3.connect(database) as db:
        return [json.loads(unpack(t))["content"] for (t,) in db.execute(
            "SELECT entry_json FROM session_entries WHERE session_id = ? ORDER BY seq", (sid,))]


def other(project: Project, name: str) -> Project:
    path = project.path.parent / name
    path.mkdir()
    return Project(path, project.server)


def test_an_imported_and_a_copied_session_continue(project: Project,
                                                   scripted: list[ScriptItem]) -> None:
    scripted += [text("first answer"), text("second answer"), text("after import"),
                 text("after copy")]
    sid = run(project, "first question")
    assert run(project, "--session", sid, "second question") == sid
    backup = project.path.parent / "b.jsonl"
    done = project.nonoka("sessions", "export", "--all", "-o", str(backup))
    assert done.returncode == 0, done.stderr

    restored = other(project, "restored")
    done = restored.nonoka("sessions", "import", str(backup))
    assert done.returncode == 0, done.stderr
    assert run(restored, "--session", sid, "third question") == sid
    assert entries(restored.path / ".nonoka/sessions.db", sid)[1:] == [
        "first question", "first answer", "second question", "second answer",
        "third question", "after import"]
    assert restored.nonoka("db", "check").returncode == 0

    copied = other(project, "copied")
    done = project.nonoka("db", "copy", "--to", f"sqlite:///{copied.path}/.nonoka/sessions.db")
    assert done.returncode == 0, done.stderr
    assert run(copied, "--session", sid, "fourth question") == sid
    assert entries(copied.path / ".nonoka/sessions.db", sid)[-2:] == [
        "fourth question", "after copy"]


def test_check_finds_a_missing_digest_chain_and_repair_rebuilds_it(
        project: Project, scripted: list[ScriptItem]) -> None:
    scripted += [text("first answer"), text("second answer"), text("after repair")]
    sid = run(project, "first question")
    run(project, "--session", sid, "second question")
    database = project.path / ".nonoka/sessions.db"
    with sqlite3.connect(database) as db:  # as an older nonoka's import left them
        db.execute("UPDATE session_entries SET key_chain = NULL WHERE seq <> 2")
        db.execute("UPDATE session_entries SET key_chain = 'feed' WHERE seq = 2")

    refused = project.nonoka("run", "--session", sid, "third question")
    assert refused.returncode == 1 and "db check --repair" in refused.stderr
    found = project.nonoka("db", "check", "--json")
    assert found.returncode == 1
    assert [(f["kind"], f["session_id"]) for f in json.loads(found.stdout)] == [
        ("digest_chain", sid)]
    assert "4 entry row(s) without their digest chain and 1 entry row(s) whose digest " \
        "chain is not their text's" in json.loads(found.stdout)[0]["message"]
    assert "digest_chain" in project.nonoka("db", "check").stdout

    repaired = project.nonoka("db", "check", "--repair")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert repaired.stdout.splitlines() == [f"repaired: digest_chain (session {sid})",
                                            "ok: no problems found"]
    assert run(project, "--session", sid, "third question") == sid
    assert entries(database, sid)[-2:] == ["third question", "after repair"]
    assert json.loads(project.nonoka("db", "check", "--repair", "--json").stdout) == {
        "repaired": [], "findings": []}


def test_check_and_repair_name_an_entry_changed_after_it_was_stored(
        project: Project, scripted: list[ScriptItem]) -> None:
    """An answer edited in the database by hand breaks the digest chain from that row on;
    ``--repair`` rebuilt the chain over the edited text without saying which entry it
    was. Both now name it; a damaged chain value (the rows after it continue the chain of
    the text as it is) is not an edit and names none."""
    scripted += [text("first answer"), text("second answer"), text("third answer"),
                 text("fourth answer")]
    edited = run(project, "first question")
    run(project, "--session", edited, "second question")
    damaged = run(project, "third question")
    run(project, "--session", damaged, "fourth question")
    database = project.path / ".nonoka/sessions.db"
    with sqlite3.connect(database) as db:
        register(db)  # an edit by hand reads a deflated row through ``entry_text``
        (seq,) = db.execute("SELECT seq FROM session_entries WHERE session_id = ? AND "
                            "entry_text(entry_json) LIKE '%first answer%'", (edited,)
                            ).fetchone()
        db.execute("UPDATE session_entries SET entry_json = replace(entry_text(entry_json), "
                   "'first answer', 'a kinder answer') WHERE session_id = ? AND seq = ?",
                   (edited, seq))
        db.execute("UPDATE session_entries SET key_chain = ? WHERE session_id = ? AND "
                   "seq = ?", ("0" * 32, damaged, seq))
    assert 0 < seq < len(entries(database, edited)) - 1

    found = project.nonoka("db", "check", "--json")
    assert found.returncode == 1
    by_session = {f["session_id"]: f for f in json.loads(found.stdout)}
    assert by_session.keys() == {edited, damaged}
    assert by_session[edited]["entries"] == [seq]
    assert by_session[edited]["message"].startswith(
        f"entry {seq} was changed after it was stored (the text is not the one the digest "
        "chain was made over; ")
    assert by_session[damaged]["entries"] == []
    assert by_session[damaged]["message"].startswith("1 entry row(s) whose digest chain")

    repaired = project.nonoka("db", "check", "--repair")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    *said, last = repaired.stdout.splitlines()
    assert last == "ok: no problems found"
    assert sorted(said) == sorted([
        f"repaired: digest_chain (session {edited}): entry {seq} was changed after it was "
        "stored; the chain now takes its text as it is (restore the session from a backup "
        "for the one stored)",
        f"repaired: digest_chain (session {damaged})"])
    assert entries(database, edited)[seq] == "a kinder answer"
