"""``nonoka sessions search|export|import|delete|prune`` and ``nonoka db copy|check|vacuum|
stats``: each a thin layer over ``nonoka.ops``, with ``--json`` for programs.

Everything the commands need is imported inside them, so ``nonoka --help`` stays quick.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

import click

if TYPE_CHECKING:
    from nonoka.store.project import ProjectStores

T = TypeVar("T")
STATUSES = ("created", "running", "paused", "completed", "failed", "cancelled")


def _run(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run the command's coroutine; a nonoka error or a failed write is one red line."""
    from nonoka.cli.common import CliError
    from nonoka.errors import NonokaError, failure_of

    try:
        return asyncio.run(make())
    except CliError as exc:
        click.secho(f"nonoka: {exc.message}", fg="red", err=True)
        raise SystemExit(exc.exit_code) from None
    except NonokaError as exc:
        click.secho(f"nonoka: {failure_of(exc).message}", fg="red", err=True)
        raise SystemExit(1) from None
    except OSError as exc:
        click.secho(f"nonoka: {exc.strerror or exc}"
                    f"{f' ({exc.filename})' if exc.filename else ''}", fg="red", err=True)
        raise SystemExit(1) from None
    except KeyboardInterrupt:
        click.echo("\nnonoka: interrupted", err=True)
        raise SystemExit(130) from None


def _stores(project: Path, url: str | None = None, *, reading: bool = False
            ) -> ProjectStores:
    """The project's stores (or ``url``'s); ``reading``: for a command that only reads,
    so a database this process may not write is opened read-only."""
    from nonoka.cli.common import CliError, has_database, open_for_reading, open_stores
    from nonoka.errors import NonokaError, failure_of
    from nonoka.store.project import open_project_stores

    if url is None and not has_database(project):
        raise CliError(f"there are no sessions in {project} yet (no .nonoka/sessions.db)")
    if reading:
        return open_for_reading(project, url)
    if url is not None:
        try:
            return open_project_stores(project, url)
        except NonokaError as exc:
            raise CliError(failure_of(exc).message) from None
    return open_stores(project)


async def _ids(stores: ProjectStores, refs: tuple[str, ...]) -> list[str]:
    """Full session ids for ids or unambiguous prefixes (the index, then checkpoints)."""
    from nonoka.cli.common import CliError, find_session
    from nonoka.ops.backends import backend_for

    stored: list[str] | None = None
    out: list[str] = []
    for ref in refs:
        try:
            out.append((await find_session(stores.index, ref)).session_id)
            continue
        except CliError:
            if stored is None:
                stored = await backend_for(stores).session_ids()
            matches = [s for s in stored if s.startswith(ref.strip())]
            if len(matches) != 1 or not ref.strip():
                raise
            out.append(matches[0])
    return out


def _since(text: str | None) -> float | None:
    """``7d`` (an age) or ``2026-11-30`` / ``2026-11-30T12:00`` (a UTC time)."""
    if text is None:
        return None
    from datetime import UTC, datetime

    from nonoka.ops.prune import parse_age

    try:
        return time.time() - parse_age(text)
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(f"{text!r} is neither an age (7d, 12h) nor a date "
                                 "(2026-11-30)", param_hint="--since") from None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


def _statuses(values: tuple[str, ...]) -> tuple[str, ...]:
    out = tuple(s.strip() for v in values for s in v.split(",") if s.strip())
    unknown = sorted(set(out) - set(STATUSES))
    if unknown:
        raise click.BadParameter(f"unknown status {', '.join(unknown)}; use "
                                 f"{', '.join(STATUSES)}", param_hint="--status")
    return out


def _size(count: int) -> str:
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{count} B"


# -- sessions search ------------------------------------------------------------------------


@click.command("search")
@click.argument("text")
@click.option("--status", "status", multiple=True, metavar="STATUS[,STATUS]",
              help="Only sessions with this status (repeat or separate with commas).")
@click.option("--since", metavar="AGE|DATE", help="Only sessions active since: 7d, 12h or "
              "2026-11-30.")
@click.option("--model", metavar="MODEL", help="Only sessions of this model.")
@click.option("--session", "session", metavar="ID", help="Only this session's conversation "
              "(an id or unambiguous prefix; a branch's shared entries included).")
@click.option("-n", "--limit", default=20, show_default=True, type=click.IntRange(min=1),
              help="Show at most this many matches.")
