"""SIGTERM and SIGINT as one cancellation of the running turn, whenever they arrive.

asyncio's own signal handling (``loop.add_signal_handler``) learns which signal came
from the byte the C handler writes into the loop's self-pipe; while a model answer
streams, worker threads fill that pipe with ``call_soon_threadsafe`` wake-ups, the byte
is dropped and the signal is lost. And until handlers are installed a signal kills the
process without a word. So the handlers here are plain Python-level handlers, installed
first thing: they run in the main thread whatever happened to any pipe, remember a
signal that came before an event loop was there, and hand it to the loop once one is
attached. A wake-up descriptor of their own only wakes the loop's ``select``.

Standard library only: the bridge installs this before it reads its first request.
"""

from __future__ import annotations

import signal

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: this loads before the bridge's ack
if TYPE_CHECKING:
    import asyncio
    import socket
    from collections.abc import Callable
    from typing import Any

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Interrupted(Exception):
    """Raised out of a blocking read when a signal comes while ``interrupt_reads`` is set."""


class StopSignals:
    """Catches SIGTERM/SIGINT from ``install()`` on, and passes them to an event loop."""

    def __init__(self) -> None:
        self.received = 0
        """How many stop signals came so far."""
        self.last = 0
        """The number of the last one (0: none yet)."""
        self.interrupt_reads = False
        """Raise ``Interrupted`` from the handler (a blocking read with nothing to save)."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._callback: Callable[[], None] | None = None
        self._wakeup: tuple[socket.socket, socket.socket] | None = None
        self._previous: list[Any] = []

    def install(self) -> None:
        """Take over SIGTERM and SIGINT (main thread only)."""
        self._previous = [signal.signal(s, self._handle) for s in STOP_SIGNALS]

    def uninstall(self) -> None:
        """Give SIGTERM and SIGINT back to the handlers they had before ``install``."""
        self.detach()
        for signum, previous in zip(STOP_SIGNALS, self._previous, strict=False):
            signal.signal(signum, previous)
        self._previous = []

    def attach(self, loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
        """Call ``callback`` in ``loop`` for every stop signal, and now for any that came
        before."""
        import socket  # asyncio has loaded it by now

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
        if loop is not None and callback is not None:
            if not loop.is_closed():  # closed: the turn is over anyway
                loop.call_soon_threadsafe(callback)
        elif self.interrupt_reads:
            self.interrupt_reads = False  # once: the read it ends is over
            raise Interrupted(signum)

    def _drain(self) -> None:
        assert self._wakeup is not None
        try:
            while self._wakeup[0].recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
