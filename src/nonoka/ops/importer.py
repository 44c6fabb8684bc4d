"""``nonoka sessions import``: a JSONL export back into any engine.

Two passes over the file. The first checks all of it — header and format version, every
line's shape and every value against what the readers of the stored rows accept
(``ops.import_checks``), entries numbered in order, each session's closing counts and
digest, each file's bytes against its digest and every entry's references against the
files carried before it, the closing ``end`` line — and remembers where each session's
rows and each file start; then the parents the sessions name are followed, and a loop
of parents is refused. A truncated, corrupt or unreadable file fails here, naming the
line, and nothing is written. The second pass writes each session in one transaction of
its own with the files it refers to (a running turn waits for one session, never for
the whole file; a file already stored is kept as it is), reading its rows from the file
again, so a session of any length imports in constant memory (its files are held while
it is written). Should a write fail, the error says which sessions are already stored;
the same import run again adds the rest. A session whose id is already stored is
skipped or imported under a new id
(``on_conflict``), never overwritten.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Literal

from nonoka.errors import ConfigurationError, NonokaError, StoreError
from nonoka.ops import import_checks as checks
from nonoka.ops import jsonl
from nonoka.ops.backends import backend_for
from nonoka.ops.import_checks import ImportFileError, LineError
from nonoka.ops.model import EventRow, SessionHead, StepRow
from nonoka.store.media import Media, canonical_bytes, digest_of, digests, is_digest, references
from nonoka.store.project import ProjectStores

OnConflict = Literal["skip", "rename", "fail"]
HEADER_LIMIT = 64 * 1024


ImportConflictError = ConfigurationError
"""A session in the file is already stored and ``on_conflict="fail"``."""


@dataclass
class _Planned:
    session_id: str
    line: int
    offset: int
    """Where the ``session`` line starts."""
    entries: int = 0
    entries_at: int = 0
    steps: int = 0
    steps_at: int = 0
    events: int = 0
    events_at: int = 0
    index: dict[str, Any] | None = None
    """The index row as it is stored (as ``SessionRecord`` reads it)."""
    files: dict[str, None] = field(default_factory=dict)
    """The digests of the files its entries refer to, in order."""


@dataclass
class ImportReport:
    imported: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    renamed: dict[str, str] = field(default_factory=dict)
    """Old id → the new id it was stored under."""

    def as_json(self) -> dict[str, Any]:
        return {"imported": self.imported, "skipped": self.skipped, "renamed": self.renamed}


class ImportInterruptedError(StoreError):
    """Writing a session failed; ``report`` holds what was stored before it (kept)."""

    def __init__(self, message: str, report: ImportReport, *,
                 retryable: bool | None = None) -> None:
        super().__init__(message, retryable=retryable)
        self.report = report


def _lines(handle: BinaryIO, start_line: int = 1) -> Iterator[tuple[int, int, bytes]]:
    """``(line number, offset, bytes)``; a line longer than ``MAX_LINE`` is an error."""
    number = start_line
    while True:
        offset = handle.tell()
        raw = handle.readline(jsonl.MAX_LINE + 1)
        if not raw:
            return
        if len(raw) > jsonl.MAX_LINE:
            raise ImportFileError(f"line {number} is longer than {jsonl.MAX_LINE} bytes; "
                                  "this is not a nonoka export (nothing was imported)")
        yield number, offset, raw
        number += 1


def _parse(number: int, raw: bytes) -> dict[str, Any]:
    if not raw.endswith(b"\n"):
        raise ImportFileError(f"line {number} is cut short (the file is truncated); "
                              "nothing was imported")
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ImportFileError(f"line {number} is not valid JSON ({exc}); nothing was "
                              "imported") from None
    if not isinstance(value, dict):
        raise ImportFileError(f"line {number} is not a JSON object; nothing was imported")
    return value


_FIELDS: dict[str, dict[str, type | tuple[type, ...]]] = {
    "session": {"session_id": str, "snapshot": str, "revision": int, "entry_count": int,
                "memory_generation": int, "created_at": (int, float),
                "updated_at": (int, float)},
    "entry": {"seq": int, "entry": str},
    "step": {"step_id": str, "update_type": str, "payload": str, "updated_at": (int, float)},
    "event": {"seq": int, "at": (int, float), "kind": str, "data": str},
    "end_session": {"session_id": str, "entries": int, "steps": int, "events": int,
                    "digest": str},
    "end": {"sessions": int},
    "media": {"digest": str, "media_type": str, "size": int, "data": str},
}


def _check_fields(number: int, value: dict[str, Any]) -> str:
    kind = value.get("type")
    fields = _FIELDS.get(kind) if isinstance(kind, str) else None
    if fields is None:
        raise ImportFileError(f"line {number}: unknown line type {kind!r}; nothing was "
                              "imported")
    for name, types in fields.items():
        item = value.get(name)
        if not isinstance(item, types) or isinstance(item, bool):
            raise ImportFileError(f"line {number}: the {kind} line's {name!r} is missing or "
                                  "of the wrong type; nothing was imported")
    return str(kind)


def check_header(number: int, raw: bytes) -> None:
    try:
        header = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        header = None
    if not isinstance(header, dict) or header.get("format") != jsonl.FORMAT:
        raise ImportFileError(f"line {number} is not a nonoka export header "
                              f"(format {jsonl.FORMAT!r}); nothing was imported")
    version = header.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version > jsonl.VERSION:
        raise ImportFileError(
            f"the file is export format version {version!r}, newer than this nonoka reads "
            f"({jsonl.VERSION}); upgrade nonoka to import it. Nothing was imported")


def plan(handle: BinaryIO) -> list[_Planned]:
    """The first pass: check the whole file; where each session's rows are."""
    return _planned(handle).sessions


