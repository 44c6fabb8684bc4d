"""``tests/support/rewrite_ahead.py``: what it caches is what pytest's import hook reads."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.rewrite_ahead import rewrite_ahead

MODULE = "def test_compares():\n    left, right = 1, 2\n    assert left == right\n"


def test_modules_are_rewritten_once_and_pytest_reads_them_from_the_cache(
        tmp_path: Path, request: pytest.FixtureRequest) -> None:
    (tmp_path / "test_sample.py").write_text(MODULE)
    (tmp_path / "helper.py").write_text("VALUE = 1\n")  # not a test module: left alone
    assert rewrite_ahead(request.config, tmp_path) == 1
    assert rewrite_ahead(request.config, tmp_path) == 0  # found, current
    cached = list((tmp_path / "__pycache__").glob("test_sample.*-pytest-*.pyc"))
    assert len(cached) == 1
    written = cached[0].stat().st_mtime_ns

    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "no:xdist", "test_sample.py"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False)
    assert "assert 1 == 2" in done.stdout, done.stdout  # the asserts were rewritten
    # read from that cache, not redone: no other file, this one untouched
    assert list((tmp_path / "__pycache__").glob("test_sample.*.pyc")) == cached
    assert cached[0].stat().st_mtime_ns == written

    (tmp_path / "test_sample.py").write_text(MODULE.replace("1, 2", "10, 20"))
    assert rewrite_ahead(request.config, tmp_path) == 1  # a changed module is redone
