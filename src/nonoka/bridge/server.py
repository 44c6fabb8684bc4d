"""The stdio loop of ``nonoka bridge``: NDJSON requests in, events out.

A provider starts this process for a model step, so the order of work is chosen for
start-up time: the first line is read and checked, and ``protocol_ack`` is written, with
nothing but ``json`` imported; only then are pydantic, the runtime and the store loaded.
The process then serves further requests one after another as they come: the OpenCode
provider keeps it warm for the next step of the same host session
(docs/architecture.md, "Warm bridges"): each request is dispatched early as the first
one is, takes the project's stores kept open since the last one (``KeptStores``, checked
against the file on disk) and loads its session under the lease; nothing of a request is
kept only here, so the process may be killed between two requests.

End of input after a request does not cancel it: the request finishes, then the process
exits 0. ``cancel``, SIGTERM and SIGINT stop the running request; the runtime saves the
session as it stands and the request finishes ``cancelled``.
"""

from __future__ import annotations

import os
import select
import sys

from nonoka import __version__, faults
from nonoka.protocol import frames
from nonoka.protocol.frames import DEFAULT_MAX_FRAME_BYTES, RequestType
from nonoka.signals import StopSignals

TYPE_CHECKING = False
if TYPE_CHECKING:
    import asyncio
    from typing import Any, BinaryIO

    from nonoka.bridge.early import Dispatched
    from nonoka.bridge.reuse import BridgeReuse
    from nonoka.store.kept import KeptStores

_CHUNK = 1 << 20


class LineReader:
    """Reads NDJSON lines with a size bound; an oversized line is drained, not buffered.

    It keeps its own buffer over the input's descriptor (not a ``BufferedReader``'s), so
    it can tell whether a line is already here, wait for input without taking any (a
    signal during the wait leaves the request in the input), and put back a line read as
    a signal came, for the exit code to account for it (``_first_request``).
    """

    def __init__(self, stream: BinaryIO, max_frame_bytes: int) -> None:
        self._stream = stream
        self._max = max_frame_bytes
        self._fd = _descriptor(stream)
        """The input's descriptor, read directly; ``None``: an in-memory stream."""
        self._buffer = bytearray()
        self._ended = False

    def read(self) -> bytes | frames.ProtocolError | None:
        """The next line, an error for an oversized one, or ``None`` at end of input."""
        scanned = 0
        while True:
            newline = self._buffer.find(b"\n", scanned)
            if newline > self._max:
                del self._buffer[:newline + 1]
                return self._too_large(newline)
            if newline >= 0:
                line = bytes(self._buffer[:newline + 1])
                del self._buffer[:newline + 1]
                if line.strip():
                    return line
                scanned = 0  # blank lines between frames are ignored
                continue
            if len(self._buffer) > self._max:
                return self._drain()
            scanned = len(self._buffer)
            if not self._fill():
                line = bytes(self._buffer)
                self._buffer.clear()
                return line if line.strip() else None

    def unread(self, line: bytes) -> None:
        """Put ``line`` back in front of the input."""
        self._buffer[:0] = line

    def wait(self, wakeup: int | None = None) -> None:
        """Return once ``read`` has input to work on, taking none of it, or once the
        descriptor ``wakeup`` is readable (``StopSignals.wakeup``: a signal came)."""
        if self._buffer or self._ended or self._fd is None:
            return
        select.select([self._fd] if wakeup is None else [self._fd, wakeup], [], [])

    def waiting(self) -> bool:
        """Whether input is here now (not only the end of it), without waiting for any."""
        if self._buffer:
            return True
        if self._ended:
            return False
        if self._fd is not None:
            try:
                if not select.select([self._fd], [], [], 0)[0]:
                    return False
            except (OSError, ValueError):
                return False
        return self._fill()

    def _fill(self) -> bool:
        """Read what the input has (waiting for some); ``False`` at its end."""
        try:
            chunk = (os.read(self._fd, _CHUNK) if self._fd is not None
                     else self._stream.read(_CHUNK))
        except OSError:
            chunk = b""
        if not chunk:
            self._ended = True
            return False
        self._buffer += chunk
        return True

    def _drain(self) -> frames.ProtocolError:
        """Skip the rest of an oversized line, keeping only what follows it."""
        size = len(self._buffer)
        self._buffer.clear()
        while self._fill():
            newline = self._buffer.find(b"\n")
            if newline >= 0:
                size += newline
                del self._buffer[:newline + 1]
                break
            size += len(self._buffer)
            self._buffer.clear()
        return self._too_large(size)

    def _too_large(self, size: int) -> frames.ProtocolError:
        from nonoka.protocol.values import ErrorCode  # only for a rejected line

        return frames.ProtocolError(
            ErrorCode.FRAME_TOO_LARGE,
            f"the line is {size} bytes, over the {self._max} byte frame limit; send a "
            "shorter history (compact it or start a new conversation)",
            {"size": size, "max_frame_bytes": self._max})


