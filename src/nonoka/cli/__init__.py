"""The ``nonoka`` command."""
