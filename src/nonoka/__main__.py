"""``python -m nonoka`` is the ``nonoka`` command."""

from nonoka.cli.main import main

main()
