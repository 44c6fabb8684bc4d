"""A process that opens its database a second time keeps the locks of the first
connection: POSIX locks belong to the process, and closing any descriptor of the file
drops them all, so a raw read of the header (then a close) let another process take the
file for unused, fold the write-ahead log in and delete it under the first connection."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from nonoka.store.sqlite.database import open_database, open_read_only

OPEN_AND_CLOSE = ("import sys; from nonoka.store.sqlite.database import open_database; "
                  "open_database(sys.argv[1]).close()")
COUNT = ("import sys, sqlite3; print(sqlite3.connect(sys.argv[1])"
         ".execute('SELECT count(*) FROM probe').fetchone()[0])")


def _another_process(code: str, path: Path) -> str:
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_second_open_in_the_process_leaves_the_first_connections_commits_safe(
        tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    first = open_database(path)
    first.execute("CREATE TABLE probe (n INTEGER)")
    first.execute("INSERT INTO probe VALUES (1)")
    second = open_database(path)  # as nonoka serve does for its keys
    reader = open_read_only(path)
    # Another process opens and closes the file: the first connection's locks must still
    # tell it the file is in use, so its write-ahead log stays where it is.
    _another_process(OPEN_AND_CLOSE, path)
    for n in range(2, 6):
        first.execute("BEGIN IMMEDIATE")
        first.execute("INSERT INTO probe VALUES (?)", (n,))
        first.execute("COMMIT")
    # Another process sees every commit while the first connection is still open (they
    # went to a deleted log, seen by no one, before).
    assert _another_process(COUNT, path) == "5"
    for db in (reader, second, first):
        db.close()
    assert _another_process(COUNT, path) == "5"
