"""``nonoka sessions export|import|delete|prune``: each a thin layer over ``nonoka.ops``,
with ``--json`` for programs, and what the session and ``db`` commands share (opening a
place's stores, ids from prefixes, ages and statuses, sizes, the retention setting).

Everything the commands need is imported inside them, so ``nonoka --help`` stays quick.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from nonoka.cli.common import Place
from nonoka.cli.options import call, place_options
from nonoka.cli.voice import CliError

if TYPE_CHECKING:
    from nonoka.store.project import ProjectStores

STATUSES = ("created", "running", "paused", "completed", "failed", "cancelled")


def stores_at(place: Place, *, reading: bool = False) -> ProjectStores:
    """The place's stores; ``reading``: for a command that only reads, so a database this
    process may not write is opened read-only. A command that writes is refused a
    damaged database (``damage``)."""
    from nonoka.cli.common import has_database, no_database, open_for_reading, open_stores
    from nonoka.cli.damage import refuse_if_damaged

    if not has_database(place):
        raise no_database(place)
    if reading:
        return open_for_reading(place)
    refuse_if_damaged(place)
    return open_stores(place)


async def ids_of(stores: ProjectStores, refs: tuple[str, ...]) -> list[str]:
    """Full session ids for ids or unambiguous prefixes (the index, then checkpoints)."""
    from nonoka.cli.common import find_session
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


def since(text: str | None) -> float | None:
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


def statuses(values: tuple[str, ...]) -> tuple[str, ...]:
    """``--status`` values, repeated or comma-separated, each a stored status."""
    out = tuple(s.strip() for v in values for s in v.split(",") if s.strip())
    unknown = sorted(set(out) - set(STATUSES))
    if unknown:
        raise click.BadParameter(f"unknown status {', '.join(unknown)}; use "
                                 f"{', '.join(STATUSES)}", param_hint="--status")
    return out


def size(count: int) -> str:
    """Bytes for people: ``12 B``, ``3.4 MiB``."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{count} B"


# -- sessions export / import ------------------------------------------------------------


@click.command("export", short_help="Export sessions as JSONL (lossless) or markdown.")
@click.argument("refs", nargs=-1, metavar="[ID]...")
@click.option("--all", "everything", is_flag=True, help="Export every session (instead of "
              "naming them).")
@click.option("--format", "fmt", type=click.Choice(["jsonl", "markdown"]), default="jsonl",
              show_default=True, help="jsonl: lossless, for import (the stored text, as "
              "private as the database); markdown: for reading and sharing (credentials "
              "masked).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Write to this file (default: standard output).")
@place_options
def export_command(refs: tuple[str, ...], everything: bool, fmt: str,
                   output: Path | None, place: Place) -> None:
    """Export the sessions named by ID (ids or unambiguous prefixes), or --all of them.

    JSONL keeps everything (snapshot, entries, step updates, events, index row, lineage)
    as stored, credentials in a message included, and is what `nonoka sessions import`
    and `nonoka db copy` read. Markdown masks credentials and escapes control
    characters. Output is streamed, so a session of any length exports in constant
    memory. Written to a file, it appears only when complete.
    """
    from nonoka.ops.export import export_jsonl, export_markdown

    if everything == bool(refs):
        raise click.UsageError("name the sessions to export (IDs), or give --all")
    apply_retention(place)
    write = export_jsonl if fmt == "jsonl" else export_markdown

    def go(target: Path | None) -> Callable[[], Coroutine[Any, Any, int]]:
        async def export() -> int:
            async with stores_at(place, reading=True) as stores:
                ids = None if everything else await ids_of(stores, refs)
                if target is None:
                    return await write(stores, ids, sys.stdout)
                try:  # closing writes the last buffered lines: it can fail too
                    with target.open("w", encoding="utf-8") as out:
                        return await write(stores, ids, out)
                except OSError as exc:
                    raise CliError(f"writing {output} failed: {exc.strerror or exc}; it was "
                                   "not written (free some space, or give another path "
                                   "with -o)") from None
        return export

    if output is None:
        call(go(None))
        return
    if output.exists() and not output.is_file():  # a device or a pipe: written as it is
        count = call(go(output))
    else:
        partial = output.with_name(output.name + ".partial")
        try:
            count = call(go(partial))
            os.replace(partial, output)
        except OSError as exc:
            raise CliError(f"{output} could not be put in place: {exc.strerror or exc}; "
                           "nothing was written there") from None
        finally:
            partial.unlink(missing_ok=True)
    click.echo(f"exported {count} session(s) to {output}", err=True)


@click.command("import", short_help="Import a JSONL export into this database.")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--on-conflict", type=click.Choice(["skip", "rename", "fail"]), default="skip",
              show_default=True, help="A session id that is already stored: skip it, import "
              "it under a new id, or import nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print what was imported as JSON.")
