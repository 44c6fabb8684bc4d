"""``nonoka serve``: an OpenAI-compatible server whose every response is a stored session.

Only click is imported at module level: the web stack (the ``serve`` extra) is imported
when the command runs, so the other commands never load it.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

import click

from nonoka.cli.common import Place
from nonoka.cli.options import place_options

if TYPE_CHECKING:
    from nonoka.serve.keys import KeyStore

T = TypeVar("T")

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


@click.group(short_help="Serve the OpenAI Responses and Chat Completions APIs.",
             invoke_without_command=True)
@click.option("--port", default=DEFAULT_PORT, show_default=True,
              type=click.IntRange(0, 65535), help="Port to listen on (0 picks a free one).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help=f"Interface to bind. Anything but a loopback address needs {KEY_VARIABLE}.")
@click.option("--model", metavar="PROVIDER:MODEL",
              help="The model answering requests, e.g. openai:gpt-4o-mini (default: "
                   "NONOKA_MODEL, else .nonoka/config.toml). A request's model is used "
                   "instead when nonoka knows it.")
@place_options
@click.pass_context
def serve(ctx: click.Context, port: int, host: str, model: str | None, place: Place) -> None:
    """Serve OpenAI's Responses, Conversations and Chat Completions APIs in front of your model.

    Point any OpenAI client at the printed address (its /v1 base URL). Every response
    is stored as a nonoka session in the project's database (.nonoka/sessions.db, or
    --db, or NONOKA_DATABASE_URL): previous_response_id continues a session, or
    branches it when the response continued is not its latest; nonoka sessions list
    and nonoka ui show them. Chat Completions histories are matched to stored sessions
    as the OpenCode bridge matches them. The provider's key stays in this process.

    API keys: nonoka serve keys add NAME makes a key (shown once; stored hashed);
    once one exists, every request must send a key, and each key's owner reaches
    only the responses made with its owner's keys. NONOKA_SERVE_KEY is the server's
    own key. Without any key, only a loopback address can be bound. Needs the serve
    extra: in your nonoka clone, pip install '.[serve]'.
    """
    if ctx.invoked_subcommand is not None:
        return
    from nonoka.cli.common import failed_at
    from nonoka.cli.run_cmd import model_for
    from nonoka.cli.voice import CliError
    from nonoka.errors import NonokaError

    missing = missing_extra()
    if missing:
        raise CliError(f"nonoka serve needs the serve extra ({missing} is not installed); in "
                       "your nonoka clone, run: pip install '.[serve]' (the package index's "
                       "'nonoka' is an unrelated project)", code="missing_extra")
    from nonoka.serve.server import KeyRequired
    from nonoka.serve.server import serve as run_server

    key = os.environ.get(KEY_VARIABLE, "").strip() or None
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
    except KeyRequired:
        raise CliError(f"binding {host} exposes the server to other machines: add a key "
                       f"(nonoka serve keys add NAME) or set {KEY_VARIABLE} to the API key "
                       "clients must send, or bind 127.0.0.1", exit_code=2,
                       code="key_required") from None
    except NonokaError as exc:
        raise failed_at(place, exc) from None
    except OSError as exc:
        raise CliError(f"cannot listen on {host}:{port}: {exc.strerror or exc}; pick another "
                       "port with --port (0 picks a free one)") from None


@serve.group(short_help="Manage the API keys clients send.")
def keys() -> None:
    """The API keys of nonoka serve, kept hashed in the project's database.

    Once a key exists, every request must send one ('Authorization: Bearer <key>'), and
    what a request stores belongs to its key's owner: another owner's requests find
    none of it (404, as for an id that never existed)."""


@keys.command("add", short_help="Make a key (shown once).")
@click.argument("name")
@click.option("--owner", help="Whose responses the key reaches (default: NAME). Keys with "
                              "the same owner reach the same responses.")
@click.option("--json", "as_json", is_flag=True, help="Print the key's record as JSON.")
@place_options
def keys_add(name: str, owner: str | None, as_json: bool, place: Place) -> None:
    """Make a key named NAME and print it; it is not shown again."""
    from nonoka.serve.keys import add_key

    record, secret = _keys_call(place, lambda k: add_key(k, name, owner))
    if as_json:
        click.echo(json.dumps({**record.as_dict(), "secret": secret}))
        return
    click.echo(secret)
    click.echo(f"key {record.key_id} ({record.name}) for owner {record.owner!r}: keep it; "
               "it is not shown again", err=True)


@keys.command("list", short_help="List the keys (never their secrets).")
@click.option("--json", "as_json", is_flag=True, help="Print the keys as JSON lines.")
@place_options
def keys_list(as_json: bool, place: Place) -> None:
    """List the keys: id, name, owner, the first characters, and whether revoked."""
    records = _keys_call(place, lambda k: k.records())
    for record in records:
        if as_json:
            click.echo(json.dumps(record.as_dict()))
        else:
            state = "revoked" if record.revoked_at is not None else "active"
            click.echo(f"{record.key_id}  {record.name}  owner={record.owner}  "
                       f"{record.shown}…  {state}")


@keys.command("revoke", short_help="Revoke a key by its id or name.")
@click.argument("key")
@place_options
def keys_revoke(key: str, place: Place) -> None:
    """Revoke KEY (its id or name): requests sending it are refused from now on, by
    every server on this database. What its owner stored stays theirs."""
    from nonoka.cli.voice import CliError

    revoked = _keys_call(place, lambda k: k.revoke(key, time.time()))
    if not revoked:
        raise CliError(f"no active key has the id or name {key!r}", code="not_found")
    for record in revoked:
        click.echo(f"revoked {record.key_id} ({record.name})")


def _keys_call(place: Place, work: Callable[[KeyStore], Awaitable[T]]) -> T:
    from nonoka.errors import ConfigurationError
    from nonoka.serve.keys import open_keys

    async def run() -> T:
        store = open_keys(place.project, place.url)
        try:
            return await work(store)
        finally:
            await store.close()

    try:
        return asyncio.run(run())
    except ConfigurationError as exc:
        from nonoka.cli.voice import CliError

        raise CliError(str(exc), exit_code=2) from None
