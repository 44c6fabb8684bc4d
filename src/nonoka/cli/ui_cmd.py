"""``nonoka ui``: serve this project's sessions to a local web browser.

Only click is imported at module level: the web stack (the ``ui`` extra) is
imported when the command runs, so the other commands never load it.
"""

from __future__ import annotations

import asyncio
import importlib
import sys

import click

from nonoka.cli.common import Place
from nonoka.cli.options import place_options

DEFAULT_PORT = 8377


def missing_extra() -> str | None:
    """The first module of the ``ui`` extra that cannot be imported, if any."""
    from nonoka.ui import EXTRA_MODULES

    for name in EXTRA_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            return name
    return None


def _say(text: str) -> None:
    click.echo(text)
    sys.stdout.flush()


@click.command(short_help="Browse this project's sessions in a web browser.")
@click.option("--port", default=DEFAULT_PORT, show_default=True, type=click.IntRange(0, 65535),
              help="Port to listen on (0 picks a free one).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Interface to bind. Anything but a loopback address exposes the sessions "
                   "to the network (still behind the token).")
@click.option("--open", "open_browser", is_flag=True, help="Open the page in a browser.")
@click.option("--allow-actions", is_flag=True,
              help="Allow cancelling (and, when available, forking and exporting) sessions "
                   "from the page. Off by default: the page only reads.")
@place_options
def ui(port: int, host: str, open_browser: bool, allow_actions: bool, place: Place) -> None:
    """Browse this project's sessions in a web browser.

    Serves the sessions of the project's database (.nonoka/sessions.db, or --db, or
    NONOKA_DATABASE_URL) on 127.0.0.1 and prints the address, which carries a random
    access token; requests without it are refused. Pages follow a running session
    live. Needs the ui extra: in your nonoka clone, pip install '.[ui]'.
    """
    from nonoka.cli.common import failed_at, has_database, no_database
    from nonoka.cli.voice import CliError
    from nonoka.errors import NonokaError

    missing = missing_extra()
    if missing:
        raise CliError(f"nonoka ui needs the ui extra ({missing} is not installed); in your "
                       "nonoka clone, run: pip install '.[ui]' (the package index's 'nonoka' "
                       "is an unrelated project)", code="missing_extra")
    if not has_database(place):
        raise no_database(place)
    from nonoka.ui.server import is_loopback, serve

    if not is_loopback(host):
        click.secho(f"warning: binding {host}: other machines can reach this server; "
                    "anyone with the printed address can read every session", fg="yellow",
                    err=True)
    try:
        asyncio.run(serve(place.project, place.url, host=host, port=port,
                          allow_actions=allow_actions, open_browser=open_browser,
                          say=_say))
    except KeyboardInterrupt:
        pass
    except NonokaError as exc:
        raise failed_at(place, exc) from None
    except OSError as exc:
        raise CliError(f"cannot listen on {host}:{port}: {exc.strerror or exc}; pick another "
                       "port with --port (0 picks a free one)") from None
