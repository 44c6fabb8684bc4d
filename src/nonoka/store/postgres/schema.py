"""What live PostgreSQL queries share with the schema: the names and advisory lock keys
nonoka uses, and the expressions its indexes are built on (a query uses an expression
index only when it repeats the expression verbatim; ``docs/schema.md`` shows the
indexes, and ``tests/store/test_schema_doc.py`` holds them to these)."""

from __future__ import annotations

import re

SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
"""Schema names nonoka creates: plain identifiers, safe to quote and put in options."""

MIGRATION_LOCK = 0x6E6F6E6F
"""First key of the advisory locks nonoka takes ("nono"); the second is per object."""
STEP_LOCK = MIGRATION_LOCK + 1
EVENT_LOCK = MIGRATION_LOCK + 2

SEARCH_CONFIG = "simple"
"""The text search configuration: lower-cased words, no stemming and no stop words, the
closest match to SQLite FTS5's ``unicode61`` tokenizer (``nonoka.ops.search``)."""
ENTRY_VECTOR = "to_tsvector('simple', nonoka_search_text({e}))"
"""The expression the entry search index is built on; queries must use it verbatim."""

MEDIA_REFS = "nonoka_media({m})"
"""The digests an entry row's ``media`` column names, as a ``text[]`` (a damaged value
names none); the expression the references index is built on."""
