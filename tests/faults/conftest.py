"""Fixtures for the fault tests: the bridge tests' own ``project`` and ``bridge``.

The exhaustive crash campaign is marked ``slow`` and deselected by default (pyproject's
``-m "not slow"``); ``pytest -m slow`` runs every fault point. The default run keeps a
sample of the campaign.
"""

from __future__ import annotations

from tests.bridge.conftest import bridge, project

__all__ = ["bridge", "project"]
