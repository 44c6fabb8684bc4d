"""The click command group: one small function per command over a library call.

``bridge`` is normally dispatched before click is imported (``cli/main.py``); the entry
here is for ``nonoka bridge --help`` and completeness. Everything a command needs is
imported inside it, so ``nonoka --help`` stays quick. Failures are raised, never printed
here: ``voice.VoicedGroup`` reports every one of them the same way.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from nonoka import __version__
from nonoka.cli.common import Place
from nonoka.cli.db_cmd import db
from nonoka.cli.opencode_cmd import opencode
from nonoka.cli.options import call, place_options
from nonoka.cli.serve_cmd import serve
from nonoka.cli.sessions_group import sessions
from nonoka.cli.ui_cmd import ui
from nonoka.cli.voice import VoicedGroup
from nonoka.llm.wire import BASE_URL_VARIABLE, provider_lines


@click.group(cls=VoicedGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="nonoka")
def cli() -> None:
    """nonoka: an agent runtime whose sessions survive process death.

    Every turn may run in a fresh process; the whole session lives in
    .nonoka/sessions.db in the project directory (the current directory, or --dir;
    NONOKA_DATABASE_URL or --db names another database).

    \b
    Start here:
      nonoka demo                 see it work, no API key needed
      nonoka run "hello"          one turn with your configured model
      nonoka run -c "and then?"   continue the latest session
      nonoka sessions list        what ran here, newest first
      nonoka help                 reference topics: models, database, exit codes
    """


@cli.command(short_help="Serve the bridge protocol on stdin/stdout (for hosts).")
def bridge() -> None:
    """Serve the NDJSON bridge protocol on stdin/stdout (spawned by providers).

    Reads one JSON request per line and writes one JSON event per line; logs go to
    stderr. The project is each request's cwd; NONOKA_DATABASE_URL names another
    database. `nonoka help protocol` says where the frames' JSON Schema is.
    """
    from nonoka.bridge.server import main as bridge_main

    raise SystemExit(bridge_main([]))


RUN_HELP = "\n".join([
    "Send MESSAGE to the model and stream the answer (one turn, in this process).",
    "",
    "The model may read the project's files with built-in read-only tools (read a file, "
    "list a directory, search text); they never leave the project directory. The session "
    "id is printed on stderr so you can continue it. MESSAGE \"-\" reads it from stdin.",
    "",
    "\b",
    "The model comes from --model, else NONOKA_MODEL, else model = \"...\" in",
    ".nonoka/config.toml. Providers and the variables each reads:",
    *(f"  {line}" for line in provider_lines()),
    f"{BASE_URL_VARIABLE} points any of them at another OpenAI-compatible endpoint.",
])


@cli.command(help=RUN_HELP, short_help="Send a message to the model: one turn, streamed.")
@click.argument("message")
@click.option("-c", "--continue", "continue_latest", is_flag=True,
              help="Continue the most recently active session of this project (after a "
                   "turn that failed, MESSAGE replaces its unanswered message).")
@click.option("--session", "session_ref", metavar="ID",
              help="Continue this session (an unambiguous start of its id is enough).")
@click.option("--at", "at", type=click.IntRange(min=0), metavar="N",
              help="Run in a new branch of that session holding its first N entries "
                   "(positions: nonoka sessions show ID --entries).")
@click.option("--new", "new", is_flag=True, help="Start a new session (the default).")
@click.option("--model", metavar="PROVIDER:MODEL",
              help="The model for this turn, e.g. openai:gpt-4o-mini (overrides NONOKA_MODEL "
                   "and .nonoka/config.toml).")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object (session_id, output, usage, finish, error) at the "
                   "end instead of streaming.")
@place_options
def run(message: str, continue_latest: bool, session_ref: str | None, at: int | None,
        new: bool, model: str | None, as_json: bool, place: Place) -> None:
    from nonoka.cli.render import StreamPrinter, print_json
    from nonoka.cli.run_cmd import model_for, run_turn

    if sum((continue_latest, session_ref is not None, new)) > 1:
        raise click.UsageError("use only one of -c/--continue, --session and --new")
    if at is not None and session_ref is None and not continue_latest:
        raise click.UsageError("--at needs the session to branch: add --session ID or -c")
    if message == "-":
        message = sys.stdin.read()
    if not message.strip():
        raise click.UsageError("MESSAGE is empty")
    printer = None if as_json else StreamPrinter()
    chosen = model_for(place.project, model)
    outcome = call(lambda: run_turn(place, message, chosen, session_ref=session_ref,
                                    continue_latest=continue_latest, at=at,
                                    on_event=printer))
    if printer is None:
        print_json(outcome.as_json())
    else:
        printer.end_line()
        usage = outcome.usage
        click.secho(f"[session {outcome.session_id}] {usage.input_tokens} in / "
                    f"{usage.output_tokens} out tokens; continue with: nonoka run -c ... "
                    f"or --session {outcome.session_id[:8]}", dim=True, err=True)
        if outcome.error is not None:
            from nonoka.cli.safe_text import shown

            click.secho(f"nonoka: {shown(' '.join(outcome.error.message.split()), one_line=True)}",
                        fg="red", err=True)
    from nonoka.cli.ops_cmd import apply_retention

    apply_retention(place)
    if outcome.error is not None:
        raise SystemExit(outcome.error.exit_code)


@cli.command(short_help="Watch sessions survive process death (no API key needed).")
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path),
              metavar="DIR",
              help="Project directory to use (default: a new temporary directory, kept so "
                   "you can look around afterwards).")
def demo(directory: Path | None) -> None:
    """Watch sessions survive process death, in a few seconds, with no API key.

    A built-in scripted model (a local OpenAI-compatible server) stands in for a real
    one; every turn is a real `nonoka bridge` process driven by the Python provider.
    It shows a tool the host runs, a bridge killed with SIGKILL mid-turn and the turn
    retried in a new process, and a lost session-id file recovered by conversation key,
    then prints `nonoka sessions list` and `sessions show`. Exits 1 if any check fails.
    The demo keeps its own database in DIR (NONOKA_DATABASE_URL is not used).
    """
    from nonoka.cli.demo import run_demo

    ok = call(lambda: run_demo(directory, click.echo))
    raise SystemExit(0 if ok else 1)


@cli.command("help", short_help="Read a reference topic: models, database, exit codes.")
@click.argument("topic", required=False, metavar="[TOPIC]")
@click.pass_context
def help_command(ctx: click.Context, topic: str | None) -> None:
    """Print a topic of nonoka's reference (the list, without TOPIC).

    The text ships with every installation: no clone of the repository is needed.
    """
    from nonoka.cli.topics import topic_list, topic_text

    if topic is None:
        click.echo(f"Topics (nonoka help TOPIC):\n{topic_list()}\n\n"
                   "Each command's own help: nonoka COMMAND --help")
        return
    text = topic_text(topic.strip().lower())
    if text is None:
        raise click.UsageError(f"no help topic {topic!r}; the topics are: "
                               + ", ".join(_topic_names()), ctx=ctx)
    click.echo(text)


def _topic_names() -> list[str]:
    from nonoka.cli.topics import TOPICS

    return list(TOPICS)


cli.add_command(sessions)
cli.add_command(db)
cli.add_command(opencode)
cli.add_command(ui)
cli.add_command(serve)
