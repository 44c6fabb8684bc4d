"""``nonoka ui``: a local web viewer for a project's sessions (the ``ui`` extra).

Nothing here is imported by ``nonoka bridge`` or ``nonoka run``; the command imports it
only when it runs. ``data`` is the one module that reads nonoka's stores.
"""

EXTRA_MODULES = ("starlette", "uvicorn", "jinja2")
"""What the ``ui`` extra brings; the command names the extra when one is missing."""
