"""The click command group: one small function per command over a library call.

``bridge`` is normally dispatched before click is imported (``cli/main.py``); the entry
here is for ``nonoka bridge --help`` and completeness. Everything a command needs is
imported inside it, so ``nonoka --help`` stays quick.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import click

from nonoka import __version__
from nonoka.cli.opencode_cmd import opencode
from nonoka.cli.ops_cmd import SESSION_COMMANDS, db
from nonoka.cli.ui_cmd import ui

T = TypeVar("T")


def _call(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a command's coroutine; a ``CliError`` becomes its message and exit code."""
    from nonoka.cli.common import AmbiguousSessionError, CliError
    from nonoka.cli.render import print_candidates
    from nonoka.cli.safe_text import shown
    from nonoka.errors import NonokaError, failure_of

    try:
        return asyncio.run(_stoppable(make))
    except (KeyboardInterrupt, asyncio.CancelledError):
        click.echo("\nnonoka: interrupted", err=True)
        raise SystemExit(130) from None
    except AmbiguousSessionError as exc:
        click.secho(f"nonoka: {shown(exc.message)}:", fg="red", err=True)
        print_candidates(exc.candidates)
        raise SystemExit(exc.exit_code) from None
    except CliError as exc:
        click.secho(f"nonoka: {shown(exc.message)}", fg="red", err=True)
        raise SystemExit(exc.exit_code) from None
    except NonokaError as exc:  # a store failing after it opened: one line, what to do
        click.secho(f"nonoka: {shown(failure_of(exc).message, one_line=True)}", fg="red",
                    err=True)
        raise SystemExit(1) from None