def _descriptor(stream: BinaryIO) -> int | None:
    """The descriptor under ``stream``, when it has one to wait on."""
    try:
        return stream.fileno()
    except (OSError, ValueError, AttributeError):
        return None  # io.BytesIO: UnsupportedOperation is an OSError


class Output:
    """Writes event lines to stdout; a provider that went away must not stop the run."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self.closed = False

    def write(self, data: bytes) -> None:
        if self.closed:
            return
        try:
            self._stream.write(data)
            self._stream.flush()
        except (BrokenPipeError, ValueError, OSError):
            self.closed = True


Checked = tuple[bytes, dict[str, object]]
"""A request line and its frame-checked object."""


DEFAULT_MAX_MESSAGES = 50_000
"""Most messages a request's history may hold (``NONOKA_MAX_MESSAGES``); see
``docs/protocol.md``."""


def _max_messages() -> int:
    return int(os.environ.get("NONOKA_MAX_MESSAGES", DEFAULT_MAX_MESSAGES))


def _check(item: bytes | frames.ProtocolError, out: Output,
           lines: frames.RequestLines) -> Checked | None:
    """The line and its object, or ``None`` after answering an unusable line."""
    if isinstance(item, frames.ProtocolError):
        out.write(frames.rejection_lines(item))
        return None
    try:
        obj = frames.check_request_frame(item, lines=lines)
        _check_count(obj, _max_messages())
        return item, obj
    except frames.ProtocolError as error:
        out.write(frames.rejection_lines(error))
        return None


def _check_count(obj: dict[str, object], limit: int) -> None:
    """Refuse a history longer than ``limit`` messages before it is decoded into models:
    its memory would grow many times the line's size."""
    messages = obj.get("messages")
    if isinstance(messages, list) and len(messages) > limit:
        from nonoka.protocol.values import ErrorCode  # only for a rejected line

        rid = frames.echoed_id(obj.get("request_id"))
        raise frames.ProtocolError(
            ErrorCode.FRAME_TOO_LARGE,
            f"the request holds {len(messages)} messages, over the bridge's limit of "
            f"{limit}; send a shorter history (compact it or start a new conversation)",
            {"messages": len(messages), "max_messages": limit},
            request_id=rid)


def _acknowledge(obj: dict[str, object], out: Output) -> None:
    out.write(frames.ack_line(server_version=__version__,
                              request_id=frames.echoed_id(obj.get("request_id"))))


def _first_request(reader: LineReader, out: Output, signals: StopSignals,
                   lines: frames.RequestLines) -> Checked | None:
    """Read until a usable chat request (acknowledged), end of input or a signal.

    A signal ends the wait for input, never a read: a signal while waiting leaves the
    request in the input, and a line read as a signal came is put back, so
    ``stopped_code`` finds it there and the exit code says it was not answered."""
    while True:
        # A signal at any moment of the wait, or just before it, leaves its number in the
        # pipe ``wakeup`` watches, so the wait ends and ``stopped`` sees it.
        if signals.stopped():
            return None  # stopped before any request
        reader.wait(signals.wakeup)
        if signals.stopped():
            return None
        line = reader.read()
        if line is None:
            return None
        if signals.stopped():  # one came during the read
            if isinstance(line, bytes):
                reader.unread(line)
            return None
        checked = _check(line, out, lines)
        if checked is None or checked[1].get("type") == RequestType.CANCEL:
            continue  # a cancel with nothing running has nothing to cancel
        _acknowledge(checked[1], out)
        return checked


