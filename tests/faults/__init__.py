"""The fault tests: crashes at every fault point, hostile input, storage faults.

The exhaustive crash campaign is marked ``slow`` and deselected by default (pyproject's
``-m "not slow"``); ``pytest -m slow`` runs every fault point. The default run keeps a
sample of the campaign.
"""
