"""OpenAI's Files API: upload, list, retrieve, download and delete files.

A file is uploaded as ``multipart/form-data`` (``file``, ``purpose``) and answered as
OpenAI's ``File`` object; its bytes and metadata are kept in the project's database
(``nonoka.store.files``) and belong to the request's owner: another owner's file id
is not found, as if it never existed. Requests name an uploaded file by ``file_id`` in
their input (``nonoka.serve.file_inputs``). Files do not expire.
"""

from __future__ import annotations

import mimetypes
import secrets
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from starlette.datastructures import FormData, UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.types import Message

from nonoka.serve.errors import ApiError, invalid, not_available
from nonoka.serve.keys import current_owner
from nonoka.store.files import FileRecord, FileStore, Page, new_record
from nonoka.store.media import size_label

PURPOSES = ("assistants", "batch", "fine-tune", "vision", "user_data", "evals")
"""The purposes OpenAI accepts for an upload (openai-python's ``FilePurpose``)."""
MAX_FILE_BYTES = 32 * 1024 * 1024
"""The largest file an upload may hold (a model is sent the whole file inline)."""
FORM_SLACK = 64 * 1024
"""What a form may hold beside its file (boundaries, headers, ``purpose``), and the
largest of its other fields."""
MAX_FIELDS = 8
"""The most fields beside the file a form may hold (``purpose``, ``expires_after``)."""
MAX_LIST = 10_000
"""The most files one page of ``GET /v1/files`` lists (OpenAI's default and maximum)."""


class Files:
    """The Files API over a ``FileStore``; ``max_bytes``: the largest file accepted."""

    def __init__(self, store: FileStore, max_bytes: int = MAX_FILE_BYTES) -> None:
        self.store = store
        self.max_bytes = max_bytes

    async def upload(self, request: Request) -> dict[str, Any]:
        _same_origin(request)
        if _content_type(request) != "multipart/form-data":
            raise ApiError(415, "send the file as multipart/form-data, with the fields "
                                "'file' and 'purpose'")
        form = await self._form(request)
        try:
            if "expires_after[anchor]" in form or "expires_after[seconds]" in form:
                raise not_available("expires_after (files do not expire)", "expires_after")
            file = form.get("file")
            if not isinstance(file, UploadFile) or file.filename is None:
                raise invalid("the form has no complete 'file' part: send a 'file' field "
                              "holding the file, with its filename, and end the body with "
                              "its closing boundary", "file")
            purpose = _purpose(form.get("purpose"))
            if file.size is not None and file.size > self.max_bytes:
                raise self._too_large()
            data = await file.read()
            if len(data) > self.max_bytes:
                raise self._too_large()
        finally:
            await form.close()
        filename = file.filename.replace("\\", "/").rsplit("/", 1)[-1] or "file"
        record = new_record("file-" + secrets.token_hex(12), current_owner(), filename,
                            purpose, _media_type(file.content_type, filename), data)
        await self.store.add(record, data)
        return file_object(record)

    async def _form(self, request: Request) -> FormData:
        """The request's form, parsed by python-multipart (Starlette's form reader) as the
        body arrives: one file at most, small fields, and a 413 as soon as the body is
        larger than a file may be; a body that is not a well-formed form is a 400."""
        cap = self.max_bytes + FORM_SLACK
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > cap:
            raise self._too_large()
        closing = b"--" + _boundary(request) + b"--"
        received = 0
        tail = b""

        async def receive() -> Message:
            nonlocal received, tail
            message = await request.receive()
            body = message.get("body", b"")
            received += len(body)
            if received > cap:
                raise self._too_large()
            tail = (tail + body)[-(len(closing) + 64):]
            if message["type"] == "http.request" and not message.get("more_body") and \
                    not tail.rstrip(b"\r\n\t ").endswith(closing):
                raise invalid("the multipart body is cut short: send a 'file' part and a "
                              "'purpose' field, and end the body with its closing "
                              "boundary", "file")
            return message

        try:
            return await Request(request.scope, receive).form(
                max_files=1, max_fields=MAX_FIELDS, max_part_size=FORM_SLACK)
        except HTTPException as exc:
            raise invalid(f"the upload is not a well-formed multipart form ({exc.detail}): "
                          "send one 'file' part and a 'purpose' field") from None

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


def _purpose(field: str | UploadFile | None) -> str:
    if field is None:
        raise invalid("the form needs a 'purpose' field: one of " + ", ".join(PURPOSES),
                      "purpose")
    if not isinstance(field, str) or field not in PURPOSES:
        shown = field if isinstance(field, str) else "a file"
        raise invalid(f"{shown!r} is not one of {list(PURPOSES)} - 'purpose'", "purpose")
    return field


def _boundary(request: Request) -> bytes:
    """The boundary the request's form names (``b""`` when none: the form reader refuses
    that form before it reads the body). python-multipart is imported here, when a form
    is read, not with the module."""
    from python_multipart.multipart import parse_options_header

    _, params = parse_options_header(request.headers.get("content-type", ""))
    found = params.get(b"boundary", b"")
    return found if isinstance(found, bytes) else found.encode("latin-1")


def _content_type(request: Request) -> str:
    """The request's media type, without its parameters, in lower case."""
    return request.headers.get("content-type", "").partition(";")[0].strip().lower()


def _limit(value: str | None) -> int:
    if value is None or value == "":
        return MAX_LIST
    if not value.isdigit() or not 1 <= int(value) <= MAX_LIST:
        raise invalid(f"limit must be a whole number from 1 to {MAX_LIST}, not {value!r}",
                      "limit")
    return int(value)


def _media_type(sent: str | None, filename: str) -> str:
    """The type the client sent, else the one its name suggests."""
    if sent and sent != "application/octet-stream":
        return sent
    return mimetypes.guess_type(filename)[0] or "application/octet-stream"
