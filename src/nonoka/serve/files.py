"""OpenAI's Files API: upload, list, retrieve, download and delete files.

A file is uploaded as ``multipart/form-data`` (``file``, ``purpose``) and answered as
OpenAI's ``File`` object; its bytes and metadata are kept in the project's database
(``nonoka.serve.file_store``) and belong to the request's owner: another owner's file id
is not found, as if it never existed. Requests name an uploaded file by ``file_id`` in
their input (``nonoka.serve.file_inputs``). Files do not expire.
"""

from __future__ import annotations

import mimetypes
import secrets
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from starlette.requests import Request

from nonoka.serve.errors import ApiError, invalid, not_available
from nonoka.serve.file_store import FileRecord, FileStore, Page, new_record
from nonoka.serve.keys import current_owner
from nonoka.serve.multipart import Field, boundary_of, parse
from nonoka.store.media import size_label

PURPOSES = ("assistants", "batch", "fine-tune", "vision", "user_data", "evals")
"""The purposes OpenAI accepts for an upload (openai-python's ``FilePurpose``)."""
MAX_FILE_BYTES = 32 * 1024 * 1024
"""The largest file an upload may hold (a model is sent the whole file inline)."""
FORM_SLACK = 64 * 1024
"""What a form may hold beside its file (boundaries, headers, ``purpose``)."""
MAX_LIST = 10_000
"""The most files one page of ``GET /v1/files`` lists (OpenAI's default and maximum)."""


class Files:
    """The Files API over a ``FileStore``; ``max_bytes``: the largest file accepted."""

    def __init__(self, store: FileStore, max_bytes: int = MAX_FILE_BYTES) -> None:
        self.store = store
        self.max_bytes = max_bytes

    async def upload(self, request: Request) -> dict[str, Any]:
        _same_origin(request)
        boundary = boundary_of(request.headers.get("content-type", ""))
        if boundary is None:
            raise ApiError(415, "send the file as multipart/form-data, with the fields "
                                "'file' and 'purpose'")
        fields = {f.name: f for f in parse(await self._body(request), boundary)}
        if "expires_after[anchor]" in fields or "expires_after[seconds]" in fields:
            raise not_available("expires_after (files do not expire)", "expires_after")
        file = fields.get("file")
        if file is None or file.filename is None:
            raise invalid("the form needs a 'file' field holding the file (with its "
                          "filename)", "file")
        purpose = _purpose(fields.get("purpose"))
        if len(file.data) > self.max_bytes:
            raise self._too_large()
        filename = file.filename.replace("\\", "/").rsplit("/", 1)[-1] or "file"
        record = new_record("file-" + secrets.token_hex(12), current_owner(), filename,
                            purpose, _media_type(file, filename), file.data)
        await self.store.add(record, file.data)
        return file_object(record)

    async def _body(self, request: Request) -> bytes:
        """The request's body, refused with a 413 as soon as it is too large."""
        cap = self.max_bytes + FORM_SLACK
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > cap:
            raise self._too_large()
        chunks: list[bytes] = []
        total = 0
        async for chunk in request.stream():
            total += len(chunk)
            if total > cap:
                raise self._too_large()
            chunks.append(chunk)
        return b"".join(chunks)

    def _too_large(self) -> ApiError:
        return ApiError(413, f"the file is larger than {size_label(self.max_bytes)}, the "
                             "largest nonoka serve accepts; send a smaller file",
                        param="file", code="file_too_large")

    async def listing(self, query: Mapping[str, str]) -> dict[str, Any]:
        owner = current_owner()
        purpose = query.get("purpose") or None
        limit = _limit(query.get("limit"))
        order = query.get("order", "desc")
        if order not in ("asc", "desc"):
            raise invalid(f"order must be 'asc' or 'desc', not {order!r}", "order")
        after = None
        if query.get("after"):
            after = await self.store.get(owner, query["after"])
            if after is None:
                raise invalid(f"No such File object: {query['after']}", "after")
        found = await self.store.page(Page(owner, purpose, limit + 1, order == "desc",
                                           after))
        data = [file_object(r) for r in found[:limit]]
        return {"object": "list", "data": data,
                "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None,
                "has_more": len(found) > limit}

    async def retrieve(self, file_id: str) -> dict[str, Any]:
        return file_object(await self._record(file_id))

    async def content(self, file_id: str) -> tuple[FileRecord, bytes]:
        record = await self._record(file_id)
        data = await self.store.content(current_owner(), file_id)
        if data is None:
            raise _missing(file_id)
        return record, data

    async def delete(self, file_id: str) -> dict[str, Any]:
        if not await self.store.delete(current_owner(), file_id):
            raise _missing(file_id)
        return {"id": file_id, "object": "file", "deleted": True}

    async def _record(self, file_id: str) -> FileRecord:
        found = await self.store.get(current_owner(), file_id)
        if found is None:
            raise _missing(file_id)
        return found


def _same_origin(request: Request) -> None:
    """A form, unlike JSON, is what any web page may post to another origin without the
    browser asking first: an upload a browser sent from a page of another origin (its
    ``Origin`` header names another host) is refused. API clients send no ``Origin``."""
    origin = request.headers.get("origin")
    if origin is not None and urlsplit(origin).netloc.lower() != \
            request.headers.get("host", "").lower():
        raise ApiError(403, "uploads from a web page of another origin are refused: send "
                            "the file from an API client", code="forbidden")


def file_object(record: FileRecord) -> dict[str, Any]:
    """A file as OpenAI's ``File`` object."""
    return {"id": record.file_id, "object": "file", "bytes": record.size,
            "created_at": int(record.created_at), "filename": record.filename,
            "purpose": record.purpose, "status": "processed", "expires_at": None,
            "status_details": None}


def _missing(file_id: str) -> ApiError:
    return ApiError(404, f"No such File object: {file_id}", param="id")


def _purpose(field: Field | None) -> str:
    if field is None:
        raise invalid("the form needs a 'purpose' field: one of " + ", ".join(PURPOSES),
                      "purpose")
    purpose = field.text()
    if purpose not in PURPOSES:
        raise invalid(f"{purpose!r} is not one of {list(PURPOSES)} - 'purpose'", "purpose")
    return purpose


def _limit(value: str | None) -> int:
    if value is None or value == "":
        return MAX_LIST
    if not value.isdigit() or not 1 <= int(value) <= MAX_LIST:
        raise invalid(f"limit must be a whole number from 1 to {MAX_LIST}, not {value!r}",
                      "limit")
    return int(value)


def _media_type(file: Field, filename: str) -> str:
    """The type the client sent, else the one its name suggests."""
    sent = file.content_type
    if sent and sent != "application/octet-stream":
        return sent
    return mimetypes.guess_type(filename)[0] or "application/octet-stream"
