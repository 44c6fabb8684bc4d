"""Entry point of the ``nonoka`` command.

``nonoka bridge`` is spawned for every model step, so it is dispatched before click (or
anything else) is imported; every other command goes through the click group.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["bridge"] and not {"-h", "--help"} & set(args[1:]):
        from nonoka.bridge.server import main as bridge_main

        sys.exit(bridge_main(args[1:]))
    from nonoka.cli.commands import cli

    cli.main(args=args, prog_name="nonoka")
