"""``nonoka sessions export``: sessions as JSONL (lossless) or Markdown (for a person).

JSONL is the backup: it keeps the stored text byte for byte (credentials a message held
included; the event log was redacted when written), so an import restores exactly what
was stored, and it is as private as the database. Markdown is for reading and sharing:
every stored text in it is redacted whole (``nonoka.redact``) and its control characters
are escaped (``nonoka.ops.printable``), in a file as on a terminal.

Both stream: entries are read in batches and written as they come, so the memory an
export needs does not grow with the session. The files entries refer to go into the
JSONL once each, before the first session that refers to them (``media_lines``); the
Markdown names them (``[image shot.png, image/png, 2.0 MiB]``) and never holds their
bytes.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any, TextIO

from nonoka.errors import ConfigurationError, CorruptSessionError, StoreError
from nonoka.ops import jsonl, stored
from nonoka.ops.backends import backend_for
from nonoka.ops.model import SessionReader
from nonoka.ops.printable import printable
from nonoka.redact import redact_text
from nonoka.store.media import describe, file_parts
from nonoka.store.project import ProjectStores
from nonoka.store.records import SessionRecord
from nonoka.turn.partial import Streamed, Unfinished


def header_line() -> str:
    from nonoka import __version__

    return jsonl.dumps({"format": jsonl.FORMAT, "version": jsonl.VERSION,
                        "nonoka": __version__, "exported_at": time.time()}) + "\n"


async def session_lines(reader: SessionReader, session_id: str,
                        sent: set[str] | None = None) -> AsyncIterator[str]:
    """The JSONL lines of one session (several to a string), its ``end_session`` line
    (with the digest) last; with ``sent`` (the digests of the files already written to
    the same file), the ``media`` lines of the files it refers to that are not there yet
    come first (``media_lines``), read in the same transaction as the session.

    Nothing is yielded for a session without a checkpoint. A stored value the format
    cannot carry (``ops.stored``), or entries that are not the checkpoint's
    ``0 .. entry_count - 1``, is a ``StoreError`` naming the session: an export never
    holds what an import refuses.
    """
    head = await reader.head(session_id)
    if head is None:
        return
    if sent is not None:
        async for line in media_lines(reader, session_id, sent):
            yield line
    index = await reader.index(session_id)
    record = None if index is None else stored.index_record(session_id, index)
    lineage = None
    if record is not None and "forked_from" in record.metadata:
        lineage = {"forked_from": record.metadata.get("forked_from"),
                   "fork_point": record.metadata.get("fork_point")}
    digest = hashlib.sha256()
    first = jsonl.dumps({
        "type": "session", "session_id": head.session_id, "snapshot": head.snapshot,
        "revision": head.revision, "entry_count": head.entry_count,
        "memory_generation": head.memory_generation, "created_at": head.created_at,
        "updated_at": head.updated_at,
        "index": None if record is None else record.model_dump(mode="json"),
        "lineage": lineage}) + "\n"
    digest.update(first.encode())
    yield first
    entries = 0
    async for rows in reader.entries(session_id):
        _check_entries(session_id, entries, rows)
        lines = jsonl.entry_lines(rows)
        digest.update(lines.encode())
        entries += len(rows)
        yield lines
    if entries != head.entry_count:
        raise stored.broken(session_id, f"{entries} entry rows are stored where its "
                            f"checkpoint counts {head.entry_count}")
    steps = await reader.steps(session_id)
    for step in steps:
        line = jsonl.dumps({"type": "step", "step_id": stored.text(
                                session_id, "step update's step_id", step.step_id),
                            "update_type": stored.text(
                                session_id, "step update's type", step.update_type),
                            "payload": stored.text(
                                session_id, "step update's payload", step.payload),
                            "updated_at": stored.number(
                                session_id, "step update's updated_at", step.updated_at)}
                           ) + "\n"
        digest.update(line.encode())
        yield line
    events = 0
    async for event in reader.events(session_id):
        line = jsonl.dumps({"type": "event",
                            "seq": stored.integer(session_id, "event's seq", event.seq),
                            "at": stored.number(session_id, "event's time", event.at),
                            "kind": stored.text(session_id, "event's kind", event.kind),
                            "data": stored.text(session_id, "event's data", event.data)}
                           ) + "\n"
        digest.update(line.encode())
        events += 1
        yield line
    yield jsonl.dumps({"type": "end_session", "session_id": session_id, "entries": entries,
                       "steps": len(steps), "events": events,
                       "digest": digest.hexdigest()}) + "\n"


def _check_entries(session_id: str, start: int, rows: list[tuple[int, str]]) -> None:
    """The rows are entries ``start`` onwards, in order and without a gap, each text."""
    first, last = rows[0][0], rows[-1][0]
    if first != start or last != start + len(rows) - 1:
        gap = next((n for n, (seq, _) in enumerate(rows, start) if seq != n), start)
        raise stored.broken(session_id, f"its stored entry {gap} is missing (the entry rows "
                            "have a gap)")
    for seq, text in rows:
        if type(text) is not str:
            stored.text(session_id, f"entry {seq}", text)


async def media_lines(reader: SessionReader, session_id: str,
                      sent: set[str]) -> AsyncIterator[str]:
    """The ``media`` lines of the files the session refers to that are not in ``sent``
    (the digests already written to the same file), which it then holds too.

    A reference whose file is not stored is a ``CorruptSessionError``: the export could
    not be imported (``nonoka db check`` lists such references).
    """
    listed = getattr(reader, "files", None)  # a reader of a store without files has none
    for digest in await listed(session_id) if listed is not None else []:
        if digest in sent:
            continue
        file = await reader.file(digest)
        if file is None:
            raise CorruptSessionError(
                f"session {session_id} refers to the file {digest}, which is not stored; "
                "nothing of the session was exported (run `nonoka db check`)")
        sent.add(digest)
        yield jsonl.media_line(file)


async def export_jsonl(stores: ProjectStores, session_ids: list[str] | None,
                       out: TextIO) -> int:
    """Write the sessions (every one when ``None``) to ``out``; the number written.

    Ids without a checkpoint are a ``NotStoredError`` (a ``KeyError`` too) naming them,
    raised before anything is written.
    """
    backend = backend_for(stores)
    ids = await _resolve(backend.session_ids, session_ids)
    out.write(header_line())
    written = 0
    sent: set[str] = set()
    async with backend.reader() as reader:
        for sid in ids:
            async for line in session_lines(reader, sid, sent):
                out.write(line)
            written += 1
    out.write(jsonl.dumps({"type": "end", "sessions": written}) + "\n")
    out.flush()
    return written


async def session_digest(reader: SessionReader, session_id: str) -> str | None:
    """The digest the session's export would carry (``None`` when it is not stored)."""
    last = None
    async for line in session_lines(reader, session_id):
        last = line
    return None if last is None else str(json.loads(last)["digest"])


