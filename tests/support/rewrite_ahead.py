"""The test modules' rewritten asserts, cached once before pytest-xdist starts its workers.

pytest rewrites each test module's asserts and keeps the result in ``__pycache__``. On a
fresh checkout nothing is kept yet, and ``-n N`` workers start collecting at the same
moment: each rewrites every module itself, about 6 s of CPU a worker on two cores. The
controller does it once here first, so the workers find it done. pytest's own rewrite
functions do the work, exactly as its import hook would; if a pytest release moves them,
this does nothing and the workers rewrite as before.
"""

from __future__ import annotations

from pathlib import Path

import pytest


def rewrite_ahead(config: pytest.Config, tests: Path) -> int:
    """Rewrite and cache every test module and conftest under ``tests`` whose cached
    rewrite is missing or stale; how many were written."""
    try:
        from _pytest.assertion import rewrite
    except ImportError:
        return 0
    needed = ("PYC_TAIL", "_read_pyc", "_rewrite_test", "_write_pyc", "get_cache_dir",
              "try_makedirs", "assertstate_key")
    if config.getoption("assertmode") != "rewrite" or not all(
            hasattr(rewrite, name) for name in needed):
        return 0
    state = config.stash.get(rewrite.assertstate_key, None)
    if state is None:
        return 0
    written = 0
    for source in sorted(tests.rglob("*.py")):
        if "node_modules" in source.parts or not (
                source.name == "conftest.py" or source.name.startswith("test_")):
            continue
        cache = rewrite.get_cache_dir(source)
        pyc = cache / (source.name[:-3] + rewrite.PYC_TAIL)
        if rewrite._read_pyc(source, pyc, state.trace) is not None:
            continue
        if not rewrite.try_makedirs(cache):
            return written
        try:
            source_hash, code = rewrite._rewrite_test(source, config)
        except (OSError, SyntaxError, ValueError):
            continue  # the workers' collection reports it, as without this
        rewrite._write_pyc(state, code, source_hash, pyc)
        written += 1
    return written
