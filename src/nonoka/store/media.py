"""File bytes stored once, by digest: what every engine does with an entry's files.

An entry's ``metadata["parts"]`` may hold files: ``{"type": "file", "media_type",
"data" (base64) | "url", "filename"?}``. Stored inline, a 2 MB screenshot would be
written into its entry row, into every export, and into every entry that sends it
again. So when a store saves an entry (``nonoka.store.base.encode_entry``), each inline
file's bytes go to the engine's ``media`` table under their digest (``sha256:`` and the
hex SHA-256 of the bytes, the same name ``sha256sum`` gives the file), with the media
type and size, once whatever the number of entries, branches and sessions holding them;
the entry row keeps a **reference** in the part's place: ``data`` becomes ``media`` (the
digest) at the same position, and ``size`` (the bytes' length) is added last::

    {"type": "file", "media_type": "image/png", "data": "iVBORw0...", "filename": "a.png"}
    {"type": "file", "media_type": "image/png", "media": "sha256:9f86...", "filename":
     "a.png", "size": 2097152}

The row also names the digests it refers to in a column of its own (``media``, a JSON
array; ``NULL`` for the rows without files), so a load knows which rows to complete
without looking into any other row, and fetches the bytes of a whole session in one
query. Loading puts ``data`` back where ``media`` was and drops ``size``: the part is
the one saved, key for key and byte for byte, so nothing above the store (the adapter
that sends it to a model, the early dispatch's digest) can tell.

A part moves only when it is exactly what nonoka writes: type ``file``, a string media
type, ``data`` in canonical base64 (what encoding its own bytes gives back; anything else
could not be restored byte for byte) and no ``media`` or ``size`` key of its own. Any
other part, a ``url`` one included, stays in the row as it is. Rows written before this
existed keep their inline bytes and load as they always did.

Standard library only, and nothing heavy at import: the bridge's early dispatch
completes raw rows before pydantic loads (``hashlib`` is imported when a digest is made).
Internal: this module's layout may change.
"""

from __future__ import annotations

import binascii
import json

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: the early path's import budget
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from typing import Any

PREFIX = "sha256:"
_HEX = frozenset("0123456789abcdef")
_DIGEST_LENGTH = len(PREFIX) + 64

IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp", "image/avif",
                         "image/bmp"})
"""Image types a browser may be handed as they are (``nonoka ui``): raster formats only,
never ``image/svg+xml``, which can carry script."""


class Media:
    """One stored file: its digest, media type and bytes."""

    __slots__ = ("data", "digest", "media_type")

    def __init__(self, digest: str, media_type: str, data: bytes) -> None:
        self.digest = digest
        self.media_type = media_type
        self.data = data

    @property
    def size(self) -> int:
        return len(self.data)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Media) and other.digest == self.digest
                and other.media_type == self.media_type and other.data == self.data)

    __hash__ = None  # type: ignore[assignment]  # compares by value

    def __repr__(self) -> str:
        return f"Media({self.digest!r}, {self.media_type!r}, {self.size} bytes)"


def digest_of(data: bytes) -> str:
    """The name the bytes are stored under: ``sha256:<hex>``."""
    import hashlib

    return PREFIX + hashlib.sha256(data).hexdigest()


def is_digest(value: object) -> bool:
    """Whether ``value`` is a digest as nonoka writes them (lower-case hex)."""
    return (isinstance(value, str) and len(value) == _DIGEST_LENGTH
            and value.startswith(PREFIX) and _HEX.issuperset(value[len(PREFIX):]))


def base64_text(data: bytes) -> str:
    """The bytes as a file part's ``data`` (standard base64, padded, one line)."""
    return binascii.b2a_base64(data, newline=False).decode("ascii")


def canonical_bytes(text: str) -> bytes | None:
    """The bytes ``text`` encodes when it is canonical base64 (exactly what
    ``base64_text`` gives for them), else ``None``: strict decoding refuses anything but
    the alphabet and correct padding, and only the last quantum can hide bits that
    encoding would not give back."""
    try:
        raw = binascii.a2b_base64(text, strict_mode=True)
    except (binascii.Error, ValueError):
        return None
    if raw and binascii.b2a_base64(raw[-(len(raw) % 3 or 3):], newline=False) \
            != text[-4:].encode("ascii"):
        return None
    return raw


def _movable(part: object) -> bool:
    return (isinstance(part, dict) and part.get("type") == "file"
            and isinstance(part.get("data"), str) and isinstance(part.get("media_type"), str)
            and "media" not in part and "size" not in part)


def _is_reference(part: object) -> bool:
    return (isinstance(part, dict) and part.get("type") == "file" and "data" not in part
            and is_digest(part.get("media")))