def main(argv: list[str] | None = None) -> int:
    """Serve requests from stdin until end of input; returns the exit code."""
    signals = StopSignals()
    signals.install()  # first: a signal at any moment from now on ends in a clean finish
    _tune_collector()
    max_frame = int(os.environ.get("NONOKA_MAX_FRAME_BYTES", DEFAULT_MAX_FRAME_BYTES))
    reader = LineReader(sys.stdin.buffer, max_frame)
    out = Output(sys.stdout.buffer)
    lines = frames.RequestLines()  # the first of what this process keeps between requests
    first = _first_request(reader, out, signals, lines)
    if first is None:
        return stopped_code(signals, reader)
    from nonoka.bridge import early

    dispatched = early.dispatch(first[1])  # before the runtime loads: see nonoka.bridge.early
    import asyncio

    from nonoka.bridge.reuse import BridgeReuse

    server = _Server(reader, out, signals, BridgeReuse(lines), dispatched)
    code = asyncio.run(server.run(first))
    # Everything is saved, closed and written. Leave without the interpreter's shutdown:
    # tearing down the runtime's modules and objects took 50-250 ms after the host had
    # its answer, and the host waits for the exit too. (Stopped by a signal with input
    # still open, the stdin thread also holds the stream's lock, which the shutdown would
    # wait for and then abort on.)
    _leave(code)
    return code


def _dispatch_early(request: dict[str, object], kept: KeptStores) -> Dispatched | None:
    """A warm bridge's next request goes out as a fresh process's first one does
    (``nonoka.bridge.early``): the model works while the runtime loads the session. It
    reads the template through the project's stores the process keeps open."""
    from pathlib import Path

    from nonoka.bridge import early
    from nonoka.turn.project import project_database

    cwd = request.get("cwd")
    try:
        key = project_database(Path(cwd if isinstance(cwd, str) and cwd else os.getcwd())
                               .resolve())
    except Exception:  # a bad URL or directory: the handler says what is wrong
        return None
    return early.dispatch(request, kept.next_calls(key))


def stopped_code(signals: StopSignals, reader: LineReader) -> int:
    """The exit code of a bridge that served no request: 0 at the end of its input, or
    stopped by a signal with nothing waiting to be read; ``128 + signal`` (130, 143), said
    on stderr, when a signal stopped it before it read a request waiting in its input, so
    its host never takes the silence for an answer."""
    if not signals.stopped() or not reader.waiting():
        return 0
    sys.stderr.write("nonoka bridge: stopped by a signal before it read the request waiting "
                     "in its input; nothing was done: send the request again\n")
    return 128 + signals.last


YOUNG_OBJECTS = 50_000
"""Allocations between two collections of young objects (CPython's default is 700)."""


def _tune_collector() -> None:
    """Collect cyclic garbage less often than CPython's defaults would.

    A turn allocates objects by the tens of thousands (the request's messages, the
    session's entries) that live until the turn ends or longer; with the defaults the
    collector ran hundreds of times a turn and walked every live object several times:
    ~30 ms of a fresh turn at 10,000 messages (bench/turn_cost.py). Cycles are rare here
    and still collected, only in larger batches."""
    import gc

    gc.set_threshold(YOUNG_OBJECTS, 20, 20)


def _freeze_survivors() -> None:
    """After the first request: exempt what is alive then (what the runtime imported:
    modules, classes, pydantic's schemas; and the session as decoded) from later full
    collections of a long-lived bridge. It lives as long as the process, or is freed by
    its reference count."""
    import gc

    gc.freeze()


