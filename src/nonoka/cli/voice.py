"""One voice for every failure of the ``nonoka`` command.

Whatever fails — a click usage error, a session that is not there, a database that is
damaged or busy, a model endpoint — the person reads one line on stderr,
``nonoka: <what happened>; <what to do>``, and the exit code says which kind of failure
it was (``EXIT_CODES``). A command run with ``--json`` also prints
``{"error": {"code": ..., "message": ...}}`` on stdout, so a program reading it gets JSON
whether the command worked or not. ``VoicedGroup`` is the click group that does this for
every command; the commands themselves only raise.
"""

from __future__ import annotations

import errno
import json
import os
import re
import sqlite3
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from nonoka.store.records import SessionRecord

EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_BUSY = 75
"""``EX_TEMPFAIL``: nothing is wrong, but the command could not run now; try again later."""
EXIT_INTERRUPTED = 130

EXIT_CODES = (
    (0, "done"),
    (EXIT_FAILURE, "failed: the message says what happened and what to do"),
    (EXIT_USAGE, "the command line or the configuration is wrong (an unknown option, "
                 "a missing argument, no model configured): fix it and run it again"),
    (EXIT_BUSY, "busy: another process is running the session or holds the database; "
                "try again when it has finished"),
    (EXIT_INTERRUPTED, "interrupted (Ctrl-C or SIGTERM); what was done so far is kept"),
)
"""Every exit code of the ``nonoka`` command, as ``nonoka help exit-codes`` lists them."""

DAMAGED_CODE = "database_damaged"
_DAMAGE_WORDS = ("database disk image is malformed", "file is not a database",
                 "vtable constructor failed", "database corruption",
                 "file is encrypted or is not a database", "btreeinitpage")
"""What SQLite says when a database file is damaged, in its own words (lowercase)."""
_WHERE = re.compile(r"\bdatabase (/\S+?)(?::| is\b)")
"""The file a store's message names (``database /path/sessions.db: ...``)."""


class CliError(Exception):
    """A failure to report in one line (no traceback): ``message`` says what happened and
    what to do; ``exit_code`` and ``code`` (for ``--json``) say what kind it was."""

    def __init__(self, message: str, exit_code: int = 1, code: str = "failed") -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
        self.code = code


class AmbiguousSessionError(CliError):
    """A prefix matches several sessions; ``candidates`` are shown so people can pick."""

    def __init__(self, prefix: str, candidates: list[SessionRecord]) -> None:
        super().__init__(f"{prefix!r} matches {len(candidates)} sessions; give more of the "
                         "id (the sessions it matches are below)", code="ambiguous_session")
        self.candidates = candidates

    def lines(self) -> list[str]:
        from nonoka.cli.render import ago, clip

        return [f"{r.session_id}  {clip(r.title or '(untitled)', 40)}  ({ago(r.last_active)})"
                for r in self.candidates]


@dataclass(frozen=True)
class Complaint:
    """A failure as it is reported: the line, the exit code, the ``--json`` code."""

    message: str
    exit_code: int = EXIT_FAILURE
    code: str = "failed"
    details: tuple[str, ...] = ()
    """Lines shown under the message (the sessions an ambiguous id matches)."""

    def as_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details:
            body["details"] = list(self.details)
        return {"error": body}


def damaged_advice(what: str, said: str = "") -> str:
    """The remedy for a damaged database ``what`` (a path, or "the database"); ``said``:
    SQLite's words for the damage, kept for whoever looks into it."""
    words = f" (SQLite: {said})" if said else ""
    return (f"{what} is damaged{words}; nothing was written to it. `nonoka db check` says "
            "what is wrong; save what is readable with `nonoka sessions export --all -o "
            "rescue.jsonl`, then restore the file from a backup (`nonoka help database`)")


def is_damage(text: str) -> bool:
    """Whether an error text is SQLite saying the file is damaged (not only its
    full-text index, which the store's message says how to rebuild)."""
    lowered = text.lower()
    return (any(word in lowered for word in _DAMAGE_WORDS)
            and "search index is damaged" not in lowered)


def damage_words(text: str) -> str:
    """SQLite's own phrase for the damage in ``text`` (a store's message wraps it)."""
    lowered = text.lower()
    for word in _DAMAGE_WORDS:
        at = lowered.find(word)
        if at >= 0:
            return text[at:at + len(word)]
    return text


