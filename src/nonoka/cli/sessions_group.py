"""``nonoka sessions``: the group, and the commands that read sessions one way or another
(``list``, ``show``, ``search``) or branch one (``fork``); the ones that move and remove
sessions are in ``ops_cmd``."""

from __future__ import annotations

import sys
from typing import Any

import click

from nonoka.cli.common import Place
from nonoka.cli.handoff_cmd import handoff_command
from nonoka.cli.ops_cmd import (
    SESSION_COMMANDS,
    apply_retention,
    ids_of,
    since,
    statuses,
    stores_at,
)
from nonoka.cli.options import call, place_options


@click.group(short_help="Review, find, move and clean up this project's sessions.")
def sessions() -> None:
    """Review, find, move and clean up the sessions of this project.

    The bridge's and `nonoka run`'s sessions alike. The `retention` setting of
    .nonoka/config.toml is applied here at most once a day (`nonoka help retention`).
    """


@sessions.command("list", short_help="List sessions, most recently active first.")
@click.option("-n", "--limit", default=20, show_default=True, metavar="N",
              type=click.IntRange(min=1),
              help="Show at most this many sessions.")
@click.option("--all", "include_titles", is_flag=True,
              help="Include title-generation sessions (hidden by default).")
@click.option("--tree", is_flag=True,
              help="Draw each conversation's branches under the session they forked from.")
@click.option("--json", "as_json", is_flag=True, help="Print the index rows as JSON.")
@place_options
def list_command(limit: int, include_titles: bool, tree: bool, as_json: bool,
                 place: Place) -> None:
    """List sessions, most recently active first.

    Columns: short id, title, status, turns, tokens (in + out), cost, last activity.
    The status is what the session is doing now: running (a process runs a turn),
    interrupted (one died mid-turn), else how its last turn ended (`nonoka help
    statuses`).
    """
    from nonoka.cli.render import lineage_fields, print_json, print_sessions, print_tree
    from nonoka.cli.sessions_cmd import list_sessions

    apply_retention(place)
    listed = call(lambda: list_sessions(place, limit=limit, include_titles=include_titles))
    records = [record for record, _ in listed]
    if as_json:
        print_json([{**r.model_dump(mode="json"), **lineage_fields(r), "holder": live.as_json()}
                    for r, live in listed])
    elif not records:
        click.echo(f"no sessions in {place.project} yet; start one with: nonoka run \"hello\"")
    elif tree:
        print_tree(records)
    else:
        print_sessions(records)


@sessions.command("show", short_help="Show one session: metadata, timeline, usage.")
@click.argument("session_id", metavar="ID")
@click.option("-n", "--limit", default=50, show_default=True, metavar="N",
              type=click.IntRange(min=1),
              help="Show at most this many of the latest timeline events.")
@click.option("--entries", is_flag=True,
              help="List the conversation too, each entry with its position (for --at).")
@click.option("--json", "as_json", is_flag=True,
              help="Print the session, its events and the usage summary as JSON.")
@place_options
def show_command(session_id: str, limit: int, entries: bool, as_json: bool,
                 place: Place) -> None:
    """Show one session: metadata, recent timeline and usage.

    ID may be the start of a session id, as long as only one session matches. The
    timeline lists requests, model calls with tokens and cost, tool calls and their
    results, warnings, recoveries, errors and how each request finished.
    """
    from nonoka.cli.render import print_detail, print_json
    from nonoka.cli.sessions_cmd import show_session

    apply_retention(place)
    detail = call(lambda: show_session(place, session_id, limit=limit, entries=entries))
    if as_json:
        print_json(detail.as_json())
    else:
        print_detail(detail)


@sessions.command("fork", short_help="Branch a session at entry N; prints the new id.")
@click.argument("session_id", metavar="ID")
@click.option("--at", "at", type=click.IntRange(min=0), metavar="N",
              help="Keep the first N entries (default: all of them).")
@place_options
def fork_command(session_id: str, at: int | None, place: Place) -> None:
    """Branch a session: a new session sharing its first N entries; prints the new id.

    The original is left as it is. Continue the branch with: nonoka run --session NEW ...
    """
    from nonoka.cli.sessions_cmd import fork

    apply_retention(place)
    click.echo(call(lambda: fork(place, session_id, at)))


@sessions.command("search", short_help="Find text in conversations, titles, tool calls.")
@click.argument("text")
@click.option("--status", "status", multiple=True, metavar="STATUS[,STATUS]",
              help="Only sessions with this status (repeat or separate with commas).")
@click.option("--since", "since_text", metavar="AGE|DATE",
              help="Only sessions active since: 7d, 12h or 2026-11-30.")
@click.option("--model", metavar="MODEL", help="Only sessions of this model.")
@click.option("--session", "session", metavar="ID", help="Only this session's conversation "
              "(an id or unambiguous prefix; a branch's shared entries included).")
@click.option("-n", "--limit", default=20, show_default=True, metavar="N",
              type=click.IntRange(min=1),
              help="Show at most this many matches.")
@click.option("--all", "everything", is_flag=True, help="Search title-generation sessions "
              "too.")
@click.option("--json", "as_json", is_flag=True, help="Print the matches as JSON.")
@place_options
def search_command(text: str, status: tuple[str, ...], since_text: str | None,
                   model: str | None, session: str | None, limit: int, everything: bool,
                   as_json: bool, place: Place) -> None:
    """Find TEXT in conversations, titles and tool calls, newest first.

    Every word of TEXT must occur (case-insensitive); punctuation and query syntax are
    ignored. Each match shows the session, the entry's position and a snippet with the
    matching words in [brackets]. An entry branches share with the session they were
    forked from is shown once, in that session, naming the branches that hold it too.
    """
    from dataclasses import replace

    from nonoka.cli.render import ago, clip, print_json, short_id
    from nonoka.cli.safe_text import highlighted, printable
    from nonoka.ops.model import SearchQuery
    from nonoka.ops.search import search

    query = SearchQuery(text, statuses(status), since(since_text), model, limit, everything)
    apply_retention(place)

    async def go() -> list[Any]:
        async with stores_at(place, reading=True) as stores:
            named = None if session is None else (await ids_of(stores, (session,)))[0]
            return await search(stores, replace(query, session=named))

    hits = call(go)
    if as_json:
        print_json([h.as_json() for h in hits])
        return
    if not hits:
        click.echo(f"no matches for {printable(repr(text), one_line=True)}")
    for hit in hits:
        where = "title" if hit.position is None else f"#{hit.position} {hit.role}"
        when_text = ago(hit.last_active) if hit.last_active else ""
        click.echo(printable(f"{short_id(hit.session_id)}  {where}  ", one_line=True)
                   + clip(hit.title or "(untitled)", 40)
                   + printable(f"  {hit.status}  {when_text}".rstrip(), one_line=True))
        click.echo(f"    {highlighted(hit.snippet, hit.marks, sys.stdout.isatty())}")
        if hit.shared_with:
            click.echo(f"    also in {len(hit.shared_with)} branch"
                       f"{'es' if len(hit.shared_with) > 1 else ''} sharing this entry: "
                       f"{', '.join(short_id(s) for s in hit.shared_with)}")


for _command in SESSION_COMMANDS:
    sessions.add_command(_command)
sessions.add_command(handoff_command)
