"""``nonoka sessions export``: sessions as JSONL (lossless) or Markdown (for a person).

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

from nonoka.errors import CorruptSessionError
from nonoka.ops import jsonl
from nonoka.ops.backends import backend_for
from nonoka.ops.model import SessionReader
from nonoka.store.media import describe, file_parts
from nonoka.store.project import ProjectStores
from nonoka.store.records import SessionRecord


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

    Nothing is yielded for a session without a checkpoint.
    """
    head = await reader.head(session_id)
    if head is None:
        return
    if sent is not None:
        async for line in media_lines(reader, session_id, sent):
            yield line
    index = await reader.index(session_id)
    record = None if index is None else SessionRecord.model_validate(index)
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
        lines = jsonl.entry_lines(rows)
        digest.update(lines.encode())
        entries += len(rows)
        yield lines
    steps = await reader.steps(session_id)
    for step in steps:
        line = jsonl.dumps({"type": "step", "step_id": step.step_id,
                            "update_type": step.update_type, "payload": step.payload,
                            "updated_at": step.updated_at}) + "\n"
        digest.update(line.encode())
        yield line
    events = 0
    async for event in reader.events(session_id):
        line = jsonl.dumps({"type": "event", "seq": event.seq, "at": event.at,
                            "kind": event.kind, "data": event.data}) + "\n"
        digest.update(line.encode())
        events += 1
        yield line
    yield jsonl.dumps({"type": "end_session", "session_id": session_id, "entries": entries,
                       "steps": len(steps), "events": events,
                       "digest": digest.hexdigest()}) + "\n"


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

    Unknown ids are a ``KeyError`` naming them, raised before anything is written.
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


async def _resolve(all_ids: Any, wanted: list[str] | None) -> list[str]:
    stored: list[str] = await all_ids()
    if wanted is None:
        return stored
    missing = sorted(set(wanted) - set(stored))
    if missing:
        raise KeyError(", ".join(missing))
    return list(dict.fromkeys(wanted))


# -- Markdown ------------------------------------------------------------------------------


async def export_markdown(stores: ProjectStores, session_ids: list[str] | None,
                          out: TextIO) -> int:
    """The conversations for a person: tool calls and results folded, usage at the end."""
    from nonoka.state.entries import MemoryEntry

    backend = backend_for(stores)
    ids = await _resolve(backend.session_ids, session_ids)
    validate = MemoryEntry.__pydantic_validator__.validate_json
    async with backend.reader() as reader:
        for n, sid in enumerate(ids):
            head = await reader.head(sid)
            if head is None:
                continue
            index = await reader.index(sid)
            record = None if index is None else SessionRecord.model_validate(index)
            if n:
                out.write("\n---\n\n")
            out.write(f"# {_title(record, sid)}\n\n")
            out.write(f"- session: `{sid}`\n")
            if record is not None:
                out.write(f"- model: {record.model or '-'}\n- status: {record.status}\n"
                          f"- created: {_when(record.created_at)}\n"
                          f"- last active: {_when(record.last_active)}\n")
            out.write("\n")
            async for rows in reader.entries(sid):
                out.write("".join([_entry_markdown(validate(text)) for _, text in rows]))
            usage = await stores.events.usage_summary(sid)
            out.write(f"## Usage\n\n| model calls | input tokens | output tokens | cost | "
                      f"tool calls | errors |\n|---:|---:|---:|---:|---:|---:|\n"
                      f"| {usage.model_calls} | {usage.input_tokens} | {usage.output_tokens} "
                      f"| ${usage.cost_usd:.4f} | {usage.tool_calls} | {usage.errors} |\n")
    out.flush()
    return len(ids)


def _title(record: SessionRecord | None, sid: str) -> str:
    return (record.title if record and record.title else f"Session {sid[:8]}").replace("\n", " ")


def _when(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))


def _fence(text: str) -> str:
    ticks = "```"
    while ticks in text:
        ticks += "`"
    return f"{ticks}\n{text}\n{ticks}"


def _files_markdown(entry: Any) -> str:
    """The entry's files, named: ``[image shot.png, image/png, 2.0 MiB]`` (their bytes,
    stored or inline, never written)."""
    return "".join(f"{describe(part)}\n\n" for part in file_parts(entry.metadata))


def _entry_markdown(entry: Any) -> str:
    role = entry.role
    if role == "tool":
        name = entry.metadata.get("tool_name", "tool")
        label = "error" if entry.metadata.get("is_error") else "result"
        return (f"<details><summary>{label} of {name}</summary>\n\n{_fence(entry.content)}"
                f"\n\n{_files_markdown(entry)}</details>\n\n")
    parts = [f"## {role.capitalize()}\n\n"]
    if entry.content:
        parts.append(entry.content.rstrip() + "\n\n")
    parts.append(_files_markdown(entry))
    for call in entry.tool_calls:
        parts.append(f"<details><summary>tool call: {call.name}</summary>\n\n"
                     f"{_fence(call.arguments)}\n\n</details>\n\n")
    return "".join(parts)
