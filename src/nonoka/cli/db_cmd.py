"""``nonoka db copy|check|vacuum|stats``: look after a project's database.

Each reports in its engine's own terms: a SQLite file shrinks, PostgreSQL keeps freed
space for reuse and says which tables it vacuumed and how large they are now.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from nonoka.cli.common import Place
from nonoka.cli.ops_cmd import size, stores_at
from nonoka.cli.options import call, place_options


@click.group(short_help="Look after the database: copy, check, vacuum, stats.")
def db() -> None:
    """Look after the project's database: copy, check, vacuum, stats."""


@db.command("copy", short_help="Copy every session (and uploaded file) to another "
                                "database, verified.")
@click.option("--to", "to_url", required=True, metavar="URL",
              help="The destination: a file path, sqlite:///path.db or postgresql://...")
@click.option("--from", "--db", "from_url", metavar="URL",
              help="The source (default: NONOKA_DATABASE_URL, else .nonoka/sessions.db in "
                   "the project).")
@click.option("--dir", "directory", metavar="DIR",
              type=click.Path(file_okay=False, path_type=Path),
              help="The project directory (default: the current directory).")
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
def copy_command(to_url: str, from_url: str | None, directory: Path | None,
                 as_json: bool) -> None:
    """Copy every session to another database, verified and resumable.

    Each session is copied under its lease (a running one is left for the next run) and
    its digest compared on both sides; the files uploaded to `nonoka serve`'s Files API
    go too, under the same ids. Run it again after an interruption: sessions
    already copied are skipped. A damaged destination is refused.
    """
    from nonoka.cli.render import print_json
    from nonoka.ops.copy import copy_database

    source = Place.here(directory, from_url, option="--from")
    target = Place.here(directory, to_url, option="--to")

    async def go() -> Any:
        async with stores_at(source) as given:
            await _reach(source, given)
            async with stores_at_target(target) as taken:
                await _reach(target, taken)
                return await copy_database(given, taken)

    report = call(go)
    if as_json:
        print_json(report.as_json())
    else:
        click.echo(f"copied {len(report.copied)} session(s); {len(report.already)} were "
                   f"already there; source {report.source_sessions}, destination "
                   f"{report.target_sessions} session(s)")
        for name in ("busy", "conflicts", "mismatched"):
            for sid in getattr(report, name):
                click.echo(f"{name}: {sid}", err=True)
        files = report.files
        click.echo(f"copied {len(files.copied)} uploaded file(s); {len(files.already)} were "
                   f"already there; source {files.source_files} file(s)")
        for name in ("conflicts", "mismatched"):
            for file_id in getattr(files, name):
                click.echo(f"{name}: {file_id}", err=True)
        for sid, reason in report.damaged.items():
            click.echo(f"damaged: {sid}: {reason}", err=True)
        click.echo("verified: every copied session has the same digest on both sides"
                   if report.ok else "NOT complete: run it again once the sessions above are "
                   "free, or resolve the conflicts and damaged rows (`nonoka db check`)",
                   err=True)
    if not report.ok:
        from nonoka.cli.voice import EXIT_BUSY

        raise SystemExit(EXIT_BUSY if report.busy and not (report.conflicts or
                                                          report.mismatched) else 1)


async def _reach(place: Place, stores: Any) -> None:
    """Read from the database once, so that one that cannot be reached is blamed on the
    option (``--from``, ``--to``) or variable that named it."""
    from nonoka.cli.common import failed_at
    from nonoka.errors import NonokaError

    try:
        await stores.index.list_sessions(limit=1)
    except NonokaError as exc:
        raise failed_at(place, exc) from None


def stores_at_target(place: Place) -> Any:
    """The destination's stores, created if missing (a copy makes its database)."""
    from nonoka.cli.common import open_stores
    from nonoka.cli.damage import refuse_if_damaged

    refuse_if_damaged(place)
    return open_stores(place)


@db.command("check", short_help="Check what the runtime needs; --repair rebuilds it.")
@click.option("--repair", is_flag=True, help="First rebuild what can be derived from the "
              "stored rows (SQLite: the entries' digest chain), then check.")
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON.")
@place_options
def check_command(repair: bool, as_json: bool, place: Place) -> None:
    """Check the database: integrity, orphan rows, index rows without checkpoints,
    checkpoints whose entry count disagrees, the search index, the entries' digest chain,
    and that every session loads (to be continued) and exports. Exit 1 on an error."""
    from nonoka.cli.render import print_json
    from nonoka.ops import maintenance

    async def go() -> tuple[list[Any], list[Any]]:
        try:
            async with stores_at(place, reading=not repair) as stores:
                repaired = await maintenance.repair(stores) if repair else []
                return repaired, await maintenance.check(stores)
        except Exception as exc:  # a damaged file is this command's finding, not its failure
            return [], [_damage_finding(exc)]

    repaired, findings = call(go)
    if as_json:
        rows = [{"level": f.level, "kind": f.kind, "message": f.message,
                 "session_id": f.session_id, "entries": list(f.entries)} for f in findings]
        if repair:
            print_json({"repaired": [{"kind": f.kind, "session_id": f.session_id,
                                      "entries": list(f.entries)} for f in repaired],
                        "findings": rows})
        else:
            print_json(rows)
    else:
        for f in repaired:
            click.echo(f"repaired: {f.kind} (session {f.session_id}){_edited(f.entries)}")
        for f in findings:
            click.echo(f"{f.level}: {f.kind}: {f.message}"
                       f"{f' (session {f.session_id})' if f.session_id else ''}")
        if not findings:
            click.echo("ok: no problems found")
    if any(f.level == "error" for f in findings):
        raise SystemExit(1)