def _planned(handle: BinaryIO) -> _Planner:
    """``plan``, with where each file's line is."""
    handle.seek(0)
    first = handle.readline(HEADER_LIMIT)
    if not first.endswith(b"\n"):
        raise ImportFileError("line 1 is not a nonoka export header (no header line within "
                              f"{HEADER_LIMIT} bytes); nothing was imported")
    check_header(1, first)
    planner = _Planner()
    try:
        for number, offset, raw in _lines(handle, 2):
            planner.line(number, offset, raw)
        planner.finish()
        return planner
    except ImportFileError as exc:
        message = str(exc)
        if "othing was imported" in message:
            raise
        raise ImportFileError(f"{message}; nothing was imported") from None


_SECTIONS = ("entries", "steps", "events")
_SECTION_OF = {"entry": "entries", "step": "steps", "event": "events"}


class _Planner:
    def __init__(self) -> None:
        self.sessions: list[_Planned] = []
        self.seen: set[str] = set()
        self.current: _Planned | None = None
        self.head: tuple[int, dict[str, Any]] = (0, {})
        """The current session's line: what its snapshot is checked with at its end."""
        self.steps: list[tuple[int, tuple[str, str, str, float]]] = []
        self.last_event = -1
        self.digest = hashlib.sha256()
        self.ended = False
        self.section = 0
        self.media: dict[str, int] = {}
        """Each file carried so far: digest → where its line starts."""

    def line(self, number: int, offset: int, raw: bytes) -> None:
        if self.ended:
            raise ImportFileError(f"line {number}: data after the closing line; nothing "
                                  "was imported")
        value = _parse(number, raw)
        kind = _check_fields(number, value)
        try:
            checks.encodable(raw, value)
            self._line(number, offset, raw, kind, value)
        except LineError as exc:
            raise checks.refusal(number, kind, exc) from None

    def _line(self, number: int, offset: int, raw: bytes, kind: str,
              value: dict[str, Any]) -> None:
        if kind == "session":
            self._open(number, offset, raw, value)
        elif kind == "end":
            self._end(number, value)
        elif kind == "media":
            self._media(number, offset, value)
        elif self.current is None:
            raise ImportFileError(f"line {number}: a {kind} line outside a session")
        elif kind == "end_session":
            _close(number, value, self.current, self.digest)
            if self.head[1]["entry_count"] != self.current.entries:
                raise ImportFileError(
                    f"line {self.current.line}: the session line's 'entry_count' is "
                    f"{self.head[1]['entry_count']} but the session holds "
                    f"{self.current.entries} entries; nothing was imported")
            checks.decodes(self.head, self.steps)
            self.sessions.append(self.current)
            self.current = None
        else:
            self._row(number, offset, raw, kind, value, self.current)

    def _open(self, number: int, offset: int, raw: bytes, value: dict[str, Any]) -> None:
        if self.current is not None:
            raise ImportFileError(f"line {number}: session {self.current.session_id} "
                                  f"(line {self.current.line}) has no end_session line")
        index = checks.session_line(value)
        sid = value["session_id"]
        if sid in self.seen:
            raise ImportFileError(f"line {number}: session {sid} appears twice")
        self.seen.add(sid)
        self.current = _Planned(sid, number, offset, index=index)
        self.head = (number, value)
        self.steps = []
        self.last_event = -1
        self.digest = hashlib.sha256(raw)
        self.section = 0

    def _media(self, number: int, offset: int, value: dict[str, Any]) -> None:
        """A file: outside any session, its bytes what its digest and size say."""
        if self.current is not None:
            raise ImportFileError(f"line {number}: a media line inside session "
                                  f"{self.current.session_id}")
        data = canonical_bytes(value["data"])
        digest = value["digest"]
        if data is None or not is_digest(digest) or digest_of(data) != digest \
                or len(data) != value["size"]:
            raise ImportFileError(f"line {number}: the bytes of the file {digest!r:.80} "
                                  "do not match its digest and size (the file was changed "
                                  "or damaged)")
        self.media.setdefault(digest, offset)

    def _end(self, number: int, value: dict[str, Any]) -> None:
        if self.current is not None:
            raise ImportFileError(f"line {number}: session {self.current.session_id} has no "
                                  "end_session line")
        if value["sessions"] != len(self.sessions):
            raise ImportFileError(f"line {number}: the file says {value['sessions']} "
                                  f"sessions but holds {len(self.sessions)}")
        self.ended = True

    def _row(self, number: int, offset: int, raw: bytes, kind: str, value: dict[str, Any],
             current: _Planned) -> None:
        self.digest.update(raw)
        section = _SECTIONS.index(_SECTION_OF[kind])
        if section < self.section:
            raise ImportFileError(f"line {number}: a {kind} line after the session's "
                                  f"{_SECTIONS[self.section]}")
        self.section = section
        if kind == "entry":
            if value["seq"] != current.entries:
                raise ImportFileError(f"line {number}: entry {value['seq']} of session "
                                      f"{current.session_id} where entry {current.entries} "
                                      "was expected")
            checks.entry_line(value)
            current.entries_at = current.entries_at or offset
            current.entries += 1
            for digest in digests(references(value["entry"])):
                if digest not in self.media:
                    raise ImportFileError(
                        f"line {number}: entry {value['seq']} of session "
                        f"{current.session_id} refers to the file {digest}, which the file "
                        "does not carry before it")
                current.files[digest] = None
        elif kind == "step":
            self.steps.append((number, checks.step_line(value)))
            current.steps_at = current.steps_at or offset
            current.steps += 1
        else:
            self.last_event = checks.event_line(value, self.last_event)
            current.events_at = current.events_at or offset
            current.events += 1

    def finish(self) -> None:
        if not self.ended:
            where = (f"in session {self.current.session_id}" if self.current
                     else "after the last session")
            raise ImportFileError(f"the file ends {where} without its closing line: it is "
                                  "truncated; nothing was imported")