@place_options
def import_command(file: Path, on_conflict: str, as_json: bool, place: Place) -> None:
    """Import a JSONL export into this project's database.

    The whole file is checked first: a truncated or damaged file, or one written by a
    newer nonoka, imports nothing and says where it broke. A stored session is never
    overwritten.
    """
    from nonoka.cli.common import open_stores
    from nonoka.cli.damage import refuse_if_damaged
    from nonoka.cli.render import print_json
    from nonoka.errors import failure_of
    from nonoka.ops.importer import ImportInterruptedError, ImportReport, import_jsonl

    apply_retention(place)

    async def go() -> ImportReport | ImportInterruptedError:
        refuse_if_damaged(place)
        async with open_stores(place) as stores:
            try:
                return await import_jsonl(stores, file, on_conflict)  # type: ignore[arg-type]
            except ImportInterruptedError as exc:  # what was stored before it is reported
                return exc

    outcome = call(go)
    report = outcome.report if isinstance(outcome, ImportInterruptedError) else outcome
    error = failure_of(outcome).message if isinstance(outcome, ImportInterruptedError) else None
    if as_json:
        print_json({**report.as_json(), **({"error": error} if error else {})})
        if error:
            click.echo(f"nonoka: {error}", err=True)
            raise SystemExit(1)  # the report above carries the error too
        return
    for sid in report.imported:
        click.echo(f"imported {sid}")
    for old, new in report.renamed.items():
        click.echo(f"imported {old} as {new} (the id was taken)")
    for sid in report.skipped:
        click.echo(f"skipped {sid} (already stored)")
    click.echo(f"{len(report.imported) + len(report.renamed)} imported, "
               f"{len(report.skipped)} skipped", err=True)
    if error:
        raise CliError(error)


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
                   f"{size(result.bytes_freed)} of session data", err=True)
    if result.busy or result.missing:
        from nonoka.cli.voice import EXIT_BUSY

        raise SystemExit(EXIT_BUSY if result.busy and not result.missing else 1)


@click.command("delete", short_help="Delete sessions with everything stored for them.")
@click.argument("refs", nargs=-1, required=True, metavar="ID...")
@click.option("--dry-run", is_flag=True, help="Show what would be removed; remove nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
@place_options
def delete_command(refs: tuple[str, ...], dry_run: bool, as_json: bool, place: Place) -> None:
    """Delete sessions (ids or unambiguous prefixes) with everything stored for them.

    A session a process is running (its lease is live) is kept and reported (exit 75:
    try again when it has finished).
    """
    from nonoka.ops.prune import delete_sessions

    apply_retention(place)

    async def go() -> Any:
        async with stores_at(place) as stores:
            return await delete_sessions(stores, await ids_of(stores, refs), dry_run=dry_run)

    _print_removal(call(go), as_json)


@click.command("prune", short_help="Delete sessions inactive for longer than an age.")
@click.option("--older-than", required=True, metavar="AGE",
              help="Sessions inactive for longer than this: 30d, 12h, 2w.")
@click.option("--status", "status", multiple=True, metavar="STATUS[,STATUS]",
              help="Only these statuses (default: completed,failed,cancelled).")
@click.option("--keep-last", default=0, show_default=True, type=click.IntRange(min=0),
              help="Always keep this many of the most recently active sessions.")
@click.option("--dry-run", is_flag=True, help="Show what would be removed; remove nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
@place_options
def prune_command(older_than: str, status: tuple[str, ...], keep_last: int, dry_run: bool,
                  as_json: bool, place: Place) -> None:
    """Delete old sessions, one at a time (a concurrent writer waits milliseconds).

    Sessions a process is running are kept. `retention` in .nonoka/config.toml does the
    same automatically, at most once a day (`nonoka help retention`).
    """
    from nonoka.ops.prune import TERMINAL, parse_age, prune

    try:
        age = parse_age(older_than)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--older-than") from None
    chosen = statuses(status) or TERMINAL

    async def go() -> Any:
        async with stores_at(place) as stores:
            return await prune(stores, older_than=age, statuses=chosen,
                               keep_last=keep_last, dry_run=dry_run)

    _print_removal(call(go), as_json)


SESSION_COMMANDS = (export_command, import_command, delete_command, prune_command)


def apply_retention(where: Place | Path) -> None:
    """The ``retention`` setting, at most once a day (one ``stat`` otherwise); a problem
    is a warning on stderr, never a failed command. It applies to the project's own
    database: not when ``--db`` names another one, nor to a damaged one."""
    from nonoka.cli.common import can_write
    from nonoka.ops.retention import due

    place = Place.of(where)
    project = place.project
    state = project / ".nonoka"
    if place.named_by or not due(project) or os.path.islink(state) or not state.is_dir() \
            or not can_write(place):
        return  # a linked .nonoka is refused by the command itself, in one line
    from nonoka.cli.damage import refuse_if_damaged
    from nonoka.errors import NonokaError, failure_of
    from nonoka.ops.retention import maybe_apply, read_retention

    try:
        if read_retention(project) is None:
            return  # nothing configured: nothing to check or write
        refuse_if_damaged(place)
        removed = asyncio.run(maybe_apply(project))
    except CliError as exc:
        click.secho(f"nonoka: retention skipped: {exc.message.split(';')[0]}", fg="yellow",
                    err=True)
        return
    except NonokaError as exc:
        click.secho(f"nonoka: retention: {failure_of(exc).message}", fg="yellow", err=True)
        return
    if removed:
        click.echo(f"nonoka: retention removed {len(removed)} old session(s)", err=True)
