"""``nonoka serve``: an OpenAI-compatible server whose every response is a stored session.

Only click is imported at module level: the web stack (the ``serve`` extra) is imported
when the command runs, so the other commands never load it.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import sys

import click

from nonoka.cli.common import Place
from nonoka.cli.options import place_options

DEFAULT_PORT = 8378
KEY_VARIABLE = "NONOKA_SERVE_KEY"
"""The API key clients must send (required to bind anything but loopback)."""


def missing_extra() -> str | None:
    """The first module of the ``serve`` extra that cannot be imported, if any."""
    from nonoka.serve import EXTRA_MODULES

    for name in EXTRA_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            return name
    return None


def _say(text: str) -> None:
    click.echo(text)
    sys.stdout.flush()


@click.command(short_help="Serve the OpenAI Responses and Chat Completions APIs.")
@click.option("--port", default=DEFAULT_PORT, show_default=True,
              type=click.IntRange(0, 65535), help="Port to listen on (0 picks a free one).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help=f"Interface to bind. Anything but a loopback address needs {KEY_VARIABLE}.")
@click.option("--model", metavar="PROVIDER:MODEL",
              help="The model answering requests, e.g. openai:gpt-4o-mini (default: "
                   "NONOKA_MODEL, else .nonoka/config.toml). A request's model is used "
                   "instead when nonoka knows it.")
@place_options
def serve(port: int, host: str, model: str | None, place: Place) -> None:
    """Serve OpenAI's Responses and Chat Completions APIs in front of your model.

    Point any OpenAI client at the printed address (its /v1 base URL). Every response
    is stored as a nonoka session in the project's database (.nonoka/sessions.db, or
    --db, or NONOKA_DATABASE_URL): previous_response_id continues a session, or
    branches it when the response continued is not its latest; nonoka sessions list
    and nonoka ui show them. Chat Completions histories are matched to stored sessions
    as the OpenCode bridge matches them. The provider's key stays in this process.

    Clients must send NONOKA_SERVE_KEY as their API key when it is set; without it,
    only a loopback address can be bound. Needs the serve extra: in your nonoka
    clone, pip install '.[serve]'.
    """
    from nonoka.cli.common import failed_at
    from nonoka.cli.run_cmd import model_for
    from nonoka.cli.voice import CliError
    from nonoka.errors import NonokaError

    missing = missing_extra()
    if missing:
        raise CliError(f"nonoka serve needs the serve extra ({missing} is not installed); in "
                       "your nonoka clone, run: pip install '.[serve]' (the package index's "
                       "'nonoka' is an unrelated project)", code="missing_extra")
    from nonoka.serve.server import is_loopback
    from nonoka.serve.server import serve as run_server

    key = os.environ.get(KEY_VARIABLE, "").strip() or None
    if key is None and not is_loopback(host):
        raise CliError(f"binding {host} exposes the server to other machines: set "
                       f"{KEY_VARIABLE} to the API key clients must send, or bind 127.0.0.1",
                       exit_code=2, code="key_required")
    spec = model_for(place.project, model).name
    if place.url is not None:
        # Chat Completions turns open the project's stores as the bridge does, from the
        # environment: they must open this database too.
        os.environ["NONOKA_DATABASE_URL"] = place.url
    try:
        asyncio.run(run_server(place.project, place.url, model=spec, host=host, port=port,
                               key=key, say=_say))
    except KeyboardInterrupt:
        pass
    except NonokaError as exc:
        raise failed_at(place, exc) from None
    except OSError as exc:
        raise CliError(f"cannot listen on {host}:{port}: {exc.strerror or exc}; pick another "
                       "port with --port (0 picks a free one)") from None