def _close(number: int, value: dict[str, Any], current: _Planned, digest: Any) -> None:
    sid = current.session_id
    if value["session_id"] != sid:
        raise ImportFileError(f"line {number}: end_session of {value['session_id']} closes "
                              f"session {sid}")
    counts = (value["entries"], value["steps"], value["events"])
    if counts != (current.entries, current.steps, current.events):
        raise ImportFileError(f"line {number}: session {sid} should hold {counts[0]} "
                              f"entries, {counts[1]} steps and {counts[2]} events; the file "
                              f"has {current.entries}, {current.steps}, {current.events}")
    if value["digest"] != digest.hexdigest():
        raise ImportFileError(f"line {number}: the digest of session {sid} does not match "
                              "its lines (the file was changed or damaged)")


def _read(handle: BinaryIO, offset: int, count: int) -> Iterator[dict[str, Any]]:
    handle.seek(offset)
    for _ in range(count):
        yield json.loads(handle.readline(jsonl.MAX_LINE + 1))


def _files(handle: BinaryIO, offsets: dict[str, int], wanted: dict[str, None]) -> list[Media]:
    """The files ``wanted`` names, read again from their lines (checked by ``plan``)."""
    files = []
    for digest in wanted:
        (line,) = _read(handle, offsets[digest], 1)
        data = canonical_bytes(line["data"])
        assert data is not None  # plan checked it
        files.append(Media(digest, line["media_type"], data))
    return files


async def import_jsonl(stores: ProjectStores, path: Path,
                       on_conflict: OnConflict = "skip") -> ImportReport:
    """Import every session of the export at ``path`` (checked whole first).

    A failed write is an ``ImportInterruptedError`` whose ``report`` lists the sessions
    stored before it.
    """
    backend = backend_for(stores)
    report = ImportReport()
    with path.open("rb") as handle:
        planner = _planned(handle)
        planned = planner.sessions
        stored = set(await backend.session_ids())
        if on_conflict == "fail":
            clash = [p.session_id for p in planned if p.session_id in stored]
            if clash:
                raise ImportConflictError(f"already stored: {', '.join(clash)}; nothing was "
                                          "imported (use --on-conflict skip or rename)")
        await _refuse_loops(stores, planned, stored)
        with path.open("rb") as entries_file, path.open("rb") as events_file:
            for item in planned:
                try:
                    files = _files(handle, planner.media, item.files)
                    await _write(backend, item, (handle, entries_file, events_file), files,
                                 on_conflict, report)
                except (NonokaError, OSError) as exc:
                    raise _interrupted(item.session_id, exc, report) from exc
    return report


