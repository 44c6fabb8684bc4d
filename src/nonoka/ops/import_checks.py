"""What ``sessions import`` accepts: every value of an export line, checked against what
the readers of the stored rows accept, so nothing imported can break a later command.

The runtime decodes snapshots, entries and step updates (``nonoka.store.base``), the
session index is read as ``SessionRecord``, the export writes JSON without ``NaN`` or
infinities, the SQL engines store 64-bit integers and text without NUL characters or
lone surrogates, and every door checks session ids with ``validate_session_id``. Each
refusal is an ``ImportFileError`` naming the line and the field.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from pydantic import ValidationError

from nonoka.errors import ConfigurationError, StoreError
from nonoka.state.entries import MemoryEntry
from nonoka.state.ids import validate_session_id
from nonoka.store.records import SessionRecord

ImportFileError = ConfigurationError
"""The file is not a complete nonoka export (a caller mistake); nothing was imported."""

INT64 = 2**63
_ENTRY = MemoryEntry.__pydantic_validator__.validate_json
_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")
"""An escaped UTF-16 surrogate in a raw line: only then can a decoded value hold a lone
one, which no database stores (checked, then, value by value)."""


class LineError(ValueError):
    """A value the readers would not accept: ``field`` and what is wrong with it."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field!r} {problem}")


def refusal(number: int, kind: str, exc: LineError) -> ImportFileError:
    return ImportFileError(f"line {number}: the {kind} line's {exc}; nothing was imported")


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


_STRICT = json.JSONDecoder(parse_constant=_refuse_constant)
"""JSON as every reader takes it: no ``NaN``, no infinities."""


def strict_json(field: str, text: str) -> Any:
    """``text`` decoded as strict JSON."""
    try:
        return _STRICT.decode(text)
    except ValueError as exc:
        raise LineError(field, f"is not valid JSON ({exc})") from None


def integer(field: str, value: int, least: int = 0) -> int:
    if not least <= value < INT64:
        raise LineError(field, f"is {_shown(value)}, outside {least}..{INT64 - 1}")
    return value


def finite(field: str, value: float) -> float:
    if not math.isfinite(value):
        raise LineError(field, f"is {_shown(value)}, not a finite number")
    return value


def plain_text(field: str, value: str) -> str:
    """Text a SQL column stores: no NUL character (PostgreSQL refuses it)."""
    if "\x00" in value:
        raise LineError(field, "holds a NUL character")
    return value


def encodable(raw: bytes, value: dict[str, Any]) -> None:
    """Every text of the line is valid Unicode (no lone surrogate)."""
    if not _SURROGATE.search(raw):
        return
    for name, item in value.items():
        _encodable(name, item)


def _encodable(field: str, value: object) -> None:
    if isinstance(value, str):
        try:
            value.encode()
        except UnicodeEncodeError:
            raise LineError(field, "holds a lone surrogate (not Unicode text)") from None
    elif isinstance(value, dict):
        for key, item in value.items():
            _encodable(f"{field}.{key}", key)
            _encodable(f"{field}.{key}", item)
    elif isinstance(value, list):
        for item in value:
            _encodable(field, item)


def session_line(value: dict[str, Any]) -> dict[str, Any] | None:
    """Check a ``session`` line; its index row as it will be stored (or ``None``)."""
    sid = value["session_id"]
    try:
        validate_session_id(sid)
    except ConfigurationError:
        raise LineError("session_id", f"is {_shown(sid)}, not a session id (1-128 letters, "
                        "digits, '.', '_', ':' or '-', starting with a letter or digit)"
                        ) from None
    integer("revision", value["revision"])
    integer("entry_count", value["entry_count"])
    integer("memory_generation", value["memory_generation"])
    finite("created_at", value["created_at"])
    finite("updated_at", value["updated_at"])
    snapshot = strict_json("snapshot", value["snapshot"])
    if not isinstance(snapshot, dict):
        raise LineError("snapshot", "is not a JSON object")
    index = value.get("index")
    return None if index is None else index_row(sid, index)


