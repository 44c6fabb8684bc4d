"""The PostgreSQL server the tests use, and a private schema per test.

``NONOKA_TEST_POSTGRES_URL`` names the server (default: the local one, trust auth). The
tests need it running and fail, never skip, when it is not: CI starts it. Each test gets
a fresh schema, dropped afterwards even when the test fails.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import quote

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from nonoka.store.postgres.database import describe

PG_URL = os.environ.get("NONOKA_TEST_POSTGRES_URL",
                        "postgresql://postgres@127.0.0.1:5432/test").strip()
SCHEMA_PREFIX = "nonoka_test_"


def connect(schema: str | None = None) -> psycopg.Connection[tuple[object, ...]]:
    """An autocommit connection to the test server (searching ``schema`` if given)."""
    options = f"-c search_path={schema}" if schema else None
    try:
        return psycopg.connect(PG_URL, autocommit=True, connect_timeout=5, options=options)
    except psycopg.OperationalError as exc:
        reason = " ".join(str(exc).split())
    pytest.fail(  # outside the except block: no chained traceback to scroll past
        f"PostgreSQL is not reachable at {describe(conninfo_to_dict(PG_URL))}: {reason}\n"
        "These tests need a running server (CI starts one). Start PostgreSQL locally or "
        "point NONOKA_TEST_POSTGRES_URL at one.",
        pytrace=False,
    )


def schema_url(schema: str) -> str:
    """The test URL with ``search_path`` set to ``schema`` (libpq's ``options``)."""
    joiner = "&" if "?" in PG_URL else "?"
    return f"{PG_URL}{joiner}options={quote(f'-csearch_path={schema}', safe='')}"


def create_schema() -> str:
    name = f"{SCHEMA_PREFIX}{secrets.token_hex(6)}"
    with connect() as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    return name


def drop_schema(name: str) -> None:
    with connect() as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@contextmanager
def temp_schema() -> Iterator[str]:
    """A new empty schema for the block, dropped afterwards whatever happens."""
    name = create_schema()
    try:
        yield name
    finally:
        drop_schema(name)
