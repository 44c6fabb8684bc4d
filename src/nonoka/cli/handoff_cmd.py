"""``nonoka sessions handoff``: a session moves to another coding agent, whole."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import click

from nonoka.cli.common import Place, find_session, has_database, no_database, open_stores
from nonoka.cli.damage import refuse_if_damaged
from nonoka.cli.options import call, place_options
from nonoka.cli.voice import CliError
from nonoka.errors import ConfigurationError


@click.command("handoff", short_help="Move a session to Claude Code, Codex or OpenCode, whole.")
@click.argument("session_id", metavar="ID")
@click.option("--to", "target", required=True, type=click.Choice(["claude", "codex", "opencode"]),
              help="The agent that goes on with the session.")
@click.option("--at", "at", type=click.IntRange(min=0), metavar="N",
              help="Hand off the first N entries (default: all of them).")
@click.option("--home", "home", metavar="DIR", type=click.Path(file_okay=False,
                                                               path_type=Path),
              help="The agent's own directory (default: CLAUDE_CONFIG_DIR or ~/.claude; "
                   "CODEX_HOME or ~/.codex); for OpenCode, where the export to import is "
                   "written (default: .nonoka/handoff in --cwd).")
@click.option("--cwd", "cwd", metavar="DIR", type=click.Path(file_okay=False, exists=True,
                                                             path_type=Path),
              help="Where the agent will run (default: the current directory).")
@click.option("--exec", "run", is_flag=True,
              help="Start the agent on the session instead of printing its command.")
@click.option("--json", "as_json", is_flag=True, help="Print what was made as JSON.")
@place_options
def handoff_command(session_id: str, target: str, at: int | None, home: Path | None,
                    cwd: Path | None, run: bool, as_json: bool, place: Place) -> None:
    """Hand session ID to another agent: a new branch of it, and the agent's own
    transcript of the whole conversation (texts, images, tool calls and results),
    never a summary.

    Point the agent at `nonoka serve` (ANTHROPIC_BASE_URL for Claude Code, the Codex
    provider's base_url; OpenCode at nonoka's provider, `nonoka opencode init`) and
    resume the printed session: its first request lands on the branch, which `nonoka
    sessions list --tree` shows under ID. System prompts are not carried (each agent
    sends its own); tool calls keep their names and arguments; reasoning goes only to
    the vendor that signed it.
    """
    from nonoka.cli.render import print_json, short_id
    from nonoka.handoff.move import TARGETS, hand_off, home_of

    spec = TARGETS[target]
    binary = shutil.which(spec.binary) if run else None
    if run and binary is None:
        raise CliError(f"`{spec.binary}` is not on PATH; install it, or leave out --exec "
                       "and run the printed command where it is", exit_code=2, code="usage_error")
    where = (cwd or Path.cwd()).resolve()
    agent_home = home or home_of(spec, dict(os.environ), Path.home(), where)
    if not has_database(place):
        raise no_database(place)
    refuse_if_damaged(place)

    async def go() -> object:
        async with open_stores(place) as stores:
            record = await find_session(stores.index, session_id)
            try:
                return await hand_off(stores, record.session_id, target, home=agent_home,
                                      cwd=where, at=at)
            except ConfigurationError as exc:
                raise CliError(str(exc), exit_code=2, code="usage_error") from None

    from nonoka.handoff.move import HandOff

    done = call(go)
    assert isinstance(done, HandOff)
    if as_json:
        print_json(done.as_json())
    else:
        click.echo(f"branch {short_id(done.branch)} of {short_id(done.source)} at entry "
                   f"{done.at}, for {target} session {done.agent_session}")
        click.echo(f"transcript: {done.transcript} ({done.carried} entries)")
        steps = [done.before, done.command] if done.before else [done.command]
        click.echo(f"run in {where}: {' && '.join(shlex.join(s) for s in steps)}")
    if run and binary is not None:
        os.chdir(where)
        if done.before:
            first = subprocess.run([binary, *done.before[1:]], check=False)
            if first.returncode != 0:
                raise CliError(f"`{shlex.join(done.before)}` failed (exit "
                               f"{first.returncode}); the branch and the export are made, "
                               "run it again")
        os.execv(binary, [binary, *done.command[1:]])
