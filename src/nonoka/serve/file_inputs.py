"""``file_id`` in a request's input: the uploaded file's bytes, as an inline file part.

Before a request's input is read, ``attach`` finds every ``file_id`` its parts name and
loads those files of the request's owner (``nonoka.store.files``); the parsers of
content parts (``nonoka.serve.items``) then turn each into a ``FilePart`` holding the
bytes, exactly like a file sent inline, so the stored session, its export, ``db copy``
and the model all have the file itself. The part remembers the id in its
``provider_metadata`` (under ``FILES``, a key no provider adapter reads), so what the
API gives back (``input_items``, conversation items) names the file as the client did.

The files found are a context variable of the request, as its owner is
(``nonoka.serve.keys.current_owner``); an id that is not one of the owner's live files
is not found, whoever else may own it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from nonoka.serve.errors import ApiError, invalid
from nonoka.serve.keys import current_owner
from nonoka.state.messages import FilePart
from nonoka.store.files import FileRecord, FileStore
from nonoka.store.media import base64_text

FILES = "openai_files"
"""The ``provider_metadata`` key of a part that came from an uploaded file."""
MAX_FILES = 100
"""The most files one request may name by id."""

_IMAGES = ((b"\x89PNG\r\n\x1a\n", "image/png"), (b"\xff\xd8\xff", "image/jpeg"),
           (b"GIF87a", "image/gif"), (b"GIF89a", "image/gif"))


@dataclass(frozen=True)
class Attached:
    """A file a request names, with its bytes as base64 text."""

    record: FileRecord
    data: str


_ATTACHED: ContextVar[dict[str, Attached] | None] = ContextVar("nonoka_serve_files",
                                                               default=None)


def _may_name_files(raw: bytes) -> bool:
    """Whether a JSON body, as it came, can name a file by id: it holds the word
    ``file_id``, or an escape (``\\u...``) that could spell it. Most requests are a long
    history of text and name none: a byte search spares them the walk over every part."""
    return b"file_id" in raw or b"\\u" in raw


async def attach(store: FileStore, body: Any, raw: bytes) -> None:
    """Load the owner's files ``body`` (parsed from ``raw``) names by ``file_id`` for
    this request."""
    if not _may_name_files(raw):
        return
    wanted = list(dict.fromkeys(_file_ids(body)))
    if not wanted:
        return
    if len(wanted) > MAX_FILES:
        raise invalid(f"the request names {len(wanted)} files by file_id; at most "
                      f"{MAX_FILES} are accepted")
    owner = current_owner()
    found: dict[str, Attached] = {}
    for file_id in wanted:
        record = await store.get(owner, file_id)
        data = None if record is None else await store.content(owner, file_id)
        if record is not None and data is not None:
            found[file_id] = Attached(record, base64_text(data))
    _ATTACHED.set(found)


def _file_ids(body: Any) -> Iterator[str]:
    """The ids of the content parts that name a file by id (``input_file``,
    ``input_image``, Chat's ``file``): in the content (or a tool output's parts) of each
    item of ``input``, ``items`` or ``messages``, where content parts are. Only lists
    are looked into, so a long history of plain-text messages costs a type check a
    message; ``file_id`` elsewhere (a hosted tool's results a client sends back) is not
    a file to load."""
    if not isinstance(body, dict):
        return
    for key in ("input", "items", "messages"):
        items = body.get(key)
        if not isinstance(items, list):
            continue
        for item in items:
            if isinstance(item, dict):
                content, output = item.get("content"), item.get("output")
                if isinstance(content, list):
                    yield from _named(content)
                if isinstance(output, list):
                    yield from _named(output)


def _named(parts: list[Any]) -> Iterator[str]:
    for part in parts:
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind in ("input_file", "input_image"):
            found = part.get("file_id")
        elif kind == "file" and isinstance(part.get("file"), dict):
            found = part["file"].get("file_id")
        else:
            continue
        if isinstance(found, str):
            yield found


def stored_part(file_id: Any, param: str, *, image: bool = False) -> FilePart:
    """The part for an uploaded file named in the input (``param``: where, for the
    error); a 404 when the owner has no such file."""
    if not isinstance(file_id, str) or not file_id:
        raise invalid(f"{param} must be a string, the id of an uploaded file", param)
    found = (_ATTACHED.get() or {}).get(file_id)
    if found is None:
        raise ApiError(404, f"No such File object: {file_id}", param=param)
    record = found.record
    media_type = record.media_type
    if image and not media_type.startswith("image/"):
        media_type = _image_type(found.data) or ""
        if not media_type:
            raise invalid(f"the file {file_id} ({record.filename}, {record.media_type}) "
                          "is not an image: send it as input_file", param)
    return FilePart(media_type=media_type, data=found.data, filename=record.filename,
                    provider_metadata={FILES: {"file_id": file_id}})


def _image_type(data: str) -> str | None:
    """An image's media type from its first bytes (PNG, JPEG, GIF, WebP), else ``None``."""
    import base64

    head = base64.b64decode(data[:24])
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return next((kind for magic, kind in _IMAGES if head.startswith(magic)), None)


def file_id_of(part: FilePart) -> str | None:
    """The id a part's file was sent by, when it came from an uploaded file."""
    found = (part.provider_metadata or {}).get(FILES)
    file_id = found.get("file_id") if isinstance(found, dict) else None
    return file_id if isinstance(file_id, str) else None
