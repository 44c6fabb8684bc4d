"""``nonoka sessions import`` as people run it: a write that fails part way through says
exactly which sessions it stored (and the same import run again adds the rest); values
the readers cannot read are refused with the line and the field, and nothing is stored."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

from nonoka.store.project import open_project_stores
from nonoka.testing.conformance.media import IMAGE, SHOT, digest
from tests.cli.conftest import Project
from tests.conformance.ops_suite import add_files, add_session, export_text, parsed, reseal


def exported(tmp_path: Path, sessions: int) -> tuple[Path, list[str]]:
    """A file exported from another project holding ``sessions`` sessions; their ids."""
    async def make() -> tuple[str, list[str]]:
        async with open_project_stores(tmp_path, f"sqlite:{tmp_path}/source.db") as stores:
            ids = sorted([await add_session(stores, title=f"s{n}") for n in range(sessions)])
            return await export_text(stores), ids

    text, ids = asyncio.run(make())
    path = tmp_path / "backup.jsonl"
    path.write_text(text)
    return path, ids


def test_a_failed_write_says_what_was_imported(project: Project, tmp_path: Path) -> None:
    backup, (first, second, third) = exported(tmp_path, 3)
    database = project.path / ".nonoka/sessions.db"
    done = project.nonoka("sessions", "import", str(backup), "--json")
    assert done.returncode == 0, done.stderr
    for sid in (first, second, third):
        assert project.nonoka("sessions", "delete", sid).returncode == 0
    with sqlite3.connect(database) as db:  # the database refuses the second session
        db.execute(f"CREATE TRIGGER refuse BEFORE INSERT ON checkpoints WHEN "
                   f"NEW.session_id = '{second}' BEGIN SELECT RAISE(ABORT, 'not this one'); "
                   "END")

    done = project.nonoka("sessions", "import", str(backup))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stdout == f"imported {first}\n"
    error = done.stderr.splitlines()[-1]
    assert error.startswith(f"nonoka: writing session {second} failed (database ")
    assert error.endswith("not this one); the 1 session(s) before it were imported and stay "
                          "stored; it and the sessions after it were not: run the same "
                          "import again with --on-conflict skip to add them")
    as_json = project.nonoka("sessions", "import", str(backup), "--json")
    assert as_json.returncode == 1
    assert json.loads(as_json.stdout) == {"imported": [], "skipped": [first],
                                          "renamed": {}, "error": as_json.stderr.split(
                                              "nonoka: ", 1)[1].strip()}
    assert f"writing session {second} failed" in as_json.stderr

    with sqlite3.connect(database) as db:
        db.execute("DROP TRIGGER refuse")
    again = project.nonoka("sessions", "import", str(backup), "--on-conflict", "skip")
    assert again.returncode == 0, again.stderr
    assert again.stdout == f"imported {second}\nimported {third}\nskipped {first} (already " \
        "stored)\n"


def test_import_refuses_what_export_and_list_could_not_read(project: Project,
                                                            tmp_path: Path) -> None:
    backup, (sid,) = exported(tmp_path, 1)
    lines = parsed(backup.read_text())
    for change, says in (
            ({"updated_at": float("inf")}, "line 2: the session line's 'updated_at' is inf, "
                                           "not a finite number; nothing was imported"),
            ({"revision": 2**70}, "line 2: the session line's 'revision' is "
                                  "1180591620717411303424, outside 0..9223372036854775807; "
                                  "nothing was imported")):
        changed = [dict(v, **change) if v.get("type") == "session" else v for v in lines]
        path = tmp_path / "changed.jsonl"
        path.write_text(reseal(changed))
        done = project.nonoka("sessions", "import", str(path))
        assert done.returncode == 1 and done.stderr == f"nonoka: {says}\n"
    assert project.nonoka("sessions", "list").stdout.startswith("no sessions")
    assert project.nonoka("sessions", "import", str(backup)).returncode == 0
    assert project.nonoka("sessions", "export", "--all").returncode == 0
    assert sid[:8] in project.nonoka("sessions", "list").stdout


def test_a_file_reference_spelled_with_json_escapes_is_checked(project: Project,
                                                              tmp_path: Path) -> None:
    """JSON may spell the key ``"media"`` as ``"\\u006dedia"``: such a reference skipped
    the check that the file carries the bytes it refers to (and, with them, was stored
    without them). Both spellings are one reference."""
    async def make() -> tuple[str, str]:
        async with open_project_stores(tmp_path, f"sqlite:{tmp_path}/source.db") as stores:
            sid = await add_session(stores, title="a file")
            await add_files(stores, sid, SHOT)
            return sid, await export_text(stores)

    sid, text = asyncio.run(make())
    lines = parsed(text)
    (entry,) = [v for v in lines if v.get("type") == "entry" and '"media"' in v["entry"]]
    entry["entry"] = entry["entry"].replace('"media":', '"\\u006dedia":')
    kept = [v for v in lines if v.get("type") != "media"]
    without = tmp_path / "without-the-file.jsonl"
    without.write_text(reseal(kept))
    done = project.nonoka("sessions", "import", str(without))
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr == (
        f"nonoka: line {kept.index(entry) + 1}: entry {entry['seq']} of session {sid} "
        f"refers to the file {digest(IMAGE)}, which the file does not carry before it; "
        "nothing was imported\n")
    assert project.nonoka("sessions", "list").stdout.startswith("no sessions")

    carried = tmp_path / "with-the-file.jsonl"
    carried.write_text(reseal(lines))
    done = project.nonoka("sessions", "import", str(carried))
    assert done.returncode == 0, done.stderr
    assert project.nonoka("db", "check").returncode == 0

    async def load() -> list[dict[str, object]]:
        async with open_project_stores(project.path) as stores:
            state = await stores.checkpoints.load_session(sid)
            assert state is not None
            return [p for e in state.memory_entries for p in e.metadata.get("parts", [])
                    if p.get("type") == "file"]

    assert asyncio.run(load()) == [SHOT]
