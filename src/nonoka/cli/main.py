"""Entry point of the ``nonoka`` command."""

from __future__ import annotations

import click


@click.group()
@click.version_option(package_name="nonoka")
def cli() -> None:
    """nonoka: an agent runtime whose sessions survive process death."""


def main() -> None:
    cli()