@click.option("--all", "everything", is_flag=True, help="Search title-generation sessions "
              "too.")
@click.option("--json", "as_json", is_flag=True, help="Print the matches as JSON.")
def search_command(text: str, status: tuple[str, ...], since: str | None, model: str | None,
                   session: str | None, limit: int, everything: bool, as_json: bool) -> None:
    """Find TEXT in conversations, titles and tool calls, newest first.

    Every word of TEXT must occur (case-insensitive); punctuation and query syntax are
    ignored. Each match shows the session, the entry's position and a snippet with the
    matching words in [brackets]. An entry branches share with the session they were
    forked from is shown once, in that session, naming the branches that hold it too.
    """
    from dataclasses import replace

    from nonoka.cli.render import ago, clip, print_json, short_id
    from nonoka.ops.model import SearchQuery
    from nonoka.ops.search import search

    query = SearchQuery(text, _statuses(status), _since(since), model, limit, everything)

    async def go() -> list[Any]:
        async with _stores(Path.cwd(), reading=True) as stores:
            named = None if session is None else (await _ids(stores, (session,)))[0]
            return await search(stores, replace(query, session=named))

    hits = _run(go)
    if as_json:
        print_json([h.as_json() for h in hits])
        return
    if not hits:
        click.echo(f"no matches for {text!r}")
    for hit in hits:
        where = "title" if hit.position is None else f"#{hit.position} {hit.role}"
        when = ago(hit.last_active) if hit.last_active else ""
        click.echo(f"{short_id(hit.session_id)}  {where}  {clip(hit.title or '(untitled)', 40)}"
                   f"  {hit.status}  {when}".rstrip())
        snippet = hit.snippet
        if sys.stdout.isatty():
            snippet = snippet.replace("[", "\x1b[1;33m").replace("]", "\x1b[0m")
        click.echo(f"    {snippet}")
        if hit.shared_with:
            click.echo(f"    also in {len(hit.shared_with)} branch"
                       f"{'es' if len(hit.shared_with) > 1 else ''} sharing this entry: "
                       f"{', '.join(short_id(s) for s in hit.shared_with)}")


# -- sessions export / import ------------------------------------------------------------


@click.command("export")
@click.argument("refs", nargs=-1, metavar="ID...")
@click.option("--all", "everything", is_flag=True, help="Export every session.")
@click.option("--format", "fmt", type=click.Choice(["jsonl", "markdown"]), default="jsonl",
              show_default=True, help="jsonl: lossless, for import; markdown: for reading.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Write to this file (default: standard output).")
def export_command(refs: tuple[str, ...], everything: bool, fmt: str,
                   output: Path | None) -> None:
    """Export sessions (ids or unambiguous prefixes, or --all).

    JSONL keeps everything (snapshot, entries, step updates, events, index row, lineage)
    and is what `nonoka sessions import` and `nonoka db copy` read. Output is streamed,
    so a session of any length exports in constant memory. Written to a file, it appears
    only when complete.
    """
    from nonoka.ops.export import export_jsonl, export_markdown

    if everything == bool(refs):
        raise click.UsageError("give session ids, or --all")
    write = export_jsonl if fmt == "jsonl" else export_markdown

    def go(out: TextIO) -> Callable[[], Coroutine[Any, Any, int]]:
        async def export() -> int:
            async with _stores(Path.cwd(), reading=True) as stores:
                ids = None if everything else await _ids(stores, refs)
                return await write(stores, ids, out)
        return export

    if output is None:
        _run(go(sys.stdout))
        return
    if output.exists() and not output.is_file():  # a device or a pipe: written as it is
        with output.open("w", encoding="utf-8") as out:
            count = _run(go(out))
    else:
        partial = output.with_name(output.name + ".partial")
        try:
            with partial.open("w", encoding="utf-8") as out:
                count = _run(go(out))
            os.replace(partial, output)
        finally:
            partial.unlink(missing_ok=True)
    click.echo(f"exported {count} session(s) to {output}", err=True)


@click.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--on-conflict", type=click.Choice(["skip", "rename", "fail"]), default="skip",
              show_default=True, help="A session id that is already stored: skip it, import "
              "it under a new id, or import nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print what was imported as JSON.")