def _leave(code: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


class _Wake:
    """Put in the line queue by a signal, so a server waiting for input notices it."""


Item = bytes | frames.ProtocolError | _Wake | None


class _Server:
    """Serves acknowledged requests one after another while watching stdin for ``cancel``."""

    def __init__(self, reader: LineReader, out: Output, signals: StopSignals,
                 reuse: BridgeReuse, early: Dispatched | None = None) -> None:
        import asyncio

        self.reader, self.out = reader, out
        self.reuse = reuse
        """What this process keeps between the requests it serves."""
        self.signals = signals
        self.early = early
        """What the early dispatch sent for the first request; handed to its turn."""
        self.frozen = False
        """Whether the objects alive after the first request are frozen (``gc.freeze``)."""
        self.lines: asyncio.Queue[Item] = asyncio.Queue()
        self.queued: list[Checked] = []
        self.task: asyncio.Future[None] | None = None
        self.started = False
        """Whether the running request's task has begun (a task cancelled before its
        first step never runs its handler, and so would never answer)."""
        self.cancelled = False
        """Whether the running request was cancelled: once only, so a second signal
        cannot interrupt the save the first one started."""
        self.running_id: object = None
        """The running request's ``request_id``, as sent."""
        self.stopping = False
        self.eof = False

    async def run(self, first: Checked) -> int:
        self._start_pump()
        self._watch_signals()
        request: Checked | None = first
        while request is not None:
            await self._handle(request)  # acknowledged: answered even when stopping
            faults.point("bridge.idle")
            if self.stopping:
                break
            # Serve on until the next request, end of input or a signal: a bad line in
            # between is answered by ``_take`` and must not end the process.
            while not self.queued and not self.eof and not self.stopping:
                self._take(await self.lines.get())
            request = None
            if self.queued and not self.stopping:
                request = self.queued.pop(0)
                _acknowledge(request[1], self.out)
                self.early = _dispatch_early(request[1], self.reuse.kept)
        await self.reuse.kept.close()  # every request is answered: nobody waits for this
        return 0

    def _start_pump(self) -> None:
        import asyncio
        import threading

        loop = asyncio.get_running_loop()

        def pump() -> None:
            while True:
                item = self.reader.read()
                loop.call_soon_threadsafe(self.lines.put_nowait, item)
                if item is None:
                    return

        threading.Thread(target=pump, name="nonoka-stdin", daemon=True).start()

    def _watch_signals(self) -> None:
        import asyncio

        def on_signal() -> None:
            self.stopping = True
            self._cancel_running()
            self.lines.put_nowait(_Wake())  # between requests: stop waiting for input

        self.signals.attach(asyncio.get_running_loop(), on_signal)

    def _cancel_running(self) -> None:
        """Cancel the running request once; before its task starts, the task does it."""
        if self.task is None or self.task.done() or self.cancelled or not self.started:
            return
        self.cancelled = True
        self.task.cancel()

    async def _handle(self, checked: Checked) -> None:
        import asyncio

        from nonoka.bridge.handler import BridgeHandler
        from nonoka.protocol.models import BaseEvent, ChatRequest, encode_event, validate_request

        _, raw = checked
        early, self.early = self.early, None
        try:
            request = validate_request(raw, self.reuse.lines)  # checked: not parsed again
        except frames.ProtocolError as error:
            self.out.write(frames.rejection_lines(error))
            return
        if not isinstance(request, ChatRequest):
            return

        def send(event: BaseEvent) -> None:
            self.out.write(encode_event(event))

        handler = BridgeHandler(request, send, raw, early, self.reuse)

        async def run() -> None:
            self.started = True
            if self.stopping or self.cancelled:  # stopped before the task could start
                self.cancelled = True
                task = asyncio.current_task()
                assert task is not None
                task.cancel()  # delivered inside the handler, which answers ``cancelled``
            await handler.handle()

        self.running_id = raw.get("request_id")
        self.started = self.cancelled = False
        self.task = asyncio.ensure_future(run())
        await self._drive(self.task)
        self.task = None
        self.running_id = None
        if not self.frozen:  # the runtime is loaded now
            self.frozen = True
            _freeze_survivors()

    async def _drive(self, task: asyncio.Future[None]) -> None:
        """Wait for the request while serving ``cancel`` lines and noting end of input."""
        import asyncio

        while not task.done():
            if self.eof:
                await asyncio.wait({task})
                return
            getter: asyncio.Future[Item] = asyncio.ensure_future(self.lines.get())
            waiting: set[asyncio.Future[Any]] = {task, getter}
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            if getter.done():
                self._take(getter.result())
            else:
                getter.cancel()

    def _names_running(self, cancel: dict[str, object]) -> bool:
        """Whether a ``cancel`` applies to the running request.

        A cancel that names a request stops only that one (in a long-lived bridge the
        host may still hold the id of a request that already finished); one that names
        none stops whatever runs.
        """
        named = cancel.get("request_id")
        return named is None or named == self.running_id

    def _take(self, item: Item) -> None:
        """Handle a line that arrived while (or after) a request ran."""
        if isinstance(item, _Wake):
            return
        if item is None:
            self.eof = True
            return
        checked = _check(item, self.out, self.reuse.lines)
        if checked is None:
            return
        if checked[1].get("type") == RequestType.CANCEL:
            if self.task is not None and self._names_running(checked[1]):
                if not self.started:
                    self.cancelled = True  # the task cancels itself when it starts
                self._cancel_running()
            return
        self.queued.append(checked)