async def _write(backend: Any, item: _Planned, handles: tuple[BinaryIO, BinaryIO, BinaryIO],
                 files: list[Media], on_conflict: OnConflict, report: ImportReport) -> None:
    """Write one planned session with the files it refers to (in one transaction), as
    ``on_conflict`` says."""
    handle, entries_file, events_file = handles
    (session,) = _read(handle, item.offset, 1)
    steps = [StepRow(s["step_id"], s["update_type"], s["payload"], float(s["updated_at"]))
             for s in _read(handle, item.steps_at, item.steps)]
    head = SessionHead(item.session_id, session["snapshot"], session["revision"],
                       session["entry_count"], session["memory_generation"],
                       float(session["created_at"]), float(session["updated_at"]))
    index = item.index
    new_id = None
    while True:
        entries = (e["entry"] for e in _read(entries_file, item.entries_at, item.entries))
        events = (EventRow(e["seq"], float(e["at"]), e["kind"], e["data"])
                  for e in _read(events_file, item.events_at, item.events))
        extra = {"media": files} if files else {}  # a backend from before files
        if await backend.write_session(head, entries, steps, events, index, **extra):
            if new_id is None:
                report.imported.append(item.session_id)
            else:
                report.renamed[item.session_id] = new_id
            return
        if on_conflict != "rename":
            report.skipped.append(item.session_id)
            return
        new_id = str(uuid.uuid4())
        head, index = _renamed(head, index, new_id)


def _interrupted(sid: str, exc: BaseException, report: ImportReport
                 ) -> ImportInterruptedError:
    cause = " ".join(str(exc).split()) if isinstance(exc, NonokaError) else (
        f"{getattr(exc, 'strerror', None) or exc}")
    done = len(report.imported) + len(report.renamed)
    if not done and not report.skipped:
        outcome = "nothing was imported"
    else:
        outcome = (f"the {done} session(s) before it were imported and stay stored"
                   f"{f', {len(report.skipped)} skipped' if report.skipped else ''}; "
                   "it and the sessions after it were not: run the same import again "
                   "with --on-conflict skip to add them")
    retryable = exc.retryable if isinstance(exc, NonokaError) else None
    return ImportInterruptedError(f"writing session {sid} failed ({cause}); {outcome}",
                                  report, retryable=retryable)


async def _refuse_loops(stores: ProjectStores, planned: list[_Planned],
                        stored: set[str]) -> None:
    """Refuse a session whose parents (``forked_from``, in the file or already stored)
    lead back to it: a loop has no root, so ``sessions list --tree`` could not show it."""
    parents = {p.session_id: checks.parent_of(p.index) for p in planned
               if p.session_id not in stored}

    async def parent(sid: str) -> str | None:
        if sid not in parents:
            try:
                record = await stores.index.get_session(sid)
            except StoreError:
                record = None  # a damaged row names no parent
            found = None if record is None else record.metadata.get("forked_from")
            parents[sid] = found if isinstance(found, str) else None
        return parents[sid]

    for item in planned:
        if item.session_id in stored:
            continue  # skipped or renamed: nothing can lead back to what is written
        path = [item.session_id]
        sid = await parent(item.session_id)
        while sid is not None and sid not in path and len(path) < 10_000:
            path.append(sid)
            sid = await parent(sid)
        if sid == item.session_id:
            shown = " → ".join([*path[:4], "…"] if len(path) > 4 else path)
            raise ImportFileError(
                f"line {item.line}: the session line's 'index.metadata.forked_from' makes a "
                f"loop of parents ({shown} → {sid}); nothing was imported")


def _renamed(head: SessionHead, index: dict[str, Any] | None,
             new_id: str) -> tuple[SessionHead, dict[str, Any] | None]:
    snapshot = json.loads(head.snapshot)
    if isinstance(snapshot, dict):
        snapshot["session_id"] = new_id
    text = json.dumps(snapshot, ensure_ascii=False, separators=(",", ":"))
    head = SessionHead(new_id, text, head.revision, head.entry_count, head.memory_generation,
                       head.created_at, head.updated_at)
    if index is not None:
        index = {**index, "session_id": new_id}
    return head, index
