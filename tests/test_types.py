"""The strict type check (mypy, configured in ``pyproject.toml``) as one test of the suite.

It runs in a process of its own beside the other tests, rather than before them: on two
cores, half a minute of a cold check no longer waits alone ahead of the suite. Run it
alone with ``.venv/bin/mypy``; its cache is ``.mypy_cache/`` (ignored by git).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_finds_no_type_errors() -> None:
    done = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, f"mypy found type errors:\n{done.stdout}{done.stderr}"
    assert done.stdout.startswith("Success: no issues found"), done.stdout
