"""Helpers shared by more than one test folder: one copy each, imported, never pasted.

``bridge``: real ``nonoka bridge`` processes and the protocol's message builders;
``stores``: reading what a process stored; ``processes``: the ``nonoka`` command and the
model environment; ``tools``: the marked tools the crash workers run; ``files``: modes.
Fixtures built on them live in ``tests/conftest.py``.
"""