def _edited(entries: tuple[int, ...]) -> str:
    """What a repair of the digest chain says of the entries it found changed by hand."""
    from nonoka.ops.model import entries_named

    if not entries:
        return ""
    one = len(entries) == 1
    return (f": {entries_named(entries)} {'was' if one else 'were'} changed after "
            f"{'it was' if one else 'they were'} stored; the chain now takes "
            f"{'its' if one else 'their'} text as it is (restore the session from a backup "
            "for the one stored)")


def _damage_finding(exc: Exception) -> Any:
    """What ``db check`` reports when the damage stops it reading: the finding itself;
    anything else is raised again."""
    from nonoka.cli.voice import DAMAGED_CODE, complaint_of
    from nonoka.ops.model import Finding

    complaint = complaint_of(exc)
    if complaint is None or complaint.code != DAMAGED_CODE:
        raise exc
    return Finding("error", "damaged",
                   complaint.message.replace("`nonoka db check` says what is wrong; ", ""))


@db.command("vacuum", short_help="Give free space back, refresh the planner's statistics.")
@click.option("--json", "as_json", is_flag=True, help="Print what was done as JSON.")
@place_options
def vacuum_command(as_json: bool, place: Place) -> None:
    """Give free space back: SQLite VACUUM (writers wait meanwhile) shrinks the file;
    PostgreSQL VACUUM (ANALYZE) of nonoka's tables makes dead rows' space reusable and
    refreshes the planner's statistics (the files keep their size)."""
    from nonoka.cli.render import print_json
    from nonoka.ops.maintenance import Vacuumed, vacuum

    async def go() -> Vacuumed:
        async with stores_at(place) as stores:
            return await vacuum(stores)

    done = call(go)
    if as_json:
        print_json(done.as_json())
    elif done.engine == "postgresql":
        click.echo(f"VACUUM (ANALYZE) done on {len(done.tables)} table(s): dead rows' space "
                   "is reusable, the planner's statistics are fresh.\nPostgreSQL keeps "
                   "freed space for reuse (the files do not shrink); nonoka's tables now "
                   f"take {size(done.bytes_after)}:")
        _print_tables(done.tables)
    else:
        click.echo(f"{size(done.bytes_before)} -> {size(done.bytes_after)} "
                   f"({size(max(0, done.bytes_before - done.bytes_after))} freed)")


def _print_tables(tables: list[Any]) -> None:
    click.echo(f"  {'table':<20} {'size':>10} {'live rows':>10} {'dead rows':>10}  "
               "last vacuum")
    for t in tables:
        click.echo(f"  {t.name:<20} {size(t.bytes):>10} {t.live_rows:>10} {t.dead_rows:>10}  "
                   f"{t.last_vacuum or 'never'}")


@db.command("stats", short_help="Sessions, entries, events, sizes, largest sessions.")
@click.option("-n", "--limit", "largest", default=10, show_default=True, metavar="N",
              type=click.IntRange(min=0), help="List this many of the largest sessions.")
@click.option("--largest", "largest_old", type=click.IntRange(min=0), hidden=True)
@click.option("--json", "as_json", is_flag=True, help="Print the statistics as JSON.")
@place_options
def stats_command(largest: int, largest_old: int | None, as_json: bool, place: Place) -> None:
    """Sessions, entries, events, files, bytes by table, and the largest sessions; on
    PostgreSQL also each table's live and dead rows and when it was last vacuumed."""
    from nonoka.cli.render import print_json
    from nonoka.ops.maintenance import stats, table_health

    count = largest if largest_old is None else largest_old

    async def go() -> tuple[Any, list[Any]]:
        async with stores_at(place, reading=True) as stores:
            found = await stats(stores, count)
            return found, await table_health(stores)

    result, tables = call(go)
    if as_json:
        print_json({**result.as_json(), **({"tables": [t.as_json() for t in tables]}
                                           if tables else {})})
        return
    click.echo(f"engine    {result.engine}\nsessions  {result.sessions}\n"
               f"entries   {result.entries}\nevents    {result.events}\n"
               f"files     {result.media} ({size(result.media_bytes)}, each stored once)\n")
    if tables:
        click.echo("tables (PostgreSQL: size with indexes and TOAST)")
        _print_tables(tables)
    else:
        click.echo("bytes by table")
        for name, bytes_ in result.bytes_by_table.items():
            click.echo(f"  {name.ljust(20)} {size(bytes_).rjust(10)}")
    if result.largest:
        click.echo("\nlargest sessions")
        for sid, entries, bytes_ in result.largest:
            click.echo(f"  {sid}  {entries:>7} entries  {size(bytes_).rjust(10)}")
