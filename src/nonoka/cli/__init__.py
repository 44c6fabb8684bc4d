"""The ``nonoka`` command.

Internal: the command line is the interface, not these modules.
"""
