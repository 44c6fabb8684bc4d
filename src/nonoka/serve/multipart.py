"""``multipart/form-data`` bodies (RFC 7578), as the Files API receives uploads.

The body is read whole (the caller caps its size first), split on its boundary, and
each part's ``Content-Disposition`` gives its field name and, for a file, its file
name. Standard library only: a file's bytes are taken as they are, never decoded.
"""

from __future__ import annotations

from dataclasses import dataclass
from email.message import Message
from email.utils import collapse_rfc2231_value

from nonoka.serve.errors import invalid


@dataclass(frozen=True)
class Field:
    """One part of the form: a value, or a file (``filename`` set)."""

    name: str
    data: bytes
    filename: str | None = None
    content_type: str | None = None

    def text(self) -> str:
        try:
            return self.data.decode("utf-8")
        except UnicodeDecodeError:
            raise invalid(f"the form field {self.name!r} is not UTF-8 text",
                          self.name) from None


def boundary_of(content_type: str) -> str | None:
    """The boundary a ``multipart/form-data`` content type names, else ``None``."""
    header = Message()
    header["content-type"] = content_type
    if header.get_content_type() != "multipart/form-data":
        return None
    found = header.get_param("boundary")
    return found if isinstance(found, str) and found else None


def parse(body: bytes, boundary: str) -> list[Field]:
    """The parts of ``body``, in order; a clear 400 for a body that is not a form."""
    delimiter = b"--" + boundary.encode("latin-1")
    chunks = body.split(delimiter)
    if len(chunks) < 3 or not chunks[-1].startswith(b"--"):
        raise invalid("the multipart body is incomplete: it must end with its closing "
                      "boundary")
    fields = []
    for chunk in chunks[1:-1]:
        if not chunk.startswith(b"\r\n") or not chunk.endswith(b"\r\n"):
            raise invalid("a part of the multipart body is not delimited by CRLF")
        head, blank, data = chunk[2:-2].partition(b"\r\n\r\n")
        if not blank:
            raise invalid("a part of the multipart body has no Content-Disposition")
        fields.append(_field(head, data))
    return fields


def _field(head: bytes, data: bytes) -> Field:
    header = Message()
    for line in head.decode("utf-8", "replace").split("\r\n"):
        name, colon, value = line.partition(":")
        if colon:
            header[name.strip()] = value.strip()
    if header.get("content-disposition") is None:
        raise invalid("a part of the multipart body has no Content-Disposition")
    found = header.get_param("name", header="content-disposition")
    if found is None:
        raise invalid("a part of the multipart body has no field name")
    content_type = header.get_content_type() if header.get("content-type") else None
    return Field(collapse_rfc2231_value(found), data, header.get_filename(), content_type)