def complaint_of(exc: BaseException) -> Complaint | None:
    """The complaint for an exception the command lets out, or ``None`` for a bug."""
    from nonoka.errors import ModelNotConfiguredError, NonokaError, failure_of

    if isinstance(exc, AmbiguousSessionError):
        return Complaint(exc.message, exc.exit_code, exc.code, tuple(exc.lines()))
    if isinstance(exc, CliError):
        return Complaint(exc.message, exc.exit_code, exc.code)
    if isinstance(exc, click.UsageError):
        return Complaint(_usage_line(exc), EXIT_USAGE, "usage_error")
    if isinstance(exc, click.ClickException):
        return Complaint(exc.format_message(), exc.exit_code or EXIT_FAILURE, "failed")
    if isinstance(exc, NonokaError):
        failure = failure_of(exc)
        if is_damage(failure.message):
            return _damaged(failure.message)
        exit_code = EXIT_BUSY if failure.retryable else (
            EXIT_USAGE if isinstance(exc, ModelNotConfiguredError) else EXIT_FAILURE)
        return Complaint(failure.message, exit_code, failure.code)
    if isinstance(exc, sqlite3.DatabaseError):  # SQLite's own words, met below the store
        if is_damage(str(exc)):
            return _damaged(str(exc))
        if "locked" in str(exc).lower():
            return Complaint(f"the database is locked by another process ({exc}); try "
                             "again when it has finished", EXIT_BUSY, "store_busy")
        return Complaint(f"the database failed ({exc}); run `nonoka db check` to see "
                         "whether it is damaged", EXIT_FAILURE, "store_error")
    if isinstance(exc, OSError):
        where = f" ({exc.filename})" if exc.filename else ""
        return Complaint(f"{exc.strerror or exc}{where}; check the path, its permissions "
                         "and the free space, then run it again", EXIT_FAILURE, "os_error")
    return None


def _damaged(said: str) -> Complaint:
    found = _WHERE.search(said)
    what = f"the database {found.group(1)}" if found else "the database"
    return Complaint(damaged_advice(what, damage_words(said)), EXIT_FAILURE, DAMAGED_CODE)


def _usage_line(exc: click.UsageError) -> str:
    """Click's usage error as one line, with where to read how the command is used."""
    text = " ".join(exc.format_message().split()).rstrip(".")
    if text[:1].isupper() and text[1:2].islower():
        text = text[0].lower() + text[1:]
    path = exc.ctx.command_path if exc.ctx is not None else "nonoka"
    return f"{text}; see `{path} --help`"


def say(complaint: Complaint, *, as_json: bool) -> None:
    """Print the complaint: one red line on stderr (and the JSON object on stdout), with
    credentials masked and, on the terminal, control characters escaped."""
    from dataclasses import replace

    from nonoka.cli.safe_text import shown
    from nonoka.redact import redact_text

    said = redact_text(" ".join(complaint.message.split()))
    if as_json:
        click.echo(json.dumps(replace(complaint, message=said).as_json(), ensure_ascii=False))
    click.secho(f"nonoka: {shown(said, one_line=True)}", fg="red", err=True)
    for detail in complaint.details:
        click.echo(f"  {shown(detail, one_line=True)}", err=True)


def wants_json(args: Sequence[str]) -> bool:
    """Whether the command line asks for ``--json`` (options end at ``--``)."""
    options = args[: list(args).index("--")] if "--" in args else args
    return "--json" in options


class VoicedGroup(click.Group):
    """A click group whose every failure is reported in nonoka's one voice."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True,
             windows_expand_args: bool = True, **extra: Any) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        extra["windows_expand_args"] = windows_expand_args
        if not standalone_mode:
            return super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
        as_json = wants_json(argv)
        try:
            code = super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.NoArgsIsHelpError as exc:
            exc.show()  # a bare group: its help, as click shows it
            sys.exit(exc.exit_code)
        except (KeyboardInterrupt, click.Abort, EOFError):
            if sys.stdout.isatty():
                click.echo(err=True)  # past a half-written answer line
            say(Complaint("interrupted; what was done so far is kept", EXIT_INTERRUPTED,
                          "interrupted"), as_json=as_json)
            sys.exit(EXIT_INTERRUPTED)
        except BrokenPipeError:
            _quiet_stdout()  # the reader went away (`| head`): nothing more to say
            sys.exit(EXIT_FAILURE)
        except Exception as exc:
            if isinstance(exc, OSError) and exc.errno == errno.EPIPE:
                _quiet_stdout()
                sys.exit(EXIT_FAILURE)
            complaint = complaint_of(exc)
            if complaint is None:
                raise  # a bug in nonoka: its traceback is what gets it fixed
            say(complaint, as_json=as_json)
            sys.exit(complaint.exit_code)
        sys.exit(code if isinstance(code, int) else 0)


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
