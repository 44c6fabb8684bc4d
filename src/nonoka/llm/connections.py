"""Idle HTTP connections to model endpoints, kept for the next call (keep-alive).

A process that makes call after call (``nonoka serve``, a warm bridge) would otherwise
open a new TCP connection, and with ``https`` a new TLS session, for every model call:
a fraction of a millisecond on this machine, tens of milliseconds to a real provider. An
SDK client calling the provider directly keeps its connection; so does this.

A connection is given back only after its answer was read to its end and the server did
not ask to close it (``nonoka.llm.transport.Exchange``); one that saw an error, a
cancel or a partial read is closed instead. One taken from here may still have been
closed by the server while it waited: ``take`` drops one that is readable (an idle
connection has nothing to read but the server's hang-up) or idle for longer than
``idle_seconds``, and the exchange replaces one found dead when sending, before any
byte of an answer, by a fresh connection, once.

Keyed by scheme, host and port; bounded (``per_host``, ``total``: the oldest idle one
is closed to make room). Thread-safe: exchanges run on worker threads. The process's
entry point creates one (with its ``nonoka.llm.workers.Workers``) and passes it down.

Internal: not part of the public API (docs/architecture.md, "Public API").
"""

from __future__ import annotations

import select
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import http.client

Key = tuple[str, str, int]
"""Scheme, host, port."""


class Connections:
    """Idle keep-alive connections, at most ``per_host`` per endpoint and ``total`` in all."""

    def __init__(self, per_host: int = 8, total: int = 32, idle_seconds: float = 30.0) -> None:
        self.per_host = per_host
        self.total = total
        self.idle_seconds = idle_seconds
        """A connection idle longer is closed rather than reused: a server or a network
        box may have dropped it without a word, and a write would wait for the timeout."""
        self._lock = threading.Lock()
        self._idle: dict[Key, list[tuple[float, http.client.HTTPConnection]]] = {}
        self._count = 0
        self.opened = 0
        """Connections the exchanges opened (what reuse saves is visible in it)."""
        self.reused = 0
        """Connections taken from here for another call."""

    def take(self, key: Key) -> http.client.HTTPConnection | None:
        """The most recently given idle connection for ``key`` that still looks open,
        or ``None``; the ones that do not are closed."""
        now = time.monotonic()
        while True:
            with self._lock:
                kept = self._idle.get(key)
                if not kept:
                    return None
                since, conn = kept.pop()
                self._count -= 1
            if now - since <= self.idle_seconds and _quiet(conn):
                with self._lock:
                    self.reused += 1
                return conn
            conn.close()

    def give(self, key: Key, conn: http.client.HTTPConnection) -> None:
        """Keep ``conn``, whose last answer was read to its end, for the next call."""
        dropped: list[http.client.HTTPConnection] = []
        with self._lock:
            kept = self._idle.setdefault(key, [])
            kept.append((time.monotonic(), conn))
            self._count += 1
            if len(kept) > self.per_host:
                dropped.append(kept.pop(0)[1])
                self._count -= 1
            while self._count > self.total:
                oldest = min((k for k in self._idle if self._idle[k]),
                             key=lambda k: self._idle[k][0][0])
                dropped.append(self._idle[oldest].pop(0)[1])
                self._count -= 1
        for conn in dropped:
            conn.close()

    def counted(self) -> None:
        """Count a connection an exchange opened."""
        with self._lock:
            self.opened += 1

    def idle(self, key: Key) -> int:
        """How many connections wait for ``key``."""
        with self._lock:
            return len(self._idle.get(key, ()))

    def close(self) -> None:
        """Close every idle connection."""
        with self._lock:
            kept = [conn for pairs in self._idle.values() for _, conn in pairs]
            self._idle.clear()
            self._count = 0
        for conn in kept:
            conn.close()


def _quiet(conn: http.client.HTTPConnection) -> bool:
    """Whether an idle connection has nothing to read: a readable one was closed by the
    server (or sent what nobody asked for), and is no use."""
    sock = conn.sock
    if sock is None:
        return False
    try:
        return not select.select([sock], [], [], 0)[0]
    except (OSError, ValueError):  # closed under us
        return False