def import_command(file: Path, on_conflict: str, as_json: bool) -> None:
    """Import a JSONL export into this project's database.

    The whole file is checked first: a truncated or damaged file, or one written by a
    newer nonoka, imports nothing and says where it broke. A stored session is never
    overwritten.
    """
    from nonoka.cli.common import open_stores
    from nonoka.cli.render import print_json
    from nonoka.ops.importer import import_jsonl

    async def go() -> Any:
        async with open_stores(Path.cwd()) as stores:
            return await import_jsonl(stores, file, on_conflict)  # type: ignore[arg-type]

    report = _run(go)
    if as_json:
        print_json(report.as_json())
        return
    for sid in report.imported:
        click.echo(f"imported {sid}")
    for old, new in report.renamed.items():
        click.echo(f"imported {old} as {new} (the id was taken)")
    for sid in report.skipped:
        click.echo(f"skipped {sid} (already stored)")
    click.echo(f"{len(report.imported) + len(report.renamed)} imported, "
               f"{len(report.skipped)} skipped", err=True)


# -- sessions delete / prune ------------------------------------------------------------


def _print_removal(result: Any, as_json: bool) -> None:
    from nonoka.cli.render import print_json

    if as_json:
        print_json(result.as_json())
    else:
        verb = "would remove" if result.dry_run else "removed"
        for sid in result.removed:
            click.echo(f"{verb} {sid}")
        for sid in result.busy:
            click.echo(f"kept {sid}: a process is running it (its lease is live)", err=True)
        for sid in result.missing:
            click.echo(f"not found: {sid}", err=True)
        click.echo(f"{verb} {len(result.removed)} session(s), "
                   f"{_size(result.bytes_freed)} of session data", err=True)
    if result.busy or result.missing:
        raise SystemExit(1)