class NotStoredError(ConfigurationError, KeyError):
    """Sessions asked for that have no checkpoint; a ``KeyError`` too."""

    def __str__(self) -> str:
        return str(self.args[0])


async def _resolve(all_ids: Any, wanted: list[str] | None) -> list[str]:
    known: list[str] = await all_ids()
    if wanted is None:
        return known
    missing = sorted(set(wanted) - set(known))
    if missing:
        names = ", ".join(missing)
        raise NotStoredError(
            f"no conversation is stored for {names} (a session whose first turn ended "
            "before its first save leaves only an index row); nothing was exported. Leave "
            f"it out, or remove the row with `nonoka sessions delete {missing[0]}`")
    return list(dict.fromkeys(wanted))


# -- Markdown ------------------------------------------------------------------------------


async def export_markdown(stores: ProjectStores, session_ids: list[str] | None,
                          out: TextIO) -> int:
    """The conversations for a person: tool calls and results folded, usage at the end;
    in every stored text credentials are masked and control characters escaped.

    A damaged row is shown as it is stored rather than refused: a person can still read
    the rest of the conversation.
    """
    backend = backend_for(stores)
    ids = await _resolve(backend.session_ids, session_ids)
    async with backend.reader() as reader:
        for n, sid in enumerate(ids):
            try:
                if await reader.head(sid) is None:
                    continue
            except StoreError:
                pass  # only whether it is stored matters here
            index = await reader.index(sid)
            try:
                record = None if index is None else stored.index_record(sid, index)
            except StoreError:
                record = None
            if n:
                out.write("\n---\n\n")
            out.write(f"# {_title(record, sid)}\n\n")
            out.write(f"- session: `{_shown(sid)}`\n")
            if record is not None:
                out.write(f"- model: {_shown(record.model or '-')}\n"
                          f"- status: {_shown(record.status)}\n"
                          f"- created: {_when(record.created_at)}\n"
                          f"- last active: {_when(record.last_active)}\n")
            out.write("\n")
            async for rows in reader.entries(sid):
                out.write("".join([_entry_markdown(seq, text) for seq, text in rows]))
            out.write("".join([_unfinished_markdown(answer)
                               for answer in await _unfinished(reader, sid)]))
            usage = await stores.events.usage_summary(sid)
            out.write(f"## Usage\n\n| model calls | input tokens | output tokens | cost | "
                      f"tool calls | errors |\n|---:|---:|---:|---:|---:|---:|\n"
                      f"| {usage.model_calls} | {usage.input_tokens} | {usage.output_tokens} "
                      f"| ${usage.cost_usd:.4f} | {usage.tool_calls} | {usage.errors} |\n")
    out.flush()
    return len(ids)