def index_row(sid: str, index: object) -> dict[str, Any]:
    """The index row as ``SessionRecord`` reads it, every number finite and 64-bit."""
    if not isinstance(index, dict):
        raise LineError("index", "is not a JSON object or null")
    try:
        record = SessionRecord.model_validate(index)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(map(str, error["loc"]))
        raise LineError(f"index.{where}", f"is {_shown(error.get('input'))}: "
                        f"{error['msg'].lower()}") from None
    if record.session_id != sid:
        raise LineError("index.session_id", f"is {_shown(record.session_id)}, not the "
                        f"session's id {sid}")
    for name in ("created_at", "last_active", "cost_usd"):
        finite(f"index.{name}", getattr(record, name))
    for name in ("turn_count", "message_count", "input_tokens", "output_tokens"):
        integer(f"index.{name}", getattr(record, name), -INT64)
    for name in ("title", "model", "status"):
        plain_text(f"index.{name}", getattr(record, name))
    try:
        metadata = json.dumps(record.metadata, allow_nan=False)
    except ValueError:
        raise LineError("index.metadata", "holds NaN or an infinity") from None
    if "\\u0000" in metadata:
        raise LineError("index.metadata", "holds a NUL character")
    lineage(record.metadata)
    return record.model_dump(mode="json")


def lineage(metadata: dict[str, Any]) -> None:
    parent, point = metadata.get("forked_from"), metadata.get("fork_point")
    if "forked_from" in metadata and parent is not None:
        if not isinstance(parent, str):
            raise LineError("index.metadata.forked_from", "is not a session id")
        try:
            validate_session_id(parent)
        except ConfigurationError:
            raise LineError("index.metadata.forked_from", f"is {_shown(parent)}, not a "
                            "session id") from None
    if point is not None and (isinstance(point, bool) or not isinstance(point, int)
                              or not 0 <= point < INT64):
        raise LineError("index.metadata.fork_point", f"is {_shown(point)}, not an entry "
                        "count")


def parent_of(index: dict[str, Any] | None) -> str | None:
    """The session an index row says this one was forked from."""
    parent = None if index is None else index["metadata"].get("forked_from")
    return parent if isinstance(parent, str) else None


def entry_line(value: dict[str, Any]) -> None:
    text = value["entry"]
    if "NaN" in text or "Infinity" in text:  # the validator below would take them
        strict_json("entry", text)
    try:
        _ENTRY(text)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(map(str, error["loc"]))
        raise LineError("entry", f"is not a conversation entry ({where}: "
                        f"{error['msg'].lower()})") from None


def step_line(value: dict[str, Any]) -> tuple[str, str, str, float]:
    """Check a ``step`` line; the step update row it stores."""
    plain_text("step_id", value["step_id"])
    plain_text("update_type", value["update_type"])
    strict_json("payload", value["payload"])
    finite("updated_at", value["updated_at"])
    return value["step_id"], value["update_type"], value["payload"], value["updated_at"]


def event_line(value: dict[str, Any], previous: int) -> int:
    """Check an ``event`` line that follows the event numbered ``previous``; its number."""
    seq = integer("seq", value["seq"])
    if seq <= previous:
        raise LineError("seq", f"is {seq}, not after the previous event's {previous}")
    finite("at", value["at"])
    if not plain_text("kind", value["kind"]):
        raise LineError("kind", "is empty")
    if not isinstance(strict_json("data", value["data"]), dict):
        raise LineError("data", "is not a JSON object")
    return seq


def decodes(session: tuple[int, dict[str, Any]],
            steps: list[tuple[int, tuple[str, str, str, float]]]) -> None:
    """The session's snapshot and step updates decode as the runtime decodes them, as
    this very session; a refusal names the line that does not."""
    from nonoka.store.base import decode_session

    number, value = session
    sid, snapshot, revision = value["session_id"], value["snapshot"], value["revision"]
    try:
        state = decode_session(sid, snapshot, [], revision, [])
    except StoreError as exc:
        raise refusal(number, "session", LineError(
            "snapshot", f"does not decode as a session: {_problem(sid, exc)}")) from None
    if state.session_id != sid:
        raise refusal(number, "session", LineError(
            "snapshot", f"is the state of session {_shown(state.session_id)}, not of {sid}"))
    try:
        decode_session(sid, snapshot, [], revision, [row for _, row in steps])
    except StoreError as merged:
        for line, row in steps:  # find the step that does not, to name its line
            try:
                decode_session(sid, snapshot, [], revision, [row])
            except StoreError as exc:
                raise refusal(line, "step", LineError(
                    "payload", f"does not decode: {_problem(sid, exc)}")) from None
        raise refusal(number, "session", LineError(
            "snapshot", f"does not decode with its step updates: {_problem(sid, merged)}")
        ) from None


def _problem(sid: str, exc: StoreError) -> str:
    """The decoder's complaint, on one line, without what it says of stored rows."""
    text = " ".join(str(exc).split()).removeprefix(f"session {sid}: ")
    for tail in ("; the rows were left as they are", "; the row was left as it is"):
        text = text.removesuffix(tail)
    return text[:300]
