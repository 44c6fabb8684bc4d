"""A model request sent before the runtime asked for it, waiting to be claimed.

The bridge can often tell from the stored session alone which request the turn will
send to the model (``nonoka.bridge.early``). It sends that request at once, while the
rest of the process is still loading, and hands the ``Inflight`` that holds it to the
model adapter (``AdoptsInflight.adopt``) and to the turn. When the adapter makes its own
request, ``claim`` hands the connection over only if the adapter's request is byte for
byte the one already sent; a different request closes the early one unread, and so does
``settle`` when the turn never asked. Standard library only.

A plain ``http://`` request is written by hand on a raw socket: to an address that
connects within milliseconds (a local server) it leaves from the calling thread, with no
``http.client`` (and its ``email`` and ``ssl`` imports, ~10 ms) loaded before the first
byte, and no worker thread competing with the runtime's start-up; the answer is read
with ``http.client`` once the runtime, which loads it anyway, claims it. ``https``
requests, and any the hand-written form does not cover, go through ``http.client`` on a
worker thread.

Internal: not part of the public API (docs/architecture.md, "Public API").
"""

from __future__ import annotations

import _thread
import errno
import os
import select
import socket
import time

from nonoka import faults

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: the early path's import budget
if TYPE_CHECKING:
    import http.client
    from typing import Literal

    from nonoka.llm.wire import Endpoint

    Outcome = Literal["used", "mismatch", "unused"]


class EarlyRequest:
    """One POST on its way: written now to a local server, else on a worker thread."""

    def __init__(self, endpoint: Endpoint, body: bytes, headers: dict[str, str],
                 timeout: float) -> None:
        self.endpoint = endpoint
        self.body = body
        self.headers = headers
        self._timeout = timeout
        self._error: BaseException | None = None
        self._lock = _thread.allocate_lock()
        self._dropped = False
        self._sock: socket.socket | None = None
        self._conn: http.client.HTTPConnection | None = None
        self._finished = _thread.allocate_lock()  # held until the request is written
        self._finished.acquire()
        head = _request_head(endpoint, len(body), headers)
        if head is None:
            self._conn = endpoint.connection(timeout)
            _thread.start_new_thread(self._send_http_client, ())
            return
        payload = memoryview(head + body)
        sent = self._send_now(payload)
        if sent is None or sent < len(payload):
            _thread.start_new_thread(self._send_rest, (payload, sent))

    def _send_now(self, payload: memoryview) -> int | None:
        """Connect to a numeric address; if that completes within
        ``MAIN_THREAD_CONNECT`` seconds (a server on this machine or next to it), write
        the request from this thread, for as long as the server keeps reading within
        ``MAIN_THREAD_WRITE`` seconds.

        Returns the bytes written (``len(payload)`` also when writing failed: ``sent``
        raises why), ``_CONNECTING`` while the connection is on its way, or ``None`` when
        the address needs a lookup or the attempt failed at once; the worker thread does
        the rest.

        A worker thread would wait for the interpreter lock after every partial write
        while the runtime loads on this one: a large body took tens of milliseconds more
        to leave than writing it here to a local server, which reads it at once."""
        try:
            # As bytes: a ``str`` host would load the ``idna`` codec (~1 ms).
            family, kind, proto, _, address = socket.getaddrinfo(
                self.endpoint.host.encode("ascii"), self.endpoint.port, 0,
                socket.SOCK_STREAM, 0, socket.AI_NUMERICHOST)[0]
        except (OSError, UnicodeError):  # a host name: resolved on the worker thread
            return None
        sock = socket.socket(family, kind, proto)
        sock.setblocking(False)
        status = sock.connect_ex(address)
        if status == errno.EINPROGRESS:  # even on loopback: done within microseconds
            if not select.select([], [sock], [], MAIN_THREAD_CONNECT)[1]:
                self._sock = sock
                return _CONNECTING
            status = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if status != 0:
            sock.close()  # the worker's own attempt reports the failure
            return None
        self._sock = sock
        sent = 0
        deadline = time.monotonic() + MAIN_THREAD_WRITE
        try:
            while sent < len(payload):
                try:
                    sent += sock.send(payload[sent:])
                except BlockingIOError:
                    left = deadline - time.monotonic()
                    if left <= 0 or not select.select([], [sock], [], left)[1]:
                        return sent  # a slow reader: the worker writes the rest
        except OSError as exc:  # raised again in whoever claims the request
            self._error = exc
            self._close_socket()
        self._written()
        return len(payload)

    def _send_rest(self, payload: memoryview, sent: int | None) -> None:
        """Worker thread: connect (unless connected) and write the rest of ``payload``."""
        try:
            if sent is None:
                fresh = socket.create_connection((self.endpoint.host, self.endpoint.port),
                                                 self._timeout)
                with self._lock:  # a request dropped while connecting is never sent
                    if self._dropped:
                        fresh.close()
                        return
                    self._sock = fresh
                sent = 0
            sock = self._sock
            assert sock is not None
            if sent == _CONNECTING:
                _connected(sock, self._timeout)
                sent = 0
            sock.settimeout(self._timeout)
            sock.sendall(payload[sent:])
        except BaseException as exc:  # raised again in whoever claims the request
            self._error = exc
            self._close_socket()
        finally:
            self._written()

    def _send_http_client(self) -> None:
        conn = self._conn
        assert conn is not None
        try:
            conn.connect()
            with self._lock:  # a request dropped while connecting is never sent
                if self._dropped:
                    conn.close()
                    return
                conn.request("POST", self.endpoint.path, self.body, self.headers)
        except BaseException as exc:  # raised again in whoever claims the request
            self._error = exc
            conn.close()
        finally:
            self._written()

    def _written(self) -> None:
        if self._error is None and not self._dropped:
            if self._sock is not None:
                self._sock.settimeout(self._timeout)
            faults.point("model.early.sent")
        self._finished.release()

    def sent(self) -> http.client.HTTPConnection:
        """The connection once the request is written; raises what sending raised."""
        with self._finished:
            pass
        if self._error is not None:
            raise self._error
        if self._conn is not None:
            return self._conn
        assert self._sock is not None
        return _adopted(self.endpoint, self._sock, self._timeout)

    def close(self) -> None:
        """Drop the request; the server sees the connection close before any answer.

        If the worker thread is still connecting, the request is not sent at all.
        """
        with self._lock:
            self._dropped = True
            self._close_socket()
            if self._conn is not None:
                _shut(self._conn.sock)
                self._conn.close()

    def _close_socket(self) -> None:
        sock = self._sock
        if sock is not None:
            _shut(sock)
            sock.close()


