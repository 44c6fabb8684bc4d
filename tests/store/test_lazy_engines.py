"""Engines load when one of their names is first used; a missing extra says which.

Each check runs in a fresh interpreter, so what is imported (and what is missing) is
exactly what the code under test makes of it. A missing ``psycopg`` is simulated by a
meta-path finder that refuses it, as an environment without the ``postgres`` extra would.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

WITHOUT_PSYCOPG = """
import sys

class NoPsycopg:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("psycopg", "psycopg_pool", "psycopg_binary", "psycopg_c"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoPsycopg())
"""


def run(code: str) -> Any:
    """Run ``code`` in a new interpreter; what it printed last, as JSON."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("name", ["PostgresCheckpointStore", "PostgresRecordStore"])
def test_without_the_extra_the_postgres_names_say_what_to_install(name: str) -> None:
    result = run(WITHOUT_PSYCOPG + f"""
import json
import nonoka.store
from nonoka.errors import ConfigurationError
from nonoka.store import MemoryCheckpointStore, SQLiteCheckpointStore  # unaffected
try:
    from nonoka.store import {name}
except ImportError as exc:
    print(json.dumps({{"message": str(exc), "name": exc.name,
                      "configuration": isinstance(exc, ConfigurationError)}}))
else:
    print(json.dumps(None))
""")
    assert result is not None, "the PostgreSQL engine imported without psycopg"
    assert "pip install '.[postgres]'" in result["message"]
    assert result["name"] == "psycopg"
    assert result["configuration"] is True


def test_the_engines_load_only_when_named() -> None:
    result = run("""
import json, sys
def loaded():
    return sorted(m for m in sys.modules
                  if m.startswith(("psycopg", "pydantic", "sqlite3", "nonoka.store.")))
import nonoka.store
on_import = loaded()
from nonoka.store import SQLiteCheckpointStore
after_sqlite = loaded()
from nonoka.store import PostgresCheckpointStore
from nonoka.store.postgres.checkpoints import PostgresCheckpointStore as defined
import nonoka.store.postgres as package
print(json.dumps({"on_import": on_import, "after_sqlite": after_sqlite,
                  "after_postgres": loaded(),
                  "same": PostgresCheckpointStore is defined is package.PostgresCheckpointStore,
                  "sqlite": SQLiteCheckpointStore.__module__}))
""")
    assert result["on_import"] == ["nonoka.store.lazy"]  # the lazy export itself, no engine
    assert "sqlite3" in result["after_sqlite"]
    assert not [m for m in result["after_sqlite"]
                if m.startswith(("psycopg", "nonoka.store.postgres"))]
    assert "psycopg" in result["after_postgres"]
    assert result["same"] is True
    assert result["sqlite"] == "nonoka.store.sqlite.checkpoints"


def test_an_unknown_name_is_an_attribute_error() -> None:
    import nonoka.store
    import nonoka.store.sqlite

    for module in (nonoka.store, nonoka.store.sqlite):
        with pytest.raises(AttributeError, match="NoSuchStore"):
            module.NoSuchStore  # noqa: B018


def test_the_early_paths_store_modules_are_standard_library_only() -> None:
    loaded = run("""
import json, sys
import nonoka.store.project, nonoka.store.next_calls, nonoka.store.migrations
import nonoka.store.lease_terms, nonoka.store.sqlite.next_calls
print(json.dumps(sorted(m for m in sys.modules
                        if m.partition(".")[0] in ("pydantic", "asyncio", "psycopg"))))
""")
    assert loaded == []
