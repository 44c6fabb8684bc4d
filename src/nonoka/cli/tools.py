"""The tools ``nonoka run`` gives the model: read-only looks at the project directory.

They run in-process, so they are deliberately harmless: they only read, they are
idempotent (crash repair may re-run them), and:

- every path is opened beneath the project with ``cli/confined.py`` (no check-then-open
  race: a symlink swapped in mid-call cannot lead outside);
- only regular files are read (a FIFO, a device or a socket is refused, never waited
  on), a file is scanned up to ``MAX_SCAN_BYTES`` whatever the window asked for, and
  each call has a time limit (``NONOKA_TOOL_TIMEOUT``, default ``TOOL_TIMEOUT``) and runs
  on a daemon thread, so Ctrl-C and the limit end the turn at once;
- the project's own ``.nonoka/`` (the database, the provider's id file, the config) is
  refused; what a file holds goes through the one credential redaction
  (``nonoka.redact.FileRedaction``), judged by its name and its content: every value of
  a settings file (``.env``-style, or only ``NAME=value`` lines) is masked, a key file
  (``id_rsa``, ``*.key``) is masked whole, and a private key block is masked from its
  ``BEGIN`` to its ``END`` even when a window starts or ends inside it. ``search_text``
  matches what ``read_file`` would show, so a masked value cannot be found by guessing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import stat
import threading
import time
from collections.abc import Callable, Iterator
from io import BufferedReader, FileIO
from pathlib import Path
from typing import TypeVar

from nonoka.cli.confined import OutsideError, open_beneath
from nonoka.errors import ToolError
from nonoka.redact import FileRedaction
from nonoka.runtime.tools import Tool, make_tool
from nonoka.signals import STOP_SIGNALS

MAX_LINES = 400
MAX_LINE_CHARS = 2000
MAX_ENTRIES = 500
MAX_MATCHES = 200
MAX_FILE_BYTES = 2_000_000
"""``search_text`` skips larger files."""
MAX_SCAN_BYTES = 16 * 1024 * 1024
"""``read_file`` reads no further into a file than this, whatever its window."""
MAX_FILES_SEARCHED = 5000
CONTEXT_LINES = 8
"""Lines around a ``read_file`` window that are redacted with it: a credential written
over several lines (a ``.netrc`` entry) is recognised at the window's edge."""
TOOL_TIMEOUT = 30.0
"""Seconds a tool call may take (``NONOKA_TOOL_TIMEOUT`` overrides)."""
PRIVATE_DIR = ".nonoka"
SKIPPED_DIRS = frozenset({".git", ".hg", ".svn", ".nonoka", ".venv", "venv", "node_modules",
                          "__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".tox"})
"""Directories ``search_text`` does not descend into (tooling, caches, nonoka's database)."""

T = TypeVar("T")


def builtin_tools(project: Path) -> list[Tool]:
    """``read_file``, ``list_dir`` and ``search_text`` confined to ``project``."""
    root = str(project.resolve())

    async def read_file(path: str, offset: int = 0, limit: int = MAX_LINES) -> str:
        """Read a text file of the project, a window of lines at a time.

        Args:
            path: the file, relative to the project directory
            offset: the first line to return (0 is the first line of the file)
            limit: how many lines to return at most
        """
        return await bounded(lambda deadline: _read_file(root, path, offset, limit))

    async def list_dir(path: str = ".") -> str:
        """List a directory of the project: sub-directories end with "/", files show sizes.

        Args:
            path: the directory, relative to the project directory
        """
        return await bounded(lambda deadline: _list_dir(root, path))

    async def search_text(text: str, path: str = ".", max_results: int = 50) -> str:
        """Find lines containing a text (case-insensitive) in the project's files.

        Args:
            text: the text to look for (plain text, not a pattern)
            path: a directory (or file) of the project to search, relative to it
            max_results: how many matching lines to return at most
        """
        return await bounded(lambda deadline: _search_text(root, text, path, max_results,
                                                           deadline))

    return [make_tool(function, idempotent=True)
            for function in (read_file, list_dir, search_text)]


def tool_timeout() -> float:
    try:
        return max(0.001, float(os.environ.get("NONOKA_TOOL_TIMEOUT") or TOOL_TIMEOUT))
    except ValueError:
        return TOOL_TIMEOUT


async def bounded(work: Callable[[float], T]) -> T:
    """Run ``work(deadline)`` on a daemon thread; a ``ToolError`` when it overruns.

    Not ``asyncio.to_thread``: ``asyncio.run`` waits for its executor's threads on the
    way out, so a call stuck in the kernel would keep Ctrl-C from ending the process.
    The thread also checks ``deadline`` itself, so an overrun call stops working soon,
    and blocks SIGINT and SIGTERM: the kernel hands a process's signal to any thread
    that takes it, and one taken by a thread stuck in ``open`` reached the main thread's
    handler only when its ``select`` next woke by itself.
    """
    limit = tool_timeout()
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()
    deadline = time.monotonic() + limit

    def settle(outcome: Callable[[], None]) -> None:
        if not future.done():
            outcome()

    def hand_over(outcome: Callable[[], None]) -> None:
        # The loop may be gone (the turn was cancelled): nobody waits any more.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, outcome)

    def target() -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            value = work(deadline)
        except BaseException as exc:  # handed to the awaiting task
            error = exc
            hand_over(lambda: future.set_exception(error))
        else:
            hand_over(lambda: future.set_result(value))

    threading.Thread(target=target, name="nonoka-tool", daemon=True).start()
    try:
        return await asyncio.wait_for(future, limit)
    except TimeoutError:
        raise ToolError(f"the tool call took longer than {limit:g} s and was stopped; "
                        "ask for a smaller directory or file") from None


class _Deadline(Exception):
    pass


# -- opening -------------------------------------------------------------------------------


def _open(root: str, path: str, *, directory: bool = False) -> tuple[int, str]:
    """A descriptor beneath ``root`` and its path as shown; ``ToolError`` for the rest."""
    if not path.strip():
        path = "."
    try:
        fd, parts = open_beneath(root, path, directory=directory)
    except OutsideError:
        raise ToolError(f"{path!r} is outside the project directory; "
                        "only paths inside it can be read") from None
    except FileNotFoundError:
        raise ToolError(f"{path!r} does not exist in the project") from None
    except NotADirectoryError:
        raise ToolError(f"{path!r} is not a directory of the project") from None
    except OSError as exc:
        raise ToolError(f"{path!r} cannot be opened: {exc.strerror}") from None
    if parts and parts[0] == PRIVATE_DIR:
        os.close(fd)
        raise ToolError(f"{path!r} is inside {PRIVATE_DIR}/, nonoka's own data (the session "
                        "database and settings), which the tools do not read")
    return fd, "/".join(parts) or "."


def _regular(fd: int, path: str) -> os.stat_result:
    info = os.fstat(fd)
    if stat.S_ISDIR(info.st_mode):
        raise ToolError(f"{path!r} is a directory; use list_dir")
    if not stat.S_ISREG(info.st_mode):
        raise ToolError(f"{path!r} is not a regular file (a FIFO, device or socket); "
                        "only files can be read")
    return info


def _name(shown: str) -> str:
    return shown.rsplit("/", 1)[-1]


# -- read_file -----------------------------------------------------------------------------


def _read_file(root: str, path: str, offset: int, limit: int) -> str:
    fd, shown = _open(root, path)
    try:
        _regular(fd, path)
    except BaseException:
        os.close(fd)
        raise
    with BufferedReader(FileIO(fd, "rb"), buffer_size=65536) as handle:
        if b"\0" in handle.read(8192):
            raise ToolError(f"{path!r} is a binary file")
        handle.seek(0)
        start, count = max(offset, 0), min(max(limit, 1), MAX_LINES)
        redaction = FileRedaction(_name(shown))
        first = max(0, start - CONTEXT_LINES)
        around, inside, total, complete = _window(handle, first,
                                                  start - first + count + CONTEXT_LINES,
                                                  redaction)
    if total == 0:
        return "[empty file]"
    masked = redaction.lines(around, inside=inside)[start - first:][:count]
    window = [line[:MAX_LINE_CHARS] for line in masked]
    body = "\n".join(window)
    if start + len(window) < total or not complete:
        of = f"{total}" if complete else f"at least {total} (read stopped at "\
                                         f"{MAX_SCAN_BYTES // (1024 * 1024)} MiB)"
        body += (f"\n[lines {start + 1}-{start + len(window)} of {of}; "
                 f"read on with offset={start + len(window)}]")
    return body


def _window(handle: BufferedReader[FileIO], start: int, count: int,
            redaction: FileRedaction) -> tuple[list[str], bool, int, bool]:
    """The lines ``start .. start + count`` (each clipped to a few thousand characters),
    whether the first of them starts inside a key block, how many lines were seen and
    whether the whole file was. Every line is shown to ``redaction`` on the way; memory
    stays bounded by the window, not the file."""
    piece_size = MAX_LINE_CHARS * 4
    window: list[str] = []
    inside = False
    number, scanned, current, open_line = 0, 0, b"", False
    while scanned < MAX_SCAN_BYTES:
        piece = handle.readline(piece_size)
        if not piece:
            break
        scanned += len(piece)
        starts_inside = redaction.see(piece.decode("utf-8", errors="replace"),
                                      continued=open_line)
        if number == start and not open_line:
            inside = starts_inside
        in_window = start <= number < start + count
        if in_window and len(current) < piece_size:
            current += piece
        open_line = not piece.endswith(b"\n")
        if not open_line:
            if in_window:
                window.append(_decoded(current))
            current, number = b"", number + 1
    complete = not handle.peek(1)
    if open_line and complete:  # a last line without a newline
        if start <= number < start + count:
            window.append(_decoded(current))
        number += 1
    return window, inside, number, complete


def _decoded(line: bytes) -> str:
    return line.decode("utf-8", errors="replace").rstrip("\r\n")


# -- list_dir ------------------------------------------------------------------------------


def _list_dir(root: str, path: str) -> str:
    fd, shown = _open(root, path, directory=True)
    try:
        with os.scandir(fd) as listing:
            entries = sorted(((entry.is_dir(follow_symlinks=False), entry.name,
                               _size(entry)) for entry in listing),
                             key=lambda e: (not e[0], e[1]))
    finally:
        os.close(fd)
    lines = [name + "/" if is_dir else f"{name} ({size} bytes)"
             for is_dir, name, size in entries[:MAX_ENTRIES]]
    if len(entries) > MAX_ENTRIES:
        lines.append(f"[{len(entries) - MAX_ENTRIES} more entries not shown]")
    return "\n".join(lines) if lines else f"[{shown} is empty]"


def _size(entry: os.DirEntry[str]) -> int:
    try:
        return entry.stat(follow_symlinks=False).st_size
    except OSError:
        return 0


# -- search_text ---------------------------------------------------------------------------


def _search_text(root: str, text: str, path: str, max_results: int, deadline: float) -> str:
    if not text:
        raise ToolError("give the text to search for")
    fd, shown = _open(root, path, directory=False)
    needle, limit = text.casefold(), min(max(max_results, 1), MAX_MATCHES)
    matches: list[str] = []
    try:
        for name, file_fd in _files(fd, shown, deadline):
            for number, line in _matching_lines(file_fd, name, needle):
                matches.append(f"{name}:{number}: {line.strip()[:300]}")
                if len(matches) >= limit:
                    return "\n".join(matches) + f"\n[stopped at {limit} matches]"
    except _Deadline:
        raise ToolError("the search took too long and was stopped; search a smaller "
                        "directory") from None
    return "\n".join(matches) if matches else f"no line contains {text!r}"


def _files(fd: int, shown: str, deadline: float) -> Iterator[tuple[str, int]]:
    """``(path as shown, descriptor)`` of each regular file under ``fd`` (which this
    closes): a race-free walk, symlinks not followed, nonoka's and tooling's folders
    skipped. Each descriptor is closed once the consumer moves on."""
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            if stat.S_ISREG(os.fstat(fd).st_mode):
                yield shown, fd
            return
        prefix = "" if shown == "." else shown + "/"
        seen = 0
        for folder, dirs, names, dir_fd in os.fwalk(".", dir_fd=fd):
            dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
            base = prefix + ("" if folder == "." else folder[2:] + "/")
            for name in sorted(names):
                if time.monotonic() > deadline:
                    raise _Deadline
                try:
                    file_fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
                                      | os.O_CLOEXEC, dir_fd=dir_fd)
                except OSError:
                    continue  # a symlink (not followed), or gone
                try:
                    if stat.S_ISREG(os.fstat(file_fd).st_mode):
                        yield base + name, file_fd
                        seen += 1
                finally:
                    os.close(file_fd)
                if seen >= MAX_FILES_SEARCHED:
                    return
    finally:
        os.close(fd)


def _matching_lines(fd: int, name: str, needle: str) -> list[tuple[int, str]]:
    """``(number, line as read_file shows it)`` of the lines holding ``needle`` once
    masked: a masked value is neither shown nor found."""
    try:
        if os.fstat(fd).st_size > MAX_FILE_BYTES:
            return []
        data = os.pread(fd, MAX_FILE_BYTES + 1, 0)
    except OSError:
        return []
    if b"\0" in data[:8192]:
        return []
    text = data.decode("utf-8", errors="replace")
    if needle not in text.casefold():
        return []
    lines = [line.rstrip("\r") for line in text.split("\n")]
    redaction = FileRedaction(_name(name))
    for line in lines:
        redaction.see(line)
    return [(n, line) for n, line in enumerate(redaction.lines(lines), 1)
            if needle in line.casefold()]
