"""A shipped migration is never edited: each one's text is pinned by a digest.

A migration's digest covers the module's text from its first migration to the end of
that one, helpers and frozen copies in between included, so editing anything an older
migration runs changes its digest, while a new migration appended after the last one
changes none. A new migration is pinned by adding the line the failure prints.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable, Sequence
from typing import Any

from nonoka.store.postgres import migrations as postgres
from nonoka.store.sqlite import migrations as sqlite

PINNED = {
    "sqlite": {
        "m001_checkpoint_tables": "04d319ded16b3313",
        "m002_session_index_and_events": "8dcb7fb73d0a02c8",
        "m003_session_leases": "27d6555aa916104b",
        "m004_next_calls": "861f31f20c782866",
        "m005_session_lineage": "c941d8439bd57703",
        "m006_entry_digest_chain": "dd0ad5f2145108f4",
        "m007_search_index": "bdbe7318be2c2d12",
        "m008_search_doc_in_entry_row": "551fb7232bcb4a27",
        "m009_media": "c803ab1badfa51ca",
        "m010_compact_tables": "482cf9bc248568fa",
        "m011_events_clustered": "7cb097ed7525e7cf",
        "m012_session_list_lookups": "04209f13705bf97d",
        "m013_list_order": "919d4ea0d5c0a2ce",
        "m014_entries_by_session": "b0d32a15dce4aaa9",
        "m015_entry_rules_in_one_place": "c19edd4fbff38d57",
        "m016_serve_keys": "202c414ace0ea908",
        "m017_entries_deflated": "4adfa712889664ea",
        "m018_events_deflated": "a5b3682d8d953ae9",
        "m019_timeline_numbered": "ca6530e62ca625ac",
        "m020_serve_files": "9cc86afae4934c59",
    },
    "postgres": {
        "m001_checkpoint_tables": "82f9c99aced467e5",
        "m002_session_index_and_events": "ddf3508fc0dd0e65",
        "m003_session_leases": "f1eea6e00b847e87",
        "m005_session_lineage": "b9c0b0d0c203f8a1",
        "m006_search_index": "1f3539f1273e8806",
        "m007_media": "cabdc0a3830fa82c",
        "m008_compact_tables": "4f91d9e69a28f9ef",
        "m009_session_list_lookups": "14c573f68097b812",
        "m010_list_order": "4c9b59561eb95d7a",
        "m011_serve_keys": "69d2155029624c17",
        "m012_serve_files": "0363356bbc8be74c",
    },
}


def _digests(text: str, migrations: Sequence[Callable[..., Any]]) -> dict[str, str]:
    """Each migration's digest over ``text``, its module's source (lines as they are)."""
    lines = text.splitlines(keepends=True)
    first = inspect.getsourcelines(migrations[0])[1] - 1  # its decorator's line
    found = {}
    for migration in migrations:
        body, start = inspect.getsourcelines(migration)
        covered = "".join(lines[first:start - 1 + len(body)])
        found[migration.__name__] = hashlib.sha256(covered.encode()).hexdigest()[:16]
    return found


def test_no_shipped_migration_is_edited() -> None:
    for engine, module in (("sqlite", sqlite), ("postgres", postgres)):
        found = _digests(inspect.getsource(module), module.MIGRATIONS)
        new = {name: digest for name, digest in found.items() if name not in PINNED[engine]}
        assert not new, f"pin the new {engine} migration(s) in PINNED: {new}"
        edited = [name for name, digest in PINNED[engine].items() if found.get(name) != digest]
        assert not edited, (f"{engine} migration(s) {edited} changed after they shipped: "
                            "put the change in a new migration instead")


def test_an_edit_to_an_older_migration_is_caught() -> None:
    """A one-character change to a migration's text, or to a helper it runs, changes
    the digests from that migration on, and none before it."""
    text = inspect.getsource(sqlite)
    found = _digests(text, sqlite.MIGRATIONS)
    names = list(found)
    for old, new, first in (
            ("CHECK (seq BETWEEN 0 AND 4294967295)", "CHECK (seq BETWEEN 0 AND  4294967295)",
             "m014_entries_by_session"),
            ('"""The text full-text search', '"""The  text full-text search',
             "m007_search_index")):
        assert text.count(old) == 1
        changed = _digests(text.replace(old, new), sqlite.MIGRATIONS)
        moved = [name for name in names if changed[name] != found[name]]
        assert moved == names[names.index(first):]