@click.command("delete")
@click.argument("refs", nargs=-1, required=True, metavar="ID...")
@click.option("--dry-run", is_flag=True, help="Show what would be removed; remove nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
def delete_command(refs: tuple[str, ...], dry_run: bool, as_json: bool) -> None:
    """Delete sessions (ids or unambiguous prefixes) with everything stored for them.

    A session a process is running (its lease is live) is kept and reported.
    """
    from nonoka.ops.prune import delete_sessions

    async def go() -> Any:
        async with _stores(Path.cwd()) as stores:
            return await delete_sessions(stores, await _ids(stores, refs), dry_run=dry_run)

    _print_removal(_run(go), as_json)


@click.command("prune")
@click.option("--older-than", required=True, metavar="AGE",
              help="Sessions inactive for longer than this: 30d, 12h, 2w.")
@click.option("--status", "status", multiple=True, metavar="STATUS[,STATUS]",
              help="Only these statuses (default: completed,failed,cancelled).")
@click.option("--keep-last", default=0, show_default=True, type=click.IntRange(min=0),
              help="Always keep this many of the most recently active sessions.")
@click.option("--dry-run", is_flag=True, help="Show what would be removed; remove nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
def prune_command(older_than: str, status: tuple[str, ...], keep_last: int, dry_run: bool,
                  as_json: bool) -> None:
    """Delete old sessions, one at a time (a concurrent writer waits milliseconds).

    Sessions a process is running are kept. `retention` in .nonoka/config.toml does the
    same automatically, at most once a day (docs/operations.md).
    """
    from nonoka.ops.prune import TERMINAL, parse_age, prune

    try:
        age = parse_age(older_than)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--older-than") from None
    statuses = _statuses(status) or TERMINAL

    async def go() -> Any:
        async with _stores(Path.cwd()) as stores:
            return await prune(stores, older_than=age, statuses=statuses,
                               keep_last=keep_last, dry_run=dry_run)

    _print_removal(_run(go), as_json)


SESSION_COMMANDS = (search_command, export_command, import_command, delete_command,
                    prune_command)


# -- nonoka db -------------------------------------------------------------------------------


@click.group()
def db() -> None:
    """Look after the project's database: copy, check, vacuum, stats."""


@db.command("copy")
@click.option("--to", "to_url", required=True, metavar="URL",
              help="The destination: a file path, sqlite:///path.db or postgresql://...")
@click.option("--from", "from_url", metavar="URL",
              help="The source (default: this project's database).")
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
def copy_command(to_url: str, from_url: str | None, as_json: bool) -> None:
    """Copy every session to another database, verified and resumable.

    Each session is copied under its lease (a running one is left for the next run) and
    its digest compared on both sides. Run it again after an interruption: sessions
    already copied are skipped.
    """
    from nonoka.cli.render import print_json
    from nonoka.ops.copy import copy_database

    async def go() -> Any:
        project = Path.cwd()
        async with _stores(project, from_url) as source, _stores(project, to_url) as target:
            return await copy_database(source, target)

    report = _run(go)
    if as_json:
        print_json(report.as_json())
    else:
        click.echo(f"copied {len(report.copied)} session(s); {len(report.already)} were "
                   f"already there; source {report.source_sessions}, destination "
                   f"{report.target_sessions} session(s)")
        for name in ("busy", "conflicts", "mismatched"):
            for sid in getattr(report, name):
                click.echo(f"{name}: {sid}", err=True)
        click.echo("verified: every copied session has the same digest on both sides"
                   if report.ok else "NOT complete: run it again once the sessions above are "
                   "free, or resolve the conflicts", err=True)
    if not report.ok:
        raise SystemExit(1)


@db.command("check")
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON.")
def check_command(as_json: bool) -> None:
    """Check the database: integrity, orphan rows, index rows without checkpoints,
    checkpoints whose entry count disagrees, the search index. Exit 1 on an error."""
    from nonoka.cli.render import print_json
    from nonoka.ops.maintenance import check

    async def go() -> Any:
        async with _stores(Path.cwd(), reading=True) as stores:
            return await check(stores)

    findings = _run(go)
    if as_json:
        print_json([{"level": f.level, "kind": f.kind, "message": f.message,
                     "session_id": f.session_id} for f in findings])
    else:
        for f in findings:
            click.echo(f"{f.level}: {f.kind}: {f.message}"
                       f"{f' (session {f.session_id})' if f.session_id else ''}")
        if not findings:
            click.echo("ok: no problems found")
    if any(f.level == "error" for f in findings):
        raise SystemExit(1)


@db.command("vacuum")
@click.option("--json", "as_json", is_flag=True, help="Print the sizes as JSON.")
def vacuum_command(as_json: bool) -> None:
    """Give free space back: SQLite VACUUM (writers wait meanwhile), PostgreSQL
    VACUUM (ANALYZE) of nonoka's tables."""
    from nonoka.cli.render import print_json
    from nonoka.ops.maintenance import vacuum

    async def go() -> tuple[int, int]:
        async with _stores(Path.cwd()) as stores:
            return await vacuum(stores)

    before, after = _run(go)
    if as_json:
        print_json({"bytes_before": before, "bytes_after": after})
    else:
        click.echo(f"{_size(before)} -> {_size(after)} ({_size(max(0, before - after))} freed)")


@db.command("stats")
@click.option("-n", "--largest", default=10, show_default=True, type=click.IntRange(min=0),
              help="List this many of the largest sessions.")
@click.option("--json", "as_json", is_flag=True, help="Print the statistics as JSON.")
def stats_command(largest: int, as_json: bool) -> None:
    """Sessions, entries, events, files, bytes by table, and the largest sessions."""
    from nonoka.cli.render import print_json
    from nonoka.ops.maintenance import stats

    async def go() -> Any:
        async with _stores(Path.cwd(), reading=True) as stores:
            return await stats(stores, largest)

    result = _run(go)
    if as_json:
        print_json(result.as_json())
        return
    click.echo(f"engine    {result.engine}\nsessions  {result.sessions}\n"
               f"entries   {result.entries}\nevents    {result.events}\n"
               f"files     {result.media} ({_size(result.media_bytes)}, each stored once)\n"
               "\nbytes by table")
    for name, size in result.bytes_by_table.items():
        click.echo(f"  {name.ljust(20)} {_size(size).rjust(10)}")
    if result.largest:
        click.echo("\nlargest sessions")
        for sid, entries, size in result.largest:
            click.echo(f"  {sid}  {entries:>7} entries  {_size(size).rjust(10)}")


def apply_retention(project: Path) -> None:
    """The ``retention`` setting, at most once a day (one ``stat`` otherwise); a problem
    is a warning on stderr, never a failed command."""
    from nonoka.cli.common import can_write
    from nonoka.ops.retention import due

    if not due(project) or not (project / ".nonoka").is_dir() or not can_write(project):
        return
    from nonoka.errors import NonokaError, failure_of
    from nonoka.ops.retention import maybe_apply

    try:
        removed = asyncio.run(maybe_apply(project))
    except NonokaError as exc:
        click.secho(f"nonoka: retention: {failure_of(exc).message}", fg="yellow", err=True)
        return
    if removed:
        click.echo(f"nonoka: retention removed {len(removed)} old session(s)", err=True)
