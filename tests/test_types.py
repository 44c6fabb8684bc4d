"""The strict type check (mypy, configured in ``pyproject.toml``) as one test of the suite.

It runs in a process of its own beside the other tests, rather than before them: on two
cores, half a minute of a cold check no longer waits alone ahead of the suite. Its cache
is kept per machine, under the system temp dir and keyed by mypy's version, as the
OpenCode the end-to-end tests install is: a fresh clone then checks only what differs
from the code checked last (mypy compares every file's hash with the cache's, so nothing
stale is trusted) instead of analysing the tree and the SDKs' stubs from nothing (~30 s
of CPU). Run it alone with ``.venv/bin/mypy``; that cache is ``.mypy_cache/`` (ignored
by git).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from mypy.version import __version__ as MYPY_VERSION

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_finds_no_type_errors() -> None:
    cache = Path(tempfile.gettempdir()) / f"nonoka-mypy-cache-{MYPY_VERSION}"
    done = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(cache)], cwd=ROOT,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"mypy found type errors:\n{done.stdout}{done.stderr}"
    assert done.stdout.startswith("Success: no issues found"), done.stdout
