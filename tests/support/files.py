"""File-system facts the tests check."""

from __future__ import annotations

import stat
from pathlib import Path


def mode(path: Path) -> int:
    """The permission bits of ``path`` (``0o600`` and the like)."""
    return stat.S_IMODE(path.stat().st_mode)
