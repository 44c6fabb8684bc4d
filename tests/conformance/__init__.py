"""One behaviour suite for every checkpoint engine (see ``engines.py`` to add one)."""
