"""``nonoka serve``: an OpenAI-compatible server in front of any model nonoka speaks.

Every response it gives is a point on a nonoka session line (``lineage``): continuing
from the tip of a line continues its session, continuing from an earlier point forks
it there, so a model is sent exactly the path from the root to the point it continues.
The ids it hands out name where that point lives (``ids``), so they resolve after a
restart without a table of their own; what a response was asked with rides on the
answer's entry (``record``).

Nothing here is imported by ``nonoka bridge`` or ``nonoka run``; the command imports it
only when it runs (the ``serve`` extra).

Internal: this package's layout may change.
"""

EXTRA_MODULES = ("starlette", "uvicorn")
"""What the ``serve`` extra brings; the command names the extra when one is missing."""
