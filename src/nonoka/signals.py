"""SIGTERM and SIGINT as one cancellation of the running turn, whenever they arrive.

asyncio's own signal handling (``loop.add_signal_handler``) learns which signal came
from the byte the C handler writes into the loop's self-pipe; while a model answer
streams, worker threads fill that pipe with ``call_soon_threadsafe`` wake-ups, the byte
is dropped and the signal is lost. And until handlers are installed a signal kills the
process without a word. So the handlers here are plain Python-level handlers, installed
first thing: they run in the main thread whatever happened to any pipe, remember a
signal that came before an event loop was there, and hand it to the loop once one is
attached. A wake-up descriptor of their own only wakes the loop's ``select``.

Until a loop is attached, the same C-level wake-up writes each signal's number into a
pipe of their own (``stopped``, ``wakeup``): a wait for input watches it, so a signal
ends the wait even when its Python handler runs late, or where Python drops what a
handler raises (a weakref callback of the import system, a finalizer). Handlers here
never raise.

Standard library only: the bridge installs this before it reads its first request.
"""

from __future__ import annotations

import os
import signal

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: this loads before the bridge's ack
if TYPE_CHECKING:
    import asyncio
    import socket
    from collections.abc import Callable
    from typing import Any

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopSignals:
    """Catches SIGTERM/SIGINT from ``install()`` on, and passes them to an event loop."""

    def __init__(self) -> None:
        self.received = 0
        """How many stop signals came so far."""
        self.last = 0
        """The number of the last one (0: none yet)."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._callback: Callable[[], None] | None = None
        self._wakeup: tuple[socket.socket, socket.socket] | None = None
        self._previous: list[Any] = []
        self._pipe: tuple[int, int] | None = None
        self._prior_wakeup = -1
        """The wake-up descriptor someone else had set before ``install`` (-1: none)."""

    def install(self) -> None:
        """Take over SIGTERM and SIGINT (main thread only); each one is also written into
        ``wakeup`` until a loop is attached."""
        reader, writer = os.pipe()
        for end in (reader, writer):
            os.set_blocking(end, False)
        self._pipe = reader, writer
        self._prior_wakeup = signal.set_wakeup_fd(writer, warn_on_full_buffer=False)
        self._previous = [signal.signal(s, self._handle) for s in STOP_SIGNALS]

    def uninstall(self) -> None:
        """Give SIGTERM and SIGINT back to the handlers they had before ``install``, and
        the wake-up descriptor back to whoever had set it (an event loop's own signal
        handling, say), if it is still open."""
        self.detach()
        for signum, previous in zip(STOP_SIGNALS, self._previous, strict=False):
            signal.signal(signum, previous)
        self._previous = []
        self._close_pipe()
        prior, self._prior_wakeup = self._prior_wakeup, -1
        current = signal.set_wakeup_fd(-1)
        if current != -1:  # another was set since: it stays
            signal.set_wakeup_fd(current, warn_on_full_buffer=False)
        elif prior != -1:
            try:  # noqa: SIM105 (contextlib is not loaded this early in the bridge)
                signal.set_wakeup_fd(prior, warn_on_full_buffer=False)
            except (ValueError, OSError):  # closed meanwhile: nothing to give back
                pass

    @property
    def wakeup(self) -> int | None:
        """A descriptor that becomes readable when a stop signal comes (``None`` before
        ``install`` or once a loop is attached): wait on it beside the input."""
        return None if self._pipe is None else self._pipe[0]

    def stopped(self) -> bool:
        """Whether a stop signal came, its handler run yet or not."""
        numbers = b""
        while self._pipe is not None:
            try:
                chunk = os.read(self._pipe[0], 512)
            except (BlockingIOError, InterruptedError):
                break
            if not chunk:
                break
            numbers += chunk
        stops = [n for n in numbers if n in STOP_SIGNALS]
        if stops and not self.received:  # its handler has not run yet (it counts it too)
            self.received, self.last = 1, stops[-1]
        return self.received > 0

    def attach(self, loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
        """Call ``callback`` in ``loop`` for every stop signal, and now for any that came
        before."""
        import socket  # asyncio has loaded it by now

        self.stopped()  # a signal only in the pipe so far is counted, and replayed below
        self._close_pipe()
        reader, writer = socket.socketpair()
        reader.setblocking(False)
        writer.setblocking(False)
        self._wakeup = reader, writer
        loop.add_reader(reader.fileno(), self._drain)
        signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        self._loop, self._callback = loop, callback
        for _ in range(self.received):
            loop.call_soon(callback)

    def detach(self) -> None:
        """Stop passing signals to the loop (they are still counted)."""
        loop, self._loop, self._callback = self._loop, None, None
        wakeup, self._wakeup = self._wakeup, None
        if wakeup is None:
            return
        signal.set_wakeup_fd(-1)
        if loop is not None and not loop.is_closed():
            loop.remove_reader(wakeup[0].fileno())
        for sock in wakeup:
            sock.close()

    def _handle(self, signum: int, frame: object) -> None:
        self.received += 1
        self.last = signum
        loop, callback = self._loop, self._callback
        if loop is not None and callback is not None and not loop.is_closed():
            loop.call_soon_threadsafe(callback)  # closed: the turn is over anyway

    def _close_pipe(self) -> None:
        pipe, self._pipe = self._pipe, None
        if pipe is None:
            return
        previous = signal.set_wakeup_fd(-1)
        if previous not in (pipe[1], -1):  # another descriptor's since: put it back
            signal.set_wakeup_fd(previous, warn_on_full_buffer=False)
        for end in pipe:
            os.close(end)

    def _drain(self) -> None:
        assert self._wakeup is not None
        try:
            while self._wakeup[0].recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
