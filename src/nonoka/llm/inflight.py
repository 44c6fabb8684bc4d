"""A model request sent before the runtime asked for it, waiting to be claimed.

The bridge can often tell from the stored session alone which request the turn will
send to the model (``nonoka.bridge.early``). It sends that request at once, on a worker
thread, while the rest of the process is still loading, and hands the ``Inflight`` that
holds it to the model adapter (``AdoptsInflight.adopt``) and to the turn. When the
adapter makes its own request, ``claim`` hands the connection over only if the adapter's
request is byte for byte the one already sent; a different request closes the early one
unread, and so does ``settle`` when the turn never asked. Standard library only.

Internal: not part of the public API (docs/architecture.md, "Public API").
"""

from __future__ import annotations

import socket
import threading
from contextlib import suppress
from typing import TYPE_CHECKING, Literal

from nonoka import faults

if TYPE_CHECKING:
    import http.client

    from nonoka.llm.wire import Endpoint

Outcome = Literal["used", "mismatch", "unused"]


class EarlyRequest:
    """One POST on its way: connecting and sending happen on a daemon thread."""

    def __init__(self, endpoint: Endpoint, body: bytes, headers: dict[str, str],
                 timeout: float) -> None:
        self.endpoint = endpoint
        self.body = body
        self.headers = headers
        self._conn = endpoint.connection(timeout)
        self._error: BaseException | None = None
        self._lock = threading.Lock()
        self._dropped = False
        self._thread = threading.Thread(target=self._send, name="nonoka-early-request",
                                        daemon=True)
        self._thread.start()

    def _send(self) -> None:
        try:
            self._conn.connect()
            with self._lock:  # a request dropped while connecting is never sent
                if self._dropped:
                    self._conn.close()
                    return
                self._conn.request("POST", self.endpoint.path, self.body, self.headers)
        except BaseException as exc:  # raised again in whoever claims the request
            self._error = exc
            self._conn.close()
            return
        faults.point("model.early.sent")

    def sent(self) -> http.client.HTTPConnection:
        """The connection once the request is written; raises what sending raised."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._conn

    def close(self) -> None:
        """Drop the request; the server sees the connection close before any answer.

        If the thread is still connecting, the request is not sent at all.
        """
        with self._lock:
            self._dropped = True
            sock = self._conn.sock
            if sock is not None:
                with suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            self._conn.close()


class Inflight:
    """At most one early request of a turn, and what became of it.

    An explicit handle, passed from whoever sent the request to whoever may use it: the
    model adapter claims it, the turn settles it when it is over.
    """

    def __init__(self) -> None:
        self._pending: EarlyRequest | None = None
        self._outcome: Outcome | None = None

    def start(self, endpoint: Endpoint, body: bytes, headers: dict[str, str],
              timeout: float) -> None:
        """Send ``body`` now; a matching ``claim`` will pick up the answer."""
        if self._pending is not None:
            self._pending.close()
        self._pending, self._outcome = EarlyRequest(endpoint, body, headers, timeout), None

    def claim(self, endpoint: Endpoint, body: bytes,
              headers: dict[str, str]) -> EarlyRequest | None:
        """The early request if it is exactly this one (closing it otherwise), else
        ``None``; a request is claimed at most once."""
        early, self._pending = self._pending, None
        if early is None:
            return None
        if early.endpoint == endpoint and early.body == body and early.headers == headers:
            self._outcome = "used"
            return early
        early.close()
        self._outcome = "mismatch"
        return None

    def settle(self) -> Outcome | None:
        """Close a request nobody claimed; what became of the early request (once)."""
        if self._pending is not None:
            self._pending.close()
            self._pending, self._outcome = None, "unused"
        outcome, self._outcome = self._outcome, None
        return outcome
