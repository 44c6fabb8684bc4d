"""The crash campaign as tests: a sample by default, every fault point with ``-m slow``.

Each crash run SIGKILLs a real process (a ``nonoka bridge`` driven by the Python
provider, or a ``Runner`` worker) at one (point, occurrence) pair, lets a fresh process
retry the request and finish the conversation, then checks the invariants
(``tests/faults/campaign.py``; the list is in ``docs/reliability.md``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nonoka.faults import POINTS
from tests.faults.campaign import Campaign, run_campaign

SAMPLE_PER_SCENARIO = 3


def failures(campaign: Campaign) -> str:
    return "\n".join(f"{o.pair}: {'; '.join(o.violations)}"
                     for o in campaign.outcomes if o.violations)


async def test_a_sample_of_crashes_loses_nothing(tmp_path: Path) -> None:
    campaign = await run_campaign(tmp_path, per_scenario=SAMPLE_PER_SCENARIO, jobs=3)
    reached = {p for steps in campaign.traces.values() for points in steps for p in points}
    assert reached == set(POINTS), (
        f"fault points never reached by the clean runs: {set(POINTS) - reached}; "
        f"reached but not listed in nonoka.faults.POINTS: {reached - set(POINTS)}")
    assert len(campaign.outcomes) == 2 * SAMPLE_PER_SCENARIO
    assert all(o.killed for o in campaign.outcomes), "an armed fault point was not reached"
    assert campaign.violations == 0, failures(campaign)


@pytest.mark.slow
async def test_a_crash_at_every_fault_point_loses_nothing(tmp_path: Path) -> None:
    campaign = await run_campaign(tmp_path, jobs=4)
    print("\n" + campaign.table())
    assert len(campaign.outcomes) == len(campaign.pairs) > 200
    assert all(o.killed for o in campaign.outcomes), "an armed fault point was not reached"
    assert campaign.violations == 0, failures(campaign)