def stored_parts(parts: object) -> tuple[list[Any], list[Media]] | None:
    """``parts`` with each inline file's bytes replaced by a reference, and those files
    (in order, repeats included); ``None`` when no part moves (the row is stored as it
    is)."""
    if not isinstance(parts, list):
        return None
    out: list[Any] | None = None
    files: list[Media] = []
    for at, part in enumerate(parts):
        if not _movable(part):
            continue
        raw = canonical_bytes(part["data"])
        if raw is None:
            continue
        file = Media(digest_of(raw), part["media_type"], raw)
        reference = {("media" if key == "data" else key): (file.digest if key == "data"
                                                           else value)
                     for key, value in part.items()}
        reference["size"] = file.size
        if out is None:
            out = list(parts)
        out[at] = reference
        files.append(file)
    return None if out is None else (out, files)


def column(digests: Iterable[str]) -> str:
    """The ``media`` column of a row referring to ``digests`` (each once, in order)."""
    return json.dumps(list(dict.fromkeys(digests)), separators=(",", ":"))


def files_column(files: Sequence[Media]) -> str:
    return column(f.digest for f in files)


def digests(value: str | None) -> list[str]:
    """The digests a ``media`` column names; ``[]`` for ``NULL`` or a damaged value (the
    row's references then show up as files that are not stored)."""
    if value is None:
        return []
    try:
        found = json.loads(value)
    except ValueError:
        return []
    return [d for d in found if is_digest(d)] if isinstance(found, list) else []


def references(text: str) -> str | None:
    """The ``media`` column for an entry row's text: what an import or a check derives
    from rows it did not encode. ``None`` when the row refers to no stored file (most
    rows are settled by substring tests, without decoding them; a row that could spell
    the key with JSON escapes, ``"\\u006dedia"``, is decoded)."""
    if '"media"' not in text and "\\u" not in text:
        return None
    try:
        entry = json.loads(text)
    except ValueError:
        return None
    meta = entry.get("metadata") if isinstance(entry, dict) else None
    parts = meta.get("parts") if isinstance(meta, dict) else None
    if not isinstance(parts, list):
        return None
    found = [p["media"] for p in parts if _is_reference(p)]
    return column(found) if found else None


def restored_parts(parts: list[Any], found: Mapping[str, str]) -> list[Any]:
    """``parts`` with each reference completed from ``found`` (digest → base64 text);
    a ``KeyError`` naming the digest when a file is not there."""
    out = list(parts)
    for at, part in enumerate(parts):
        if _is_reference(part):
            data = found[part["media"]]
            out[at] = {("data" if key == "media" else key): (data if key == "media" else value)
                       for key, value in part.items() if key != "size"}
    return out


def restored_text(text: str, found: Mapping[str, str]) -> str:
    """A raw entry row with its references completed (standard library, for readers
    that work on the rows' JSON before pydantic is loaded); ``KeyError`` as above."""
    entry = json.loads(text)
    meta = entry.get("metadata") if isinstance(entry, dict) else None
    if not isinstance(meta, dict) or not isinstance(meta.get("parts"), list):
        return text
    meta["parts"] = restored_parts(meta["parts"], found)
    return json.dumps(entry, ensure_ascii=False, separators=(",", ":"))


def needed(columns: Iterable[str | None]) -> list[str]:
    """Every digest the ``media`` columns name, once."""
    return list(dict.fromkeys(d for value in columns if value is not None
                              for d in digests(value)))


def size_label(size: int) -> str:
    """``2.0 MiB``, ``512 B``: a file's size for a person."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def part_size(part: Mapping[str, Any]) -> int | None:
    """The bytes of a file part, stored (``size``) or inline (from its base64 text),
    without decoding them; ``None`` for a file at a ``url``."""
    size = part.get("size")
    if isinstance(size, int) and not isinstance(size, bool):
        return size
    data = part.get("data")
    if not isinstance(data, str):
        return None
    return len(data) * 3 // 4 - data[-2:].count("=")


def describe(part: Mapping[str, Any]) -> str:
    """A file part named for a person, never its bytes: ``[image shot.png, image/png,
    2.0 MiB]``, ``[file report.pdf, application/pdf, 120.4 KiB]``, ``[file
    https://example.com/a.pdf, application/pdf]``."""
    media_type = str(part.get("media_type") or "?")
    kind = "image" if media_type.startswith("image/") else "file"
    name = part.get("filename") or part.get("url")
    size = part_size(part)
    fields = [f"{kind} {name}" if name else kind, media_type]
    if size is not None:
        fields.append(size_label(size))
    return "[" + ", ".join(fields) + "]"


def file_parts(metadata: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The file parts of an entry's metadata, as stored (references or inline)."""
    parts = metadata.get("parts")
    if not isinstance(parts, list):
        return []
    return [p for p in parts if isinstance(p, dict) and p.get("type") == "file"]