async def _stoppable(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run the command so that SIGTERM, like SIGINT, cancels it once: a turn in progress
    is saved as cancelled and its finish logged, whenever the signal comes."""
    from nonoka.signals import StopSignals

    task = asyncio.current_task()
    assert task is not None
    signals = StopSignals()
    cancelled = False

    def stop() -> None:
        nonlocal cancelled
        if not cancelled:  # a second signal must not interrupt the save the first began
            cancelled = True
            task.cancel()

    signals.install()
    signals.attach(asyncio.get_running_loop(), stop)
    try:
        return await make()
    finally:
        signals.uninstall()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="nonoka")
def cli() -> None:
    """nonoka: an agent runtime whose sessions survive process death.

    Every turn may run in a fresh process; the whole session lives in
    .nonoka/sessions.db in the project directory (the current directory).

    \b
    Start here:
      nonoka demo                 see it work, no API key needed
      nonoka run "hello"          one turn with your configured model
      nonoka run -c "and then?"   continue the latest session
      nonoka sessions list        what ran here, newest first
    """


@cli.command()
def bridge() -> None:
    """Serve the NDJSON bridge protocol on stdin/stdout (spawned by providers).

    Reads one JSON request per line and writes one JSON event per line; logs go to
    stderr. See docs/protocol.md.
    """
    from nonoka.bridge.server import main as bridge_main

    raise SystemExit(bridge_main([]))


@cli.command()
@click.argument("message")
@click.option("-c", "--continue", "continue_latest", is_flag=True,
              help="Continue the most recently active session of this project.")
@click.option("--session", "session_ref", metavar="ID",
              help="Continue this session (an unambiguous start of its id is enough).")
@click.option("--at", "at", type=click.IntRange(min=0), metavar="N",
              help="Run in a new branch of that session holding its first N entries "
                   "(see: nonoka sessions show ID).")
@click.option("--new", "new", is_flag=True, help="Start a new session (the default).")
@click.option("--model", metavar="PROVIDER:MODEL",
              help="The model for this turn, e.g. openai:gpt-4o-mini (overrides NONOKA_MODEL "
                   "and .nonoka/config.toml).")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object (session_id, output, usage, finish) at the end "
                   "instead of streaming.")
def run(message: str, continue_latest: bool, session_ref: str | None, at: int | None,
        new: bool, model: str | None, as_json: bool) -> None:
    """Send MESSAGE to the model and stream the answer (one turn, in this process).

    The model may read the project's files with built-in read-only tools (read a file,
    list a directory, search text); they never leave the project directory. The session
    id is printed on stderr so you can continue it. MESSAGE "-" reads it from stdin.

    \b
    The model comes from --model, else NONOKA_MODEL, else model = "..." in
    .nonoka/config.toml; OPENAI_BASE_URL and OPENAI_API_KEY select the endpoint.
    """
    from nonoka.cli.render import StreamPrinter, print_json
    from nonoka.cli.run_cmd import model_for, run_turn

    if sum((continue_latest, session_ref is not None, new)) > 1:
        raise click.UsageError("use only one of -c/--continue, --session and --new")
    if message == "-":
        message = sys.stdin.read()
    if not message.strip():
        raise click.UsageError("MESSAGE is empty")
    project = Path.cwd()
    printer = None if as_json else StreamPrinter()
    outcome = _call(lambda: run_turn(project, message, model_for(project, model),
                                     session_ref=session_ref, continue_latest=continue_latest,
                                     at=at,
                                     on_event=printer))
    if printer is None:
        print_json(outcome.as_json())
    else:
        printer.end_line()
        usage = outcome.usage
        click.secho(f"[session {outcome.session_id}] {usage.input_tokens} in / "
                    f"{usage.output_tokens} out tokens; continue with: nonoka run -c ... "
                    f"or --session {outcome.session_id[:8]}", dim=True, err=True)
        if outcome.error:
            from nonoka.cli.safe_text import shown

            click.secho(f"nonoka: {outcome.finish}: {shown(outcome.error)}", fg="red",
                        err=True)
    from nonoka.cli.ops_cmd import apply_retention

    apply_retention(project)
    if outcome.finish not in ("stop", "tool_calls"):
        raise SystemExit(1)


@cli.group()
def sessions() -> None:
    """Review, find, move and clean up the sessions of this project.

    The bridge's and `nonoka run`'s sessions alike. The `retention` setting of
    .nonoka/config.toml is applied here at most once a day (docs/operations.md).
    """
    from nonoka.cli.ops_cmd import apply_retention

    apply_retention(Path.cwd())


@sessions.command("list")
@click.option("-n", "--limit", default=20, show_default=True, type=click.IntRange(min=1),
              help="Show at most this many sessions.")
@click.option("--all", "include_titles", is_flag=True,
              help="Include title-generation sessions (hidden by default).")
@click.option("--tree", is_flag=True,
              help="Draw each conversation's branches under the session they forked from.")
@click.option("--json", "as_json", is_flag=True, help="Print the index rows as JSON.")
def list_command(limit: int, include_titles: bool, tree: bool, as_json: bool) -> None:
    """List sessions, most recently active first.

    Columns: short id, title, status, turns, tokens (in + out), cost, last activity.
    """
    from nonoka.cli.render import lineage_fields, print_json, print_sessions, print_tree
    from nonoka.cli.sessions_cmd import list_sessions

    project = Path.cwd()
    records = _call(lambda: list_sessions(project, limit=limit, include_titles=include_titles))
    if as_json:
        print_json([{**r.model_dump(mode="json"), **lineage_fields(r)} for r in records])
    elif not records:
        click.echo(f"no sessions in {project} yet; start one with: nonoka run \"hello\"")
    elif tree:
        print_tree(records)
    else:
        print_sessions(records)


@sessions.command("fork")
@click.argument("session_id", metavar="ID")
@click.option("--at", "at", type=click.IntRange(min=0), metavar="N",
              help="Keep the first N entries (default: all of them).")
def fork_command(session_id: str, at: int | None) -> None:
    """Branch a session: a new session sharing its first N entries; prints the new id.

    The original is left as it is. Continue the branch with: nonoka run --session NEW ...
    """
    from nonoka.cli.sessions_cmd import fork

    click.echo(_call(lambda: fork(Path.cwd(), session_id, at)))


@sessions.command("show")
@click.argument("session_id", metavar="ID")
@click.option("-n", "--limit", default=50, show_default=True, type=click.IntRange(min=1),
              help="Show at most this many of the latest timeline events.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the session, its events and the usage summary as JSON.")
def show_command(session_id: str, limit: int, as_json: bool) -> None:
    """Show one session: metadata, recent timeline and usage.

    ID may be the start of a session id, as long as only one session matches. The
    timeline lists requests, model calls with tokens and cost, tool calls and their
    results, warnings, recoveries, errors and how each request finished.
    """
    from nonoka.cli.render import print_detail, print_json
    from nonoka.cli.sessions_cmd import show_session

    detail = _call(lambda: show_session(Path.cwd(), session_id, limit=limit))
    if as_json:
        print_json(detail.as_json())
    else:
        print_detail(detail)


@cli.command()
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path),
              help="Project directory to use (default: a new temporary directory, kept so "
                   "you can look around afterwards).")
def demo(directory: Path | None) -> None:
    """Watch sessions survive process death, in a few seconds, with no API key.

    A built-in scripted model (a local OpenAI-compatible server) stands in for a real
    one; every turn is a real `nonoka bridge` process driven by the Python provider.
    It shows a tool the host runs, a bridge killed with SIGKILL mid-turn and the turn
    retried in a new process, and a lost session-id file recovered by conversation key,
    then prints `nonoka sessions list` and `sessions show`. Exits 1 if any check fails.
    """
    from nonoka.cli.demo import run_demo

    ok = _call(lambda: run_demo(directory, click.echo))
    raise SystemExit(0 if ok else 1)


for _command in SESSION_COMMANDS:
    sessions.add_command(_command)
cli.add_command(db)
cli.add_command(opencode)
cli.add_command(ui)