def _shut(sock: socket.socket | None) -> None:
    """Shut ``sock`` down both ways, if it is still open (``contextlib.suppress`` would
    cost the early path an import)."""
    if sock is not None:
        try:  # noqa: SIM105 - see above
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _request_head(endpoint: Endpoint, length: int, headers: dict[str, str]) -> bytes | None:
    """The request line and headers of a plain ``http`` POST, as ``http.client`` would
    write them; ``None`` for ``https`` or anything it would refuse or write otherwise."""
    if endpoint.scheme != "http" or any(c <= " " or c == "\x7f" for c in endpoint.path):
        return None
    host = f"[{endpoint.host}]" if ":" in endpoint.host else endpoint.host
    if endpoint.port != 80:
        host = f"{host}:{endpoint.port}"
    lines = [f"POST {endpoint.path} HTTP/1.1", f"Host: {host}", "Accept-Encoding: identity"]
    for name, value in headers.items():
        if name.lower() in _WRITTEN_HERE or not name.isascii() or not name.isprintable() \
                or ":" in name or " " in name or any(c in value for c in "\r\n\x00"):
            return None
        lines.append(f"{name}: {value}")
    lines.append(f"Content-Length: {length}")
    try:
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    except UnicodeEncodeError:
        return None


_CONNECTING = -1
MAIN_THREAD_CONNECT = 0.005
"""Seconds the calling thread waits for a connection before leaving it to a worker."""
MAIN_THREAD_WRITE = 0.1
"""Seconds the calling thread spends writing an early request to a local server that
reads slowly, before a worker thread takes over: the runtime's start-up (and a host's
``cancel``) is not held up by a server that stopped reading."""


def _connected(sock: socket.socket, timeout: float) -> None:
    """Wait until a non-blocking connect completes; raise why it failed, if it did."""
    if not select.select([], [sock], [], timeout)[1]:
        raise TimeoutError("timed out connecting")
    status = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if status:
        raise OSError(status, os.strerror(status))


_WRITTEN_HERE = frozenset(("host", "accept-encoding", "content-length", "transfer-encoding"))

_ADOPTED: list[type] = []


def _adopted(endpoint: Endpoint, sock: socket.socket,
             timeout: float) -> http.client.HTTPConnection:
    """An ``http.client`` connection over ``sock``, whose request is already written:
    its ``getresponse`` reads the answer."""
    import http.client

    if not _ADOPTED:
        class Adopted(http.client.HTTPConnection):
            def getresponse(self) -> http.client.HTTPResponse:
                response = self.response_class(self.sock, method="POST")
                try:
                    response.begin()
                except BaseException:
                    response.close()
                    raise
                if response.will_close:
                    self.close()  # the response keeps its own reference to the socket
                return response

        _ADOPTED.append(Adopted)
    conn: http.client.HTTPConnection = _ADOPTED[0](endpoint.host, endpoint.port,
                                                   timeout=timeout)
    conn.sock = sock
    return conn


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
