"""The version of nonoka, in one place.

``pyproject.toml`` reads it statically (setuptools ``attr``), ``nonoka --version`` prints
it and the bridge sends it as ``server_version``; a literal, so reading it costs no
``importlib.metadata`` lookup on the per-turn path.
"""

__version__ = "0.1.0"
