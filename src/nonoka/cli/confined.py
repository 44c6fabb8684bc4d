"""Opening a path beneath a directory so that nothing can make it leave that directory.

Checking a path and then opening it is a race: a file swapped for a symlink in between
opens whatever the symlink points at. Here every component is opened relative to the
file descriptor of its parent with ``O_NOFOLLOW``; a symlink met on the way is read (its
text only) and resolved component by component the same way, and ``..`` steps back
along the descriptors already opened, never above the root. What the caller gets is a
descriptor of the object actually opened, never a path to open again. ``O_NONBLOCK``
keeps a FIFO from blocking the open; callers check the descriptor's type.
"""

from __future__ import annotations

import errno
import os
from collections import deque
from typing import NamedTuple

MAX_SYMLINKS = 40


class OutsideError(Exception):
    """The path leaves the root (by ``..``, an absolute path or a symlink)."""


class Opened(NamedTuple):
    """A descriptor and the path, below the root, of what it actually opened."""

    fd: int
    parts: tuple[str, ...]


def _parts(path: str) -> list[str]:
    return [p for p in path.split("/") if p not in ("", ".")]


def _relative_to_root(root: str, path: str) -> list[str]:
    """An absolute path as components below ``root``; ``OutsideError`` if it is not."""
    if path == root or path.startswith(root.rstrip("/") + "/"):
        return _parts(path[len(root):])
    raise OutsideError(path)


def open_beneath(root: str, path: str, *, directory: bool = False) -> Opened:
    """A descriptor for ``path`` (relative to ``root``, or absolute inside it), and where
    it really is below ``root``, symlinks resolved.

    ``root`` must be an absolute path without symlinks. Raises ``OutsideError`` when the
    path leaves it, ``OSError`` (``ENOENT``, ``ENOTDIR``...) when it does not exist.
    """
    pending: deque[str] = deque(_relative_to_root(root, path) if path.startswith("/")
                                else _parts(path))
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    chain = [os.open(root, flags | os.O_DIRECTORY)]
    names: list[str] = []
    links = 0
    try:
        while pending:
            name = pending.popleft()
            if name == "..":
                if len(chain) == 1:
                    raise OutsideError(path)
                os.close(chain.pop())
                names.pop()
                continue
            want_dir = directory or bool(pending)
            try:
                fd = os.open(name, flags | (os.O_DIRECTORY if want_dir else 0),
                             dir_fd=chain[-1])
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                try:
                    target = os.readlink(name, dir_fd=chain[-1])
                except OSError:
                    raise exc from None  # not a symlink: a file where a directory was asked
                links += 1
                if links > MAX_SYMLINKS:
                    raise OSError(errno.ELOOP, "too many levels of symbolic links",
                                  path) from None
                if target.startswith("/"):
                    rest = _relative_to_root(root, os.path.normpath(target))
                    while len(chain) > 1:
                        os.close(chain.pop())
                    names.clear()
                    pending.extendleft(reversed(rest))
                else:
                    pending.extendleft(reversed(_parts(target)))
                continue
            chain.append(fd)
            names.append(name)
        result = chain.pop() if len(chain) > 1 else os.dup(chain[0])
        return Opened(result, tuple(names))
    finally:
        for fd in chain:
            os.close(fd)
