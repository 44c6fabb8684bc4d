"""The click command group: one small function per command over a library call."""

from __future__ import annotations

import click


@click.group()
@click.version_option(package_name="nonoka")
def cli() -> None:
    """nonoka: an agent runtime whose sessions survive process death."""


@cli.command()
def bridge() -> None:
    """Serve the NDJSON bridge protocol on stdin/stdout (spawned by providers).

    Reads one JSON request per line and writes one JSON event per line; logs go to
    stderr. See docs/protocol.md.
    """
    from nonoka.bridge.server import main as bridge_main

    raise SystemExit(bridge_main([]))
