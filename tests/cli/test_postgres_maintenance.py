"""``nonoka db vacuum|stats|copy`` on PostgreSQL, as a person reads them.

Against the real server, in a private schema: vacuum says what PostgreSQL did (which
tables, their size, live and dead rows) instead of comparing file sizes that PostgreSQL
never shrinks; stats names each table's rows and last vacuum; a copy whose destination
cannot be reached blames ``--to``, the URL that was given, not the environment variable.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from nonoka.testing import text
from tests.cli.conftest import Project
from tests.cli.test_voice import FAILED, voiced
from tests.conftest import ScriptItem
from tests.pg import schema_url, temp_schema

TABLES = {"checkpoints", "session_entries", "step_updates", "cli_sessions", "events",
          "session_leases", "nonoka_migrations", "media"}


@pytest.fixture
def on_postgres(project: Project, scripted: list[ScriptItem]) -> Iterator[Project]:
    with temp_schema() as schema:
        project.env["NONOKA_DATABASE_URL"] = schema_url(schema)
        scripted.append(text("stored in postgres"))
        done = project.nonoka("run", "hello")
        assert done.returncode == 0, done.stderr
        yield project


def test_vacuum_says_what_postgresql_did(on_postgres: Project) -> None:
    done = on_postgres.nonoka("db", "vacuum")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("VACUUM (ANALYZE) done on 8 table(s)"), done.stdout
    assert "->" not in done.stdout and "B freed)" not in done.stdout  # not a file size
    for table in TABLES:
        assert f"  {table} " in done.stdout
    as_json = json.loads(on_postgres.nonoka("db", "vacuum", "--json").stdout)
    assert as_json["engine"] == "postgresql" and as_json["done"] == "VACUUM (ANALYZE)"
    assert {t["name"] for t in as_json["tables"]} == TABLES
    assert all(t["last_vacuum"] is not None for t in as_json["tables"])


def test_stats_names_rows_and_vacuums(on_postgres: Project) -> None:
    done = on_postgres.nonoka("db", "stats")
    assert done.returncode == 0, done.stderr
    assert "live rows" in done.stdout and "dead rows" in done.stdout
    as_json = json.loads(on_postgres.nonoka("db", "stats", "--json").stdout)
    checkpoints = next(t for t in as_json["tables"] if t["name"] == "checkpoints")
    assert as_json["sessions"] == 1 and checkpoints["bytes"] > 0


def test_a_copy_blames_the_url_it_was_given(on_postgres: Project) -> None:
    done = on_postgres.nonoka("db", "copy", "--to", "postgresql://127.0.0.1:1/test")
    line = voiced(done, FAILED, "store_error", "--to")
    assert "NONOKA_DATABASE_URL" not in line


def test_any_command_blames_db_when_db_named_the_database(project: Project) -> None:
    for args in (("sessions", "list"), ("sessions", "show", "abc"), ("db", "stats")):
        line = voiced(project.nonoka(*args, "--db", "postgresql://127.0.0.1:1/test"),
                      FAILED, "store_error", "--db")
        assert "NONOKA_DATABASE_URL" not in line
