"""Fault injection: die at a named point of the code, or trace every point reached.

nonoka promises that process death does not matter. To prove it, the runtime calls
``point(name)`` at every place it writes to the database or calls out (the model, a
tool, the provider), and the fault campaign (``tests/faults/``) kills a real process at
each of them in turn. Two environment variables, read once when this module is imported:

``NONOKA_FAULT=<point>:<n>[,<point>:<n>...]``
    the n-th time (1-based, counted per process) ``<point>`` is reached, the process
    sends itself SIGKILL: no ``finally``, no flush, no goodbye — a real crash.
``NONOKA_FAULT=<point>:<n>:full``
    instead of dying, the write at that point fails the way a full disk fails it: a
    ``StoreError`` with SQLite's "database or disk is full" (a real full disk cannot be
    aimed at one write), so a test reaches a write late in a turn.
``NONOKA_FAULT=<point>:<n>:busy``
    the write fails the way a write lock held too long by another process fails it: a
    retryable ``StoreError`` whose advice is to send the request again.
``NONOKA_FAULT_TRACE=<file>``
    every point reached is appended to ``<file>``, one name per line, so the campaign
    enumerates the points from a clean run instead of guessing with sleeps.

Unarmed (the normal case) ``point`` is a module-level function that does nothing, so a
hook costs one call. This module imports ``os`` only: the bridge imports it on every turn.

Internal: not part of the public API (docs/architecture.md, "Public API").
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: the bridge's import budget
if TYPE_CHECKING:
    from collections.abc import Callable

FAULT_ENV = "NONOKA_FAULT"
TRACE_ENV = "NONOKA_FAULT_TRACE"

POINTS = (
    "model.early.sent",        # the bridge sent a turn's model request before loading the runtime
    "model.call.before",       # a model request is about to be sent
    "model.call.after",        # the answer arrived; its usage (a ReAct answer too) is stored
    "tool.start",              # a tool nonoka runs is about to run (its intent is stored)
    "tool.end",                # the tool returned; its result is not stored yet
    "checkpoint.save.before",  # a session snapshot is about to be written
    "checkpoint.save.after",   # the snapshot was committed
    "step.update.before",      # a plan step's status/result/error row is about to be written
    "step.update.after",       # ... and was committed
    "index.update.before",     # the session index row (cli_sessions) is about to be written
    "index.update.after",      # ... and was committed
    "event.append.before",     # an event-log entry is about to be appended
    "event.append.after",      # ... and was committed
    "bridge.send",             # the bridge wrote an event line to the provider
    "bridge.idle",             # a request is answered and its stores given back or closed
)
"""Every point the code reaches; ``tests/faults`` checks the list against a trace."""


def _noop(name: str) -> None:
    """Unarmed: nothing to do (the usual case)."""


KILL = "kill"
FULL = "full"
BUSY = "busy"
"""What an armed point does: die (SIGKILL), or fail its write as a full disk or a lock
held too long would."""


def _parse(spec: str) -> dict[str, tuple[int, str]]:
    """``"a:2,b:1:full"`` → ``{"a": (2, "kill"), "b": (1, "full")}``; a malformed spec
    is an error, not a no-op."""
    targets: dict[str, tuple[int, str]] = {}
    for part in spec.split(","):
        text, action = part.strip(), KILL
        for failure in (FULL, BUSY):
            if text.endswith(f":{failure}"):
                text, action = text[:-len(failure) - 1], failure
        name, sep, count = text.rpartition(":")
        if not sep or not name or not count.isdigit() or int(count) < 1:
            raise ValueError(f"{FAULT_ENV}={spec!r}: expected <point>:<n>[:full|:busy] with "
                             "n >= 1, comma-separated")
        targets[name] = (int(count), action)
    return targets


def _armed(spec: str, trace: str) -> Callable[[str], None]:
    targets = _parse(spec) if spec else {}
    seen: dict[str, int] = {}
    trace_fd = (os.open(trace, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                if trace else -1)

    def point(name: str) -> None:
        """Count ``name``; trace it; die (or fail) if this is the armed occurrence."""
        n = seen[name] = seen.get(name, 0) + 1
        if trace_fd >= 0:
            os.write(trace_fd, f"{name}\n".encode())
        count, action = targets.get(name, (0, KILL))
        if count != n:
            return
        if action == FULL:
            from nonoka.errors import StoreError

            raise StoreError(f"database or disk is full (injected at {name})")
        if action == BUSY:
            from nonoka.errors import StoreError

            raise StoreError(f"database is locked (injected at {name}); nothing was "
                             "written: send the request again", retryable=True)
        import signal

        os.kill(os.getpid(), signal.SIGKILL)

    return point


def _install() -> Callable[[str], None]:
    spec = os.environ.get(FAULT_ENV, "").strip()
    trace = os.environ.get(TRACE_ENV, "").strip()
    return _armed(spec, trace) if spec or trace else _noop


point: Callable[[str], None] = _install()
"""Call at a fault point: ``faults.point("checkpoint.save.before")``."""
