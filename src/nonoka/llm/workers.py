"""Threads a long-running process keeps for its model calls' blocking HTTP exchanges.

Each model call reads its answer on a thread of its own (``nonoka.llm.transport``), so
the event loop never blocks on a socket. Starting a thread makes the loop wait until the
new thread runs (``Thread.start`` waits for it), which on a busy machine costs the
request a millisecond or more; a server answering call after call hands each exchange to
a thread an earlier call left idle instead. A thread that finds no work after its
exchange waits for the next one; at most ``idle`` wait at once, the rest end. The
threads are daemons: an exchange still reading when the process leaves does not hold it.

The process's entry point creates one ``Workers`` and passes it down to the models it
resolves; without one, each call starts (and ends) a thread of its own. It also holds
the process's idle connections to the model endpoints (``connections``,
``nonoka.llm.connections``), which its exchanges reuse for the next call.

A process that answers calls on one event loop (``nonoka serve``, a warm bridge) may
instead give its ``Workers`` an ``on_loop`` opener (``nonoka.llm.loop_exchange``): its
exchanges then read their sockets on the loop itself, and no thread is woken for a
call. A request the bridge already sent before the runtime loaded still has its answer
read on a thread.

Internal: not part of the public API (docs/architecture.md, "Public API").
"""

from __future__ import annotations

import queue
import threading
from collections.abc import AsyncGenerator, Callable
from typing import Any, Protocol

from nonoka.llm.connections import Connections

Job = Callable[[], None]
IDLE = "nonoka-idle-worker"
"""The name of a thread waiting for its next job (a job runs under the name it is given)."""


class Call(Protocol):
    """A model call's exchange under way (``nonoka.llm.transport``): what it read, a
    batch of items at a time, and a way to stop it."""

    def batches(self) -> AsyncGenerator[list[object], None]: ...

    def abort(self) -> None: ...


class OnLoop(Protocol):
    """Starts an exchange on the event loop: the endpoint, body, headers, timeout, dialect
    and limits are ``nonoka.llm.transport``'s."""

    def __call__(self, endpoint: Any, body: bytes, headers: dict[str, str], timeout: float,
                 dialect: Any, limits: Any) -> Call: ...

    def close(self) -> None:
        """Close the idle connections it keeps (on the loop, before it closes)."""


class Workers:
    """Idle daemon threads that run one job at a time, handed to them by ``run``."""

    def __init__(self, idle: int = 8, connections: Connections | None = None,
                 on_loop: OnLoop | None = None) -> None:
        self.connections = connections if connections is not None else Connections()
        """The process's idle keep-alive connections to model endpoints."""
        self.on_loop = on_loop
        """When set, how this process's exchanges run on its event loop instead."""
        self.idle = idle
        """The most threads that stay waiting for work."""
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._waiting: list[queue.SimpleQueue[Job]] = []
        self.started = 0
        """How many threads this object started (what reuse saves is visible in it)."""

    def run(self, job: Job, name: str) -> None:
        """Run ``job`` on a thread named ``name``: an idle one, else a new one."""
        with self._lock:
            inbox = self._waiting.pop() if self._waiting else None
            if inbox is None:
                self.started += 1
        if inbox is not None:
            inbox.put(lambda: _named(name, job))
            return
        inbox = queue.SimpleQueue()
        inbox.put(job)
        threading.Thread(target=self._serve, args=(inbox,), name=name, daemon=True).start()

    def _serve(self, inbox: queue.SimpleQueue[Job]) -> None:
        while True:
            inbox.get()()  # a job that raises ends its thread, as a thread of its own would
            threading.current_thread().name = IDLE
            with self._lock:
                if len(self._waiting) >= self.idle:
                    return
                self._waiting.append(inbox)
                self._changed.notify_all()

    def close(self) -> None:
        """Close the idle connections to the endpoints (the threads are daemons)."""
        self.connections.close()
        if self.on_loop is not None:
            self.on_loop.close()

    def wait_idle(self, count: int, timeout: float) -> bool:
        """Whether ``count`` threads wait for work within ``timeout`` seconds (a job's
        caller hears of its end a moment before its thread is idle again)."""
        with self._changed:
            return self._changed.wait_for(lambda: len(self._waiting) >= count, timeout)


def _named(name: str, job: Job) -> None:
    threading.current_thread().name = name
    job()
