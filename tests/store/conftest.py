"""Fixtures shared by the storage tests."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture
def open_umask() -> Iterator[None]:
    """A permissive umask, to show the modes do not depend on the caller's."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)