async def _unfinished(reader: SessionReader, sid: str) -> list[Unfinished]:
    """The answers the session's turns streamed but never stored (``nonoka.turn.partial``):
    its event log holds them, its conversation does not."""
    found: list[Unfinished] = []
    streamed = Streamed()
    try:
        async for event in reader.events(sid):
            left = streamed.see(event)
            if left is not None:
                found.append(left)
    except StoreError:
        pass  # a damaged log: the conversation is still worth reading
    left = streamed.end()
    return [*found, left] if left is not None else found


def _unfinished_markdown(answer: Unfinished) -> str:
    cause = "the process ended" if answer.process_ended else "the turn ended"
    return (f"## Assistant (interrupted: {cause} mid-answer)\n\n"
            f"*An unfinished answer, streamed from {_when(answer.at)} and never stored: "
            "the text below is what the model streamed before it was cut short.*\n\n"
            f"{_fence(_shown(answer.text))}\n\n")


def _shown(text: str) -> str:
    """A stored text as the Markdown shows it: credentials masked, controls escaped."""
    return printable(redact_text(text))


def _title(record: SessionRecord | None, sid: str) -> str:
    title = record.title if record and record.title else f"Session {sid[:8]}"
    return printable(redact_text(title).replace("\n", " "), one_line=True)


def _when(at: float) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))
    except (OverflowError, ValueError, OSError, TypeError):
        return f"{at!r} (not a time)"


def _fence(text: str) -> str:
    ticks = "```"
    while ticks in text:
        ticks += "`"
    return f"{ticks}\n{text}\n{ticks}"


def _files_markdown(entry: Any) -> str:
    """The entry's files, named: ``[image shot.png, image/png, 2.0 MiB]`` (their bytes,
    stored or inline, never written)."""
    return "".join(f"{_shown(describe(part))}\n\n" for part in file_parts(entry.metadata))


def _entry_markdown(seq: int, text: object) -> str:
    from pydantic import ValidationError

    from nonoka.state.entries import MemoryEntry

    try:
        entry = MemoryEntry.__pydantic_validator__.validate_json(text)  # type: ignore[arg-type]
    except (ValidationError, ValueError, TypeError):
        return (f"## Entry {seq} (stored damaged, shown as stored)\n\n"
                f"{_fence(_shown(str(text)))}"
                "\n\n")
    role = entry.role
    if role == "tool":
        name = _shown(str(entry.metadata.get("tool_name", "tool")))
        label = "error" if entry.metadata.get("is_error") else "result"
        return (f"<details><summary>{label} of {name}</summary>\n\n"
                f"{_fence(_shown(entry.content))}\n\n{_files_markdown(entry)}</details>\n\n")
    parts = [f"## {role.capitalize()}\n\n"]
    if entry.content:
        parts.append(_shown(entry.content).rstrip() + "\n\n")
    parts.append(_files_markdown(entry))
    for call in entry.tool_calls:
        parts.append(f"<details><summary>tool call: {_shown(call.name)}</summary>\n\n"
                     f"{_fence(_shown(call.arguments))}\n\n</details>\n\n")
    return "".join(parts)
