"""The persisted copy of the provider's chat session id: ``<cwd>/.nonoka/provider-session.id``.

Only the session id crosses a process boundary, so the provider keeps it on disk between
runs of the host. The file is a copy, never the authority: the request's
history decides whether a conversation is new. Its content is therefore treated as
untrusted input — anything that does not look like a session id is ignored with a warning
rather than sent to the bridge — and it is written atomically (temp file + rename) so a
crash can never leave half an id behind.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from pathlib import Path

from nonoka.errors import ConfigurationError
from nonoka.state.ids import SESSION_ID_PATTERN

__all__ = (
    "ID_FILE_NAME",
    "STATE_DIR_NAME",
    "clear_session_id",
    "id_file_path",
    "is_plausible_session_id",
    "read_session_id",
    "write_session_id",
)

logger = logging.getLogger("nonoka.provider")

STATE_DIR_NAME = ".nonoka"
ID_FILE_NAME = "provider-session.id"
_MAX_FILE_BYTES = 4096
"""A session id is at most 128 characters; anything far larger is not one (don't slurp it)."""


def id_file_path(cwd: str | os.PathLike[str]) -> Path:
    """Where the provider keeps the chat session id for the workspace ``cwd``."""
    return Path(cwd) / STATE_DIR_NAME / ID_FILE_NAME


def is_plausible_session_id(value: object) -> bool:
    """Whether ``value`` has the shape of a session id
    (``nonoka.state.ids.SESSION_ID_PATTERN``)."""
    return isinstance(value, str) and SESSION_ID_PATTERN.fullmatch(value) is not None


def read_session_id(path: str | os.PathLike[str]) -> str | None:
    """The id stored at ``path``, or ``None`` when there is none usable.

    Surrounding whitespace (the trailing newline an editor adds) is allowed. A missing
    file is normal; an unreadable file or content that is not a plausible id is logged as
    a warning and ignored, so a damaged file can never steer a request into a session.
    """
    path = Path(path)
    try:
        with path.open("rb") as handle:
            data = handle.read(_MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        logger.warning("ignoring the provider session id file %s: cannot read it (%s)",
                       path, exc)
        return None
    if len(data) > _MAX_FILE_BYTES:
        logger.warning("ignoring the provider session id file %s: it is over %d bytes, "
                       "far too long for a session id", path, _MAX_FILE_BYTES)
        return None
    try:
        text = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        logger.warning("ignoring the provider session id file %s: it is not UTF-8 text",
                       path)
        return None
    if not text:
        return None
    if not is_plausible_session_id(text):
        logger.warning("ignoring the provider session id file %s: its content is not a "
                       "plausible session id (expected 1-128 letters, digits, '.', '_', "
                       "':' or '-'); the next request will start or recover a session",
                       path)
        return None
    return text


def write_session_id(path: str | os.PathLike[str], session_id: str) -> None:
    """Store ``session_id`` at ``path`` atomically, readable by the owner only.

    The parent directory is created with mode 0700 when missing (an existing one is left
    as it is: the bridge shares it). The id is written to a temp file in the same
    directory, flushed to disk and renamed over the old file, so readers see either the
    old id or the new one. Raises ``ConfigurationError`` for an implausible id and
    ``OSError`` when the file cannot be written.
    """
    if not is_plausible_session_id(session_id):
        raise ConfigurationError(f"refusing to store {session_id!r}: not a session id")
    path = Path(path)
    _ensure_private_dir(path.parent)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:  # mkstemp creates the file with mode 0600
            handle.write(session_id.encode("ascii") + b"\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise
    _fsync_dir(path.parent)


def clear_session_id(path: str | os.PathLike[str]) -> None:
    """Remove the stored id, so a stale copy cannot outlive the in-memory id it mirrors."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _ensure_private_dir(directory: Path) -> None:
    if directory.is_dir():
        return
    directory.mkdir(mode=0o700, parents=False, exist_ok=True)
    # mkdir's mode is filtered by the umask; set it exactly.
    os.chmod(directory, 0o700)


def _fsync_dir(directory: Path) -> None:
    """Make the rename itself durable; best effort (not every platform allows it)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
