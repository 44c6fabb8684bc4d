"""A model call's HTTP exchange read on the event loop, for a process that answers call
after call on one loop (``nonoka serve``, a warm bridge).

A worker thread's exchange (``nonoka.llm.transport.Exchange``) wakes the thread for the
request and the loop for each read it hands back: on an idle machine each wake-up costs
the call tens to hundreds of microseconds, and a server answering in milliseconds pays
them on every request. Here the loop writes the request and reads the answer itself
(``asyncio`` streams), parsing the stream with the same ``Reading`` as the thread, so
the same limits, failures and events come out in the same order; a cancel is the
awaiting task's, and closes the connection.

The request's bytes are ``http.client``'s (``Host``, ``Accept-Encoding: identity``,
``Content-Length``, then the caller's headers in their order): an endpoint sees the
same request either way. Connections are kept as the thread's are
(``nonoka.llm.connections``): a clean answer read to its end leaves its connection for
the next call; one found closed when the request is sent, before any byte of an answer,
is replaced by a fresh one, once.

Standard library only. Internal: not part of the public API (docs/architecture.md,
"Public API").
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING

from nonoka.llm.transport import (
    DRAIN_BYTES,
    DRAIN_SECONDS,
    END,
    MAX_ERROR_BODY,
    READ_SIZE,
    STALE,
    Dialect,
    Endpoint,
    Reading,
    StreamLimits,
    http_failure,
)

if TYPE_CHECKING:
    import ssl

Key = tuple[str, str, int]
Pair = tuple[asyncio.StreamReader, asyncio.StreamWriter]
HEAD_LIMIT = 64 * 1024
"""The most a status line or a header line may hold."""
HEADERS = 100
"""The most header lines an answer may have (``http.client``'s limit)."""


class LoopConnections:
    """Idle keep-alive connections of the loop's exchanges, at most ``per_host`` per
    endpoint; an exchange started here (``__call__``) takes and gives them back. The
    process's entry point creates one and gives it to its ``Workers`` as ``on_loop``."""

    def __init__(self, per_host: int = 8, idle_seconds: float = 30.0) -> None:
        self.per_host = per_host
        self.idle_seconds = idle_seconds
        self._idle: dict[Key, list[tuple[float, asyncio.AbstractEventLoop, Pair]]] = {}
        self._draining: set[asyncio.Task[None]] = set()
        self._ssl: ssl.SSLContext | None = None
        self.opened = 0
        """Connections the exchanges opened."""
        self.reused = 0
        """Connections taken from here for another call."""

    def __call__(self, endpoint: Endpoint, body: bytes, headers: dict[str, str],
                 timeout: float, dialect: Dialect, limits: StreamLimits) -> LoopCall:
        return LoopCall(self, endpoint, body, headers, timeout, dialect, limits)

    def take(self, key: Key) -> Pair | None:
        """The most recently kept connection for ``key`` that is still open, or ``None``."""
        kept = self._idle.get(key)
        now = time.monotonic()
        loop = asyncio.get_running_loop()
        while kept:
            since, owner, (reader, writer) = kept.pop()
            if owner is not loop:  # a connection of a loop that has ended is no use
                continue
            if now - since <= self.idle_seconds and _quiet(reader, writer):
                self.reused += 1
                return reader, writer
            writer.close()
        return None

    def give(self, key: Key, pair: Pair) -> None:
        kept = self._idle.setdefault(key, [])
        kept.append((time.monotonic(), asyncio.get_running_loop(), pair))
        if len(kept) > self.per_host:
            kept.pop(0)[2][1].close()

    def idle(self, key: Key) -> int:
        """How many connections wait for ``key``."""
        return len(self._idle.get(key, ()))

    async def open(self, endpoint: Endpoint) -> Pair:
        secure = endpoint.scheme == "https"
        if secure and self._ssl is None:  # loading the CA store costs milliseconds: once
            import ssl

            self._ssl = ssl.create_default_context()
        pair = await asyncio.open_connection(
            endpoint.host, endpoint.port, ssl=self._ssl if secure else None,
            server_hostname=endpoint.host if secure else None, limit=HEAD_LIMIT)
        self.opened += 1
        return pair

    def drain(self, key: Key, pair: Pair, answer: _Answer) -> None:
        """Read the rest of ``answer`` (its end, after the last event) off the loop's
        current step, then keep the connection; close it if the answer does not end
        within ``DRAIN_SECONDS`` and ``DRAIN_BYTES``."""
        task = asyncio.get_running_loop().create_task(self._drain(key, pair, answer))
        self._draining.add(task)
        task.add_done_callback(self._draining.discard)

    async def _drain(self, key: Key, pair: Pair, answer: _Answer) -> None:
        left = DRAIN_BYTES
        try:
            async with asyncio.timeout(DRAIN_SECONDS):
                while not answer.done and left > 0:
                    left -= len(await answer.piece(left))
        except (OSError, EOFError, ValueError, TimeoutError, asyncio.IncompleteReadError):
            pass
        if answer.done and not answer.closes:
            self.give(key, pair)
        else:
            pair[1].close()

    async def settled(self) -> None:
        """Wait until every answer read to its last event has kept (or closed) its
        connection."""
        while self._draining:
            await asyncio.gather(*self._draining)

    def close(self) -> None:
        """Close every idle connection."""
        for kept in self._idle.values():
            for _, owner, (_, writer) in kept:
                if not owner.is_closed():
                    writer.close()
        self._idle.clear()


def _quiet(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    """Whether an idle connection is open with nothing to read: anything there is the
    server's hang-up (or what nobody asked for), and the connection is no use."""
    return not writer.is_closing() and not reader.at_eof() and not _waiting(reader)


def _waiting(reader: asyncio.StreamReader) -> int:
    """How many bytes wait unread in ``reader`` (its buffer; 0 where a Python keeps it
    elsewhere, which only hands the events over in smaller batches)."""
    return len(getattr(reader, "_buffer", b""))


class LoopCall:
    """One exchange on the loop: ``batches`` yields what each read brought, as
    ``Reading`` items, the last batch ending with ``END``; ``abort`` (a failure or a
    cancel on the caller's side) closes the connection."""

    def __init__(self, connections: LoopConnections, endpoint: Endpoint, body: bytes,
                 headers: dict[str, str], timeout: float, dialect: Dialect,
                 limits: StreamLimits) -> None:
        self._connections = connections
        self._endpoint = endpoint
        self._body = body
        self._headers = headers
        self._reading = Reading(dialect, limits, timeout)
        self._pair: Pair | None = None

    def abort(self) -> None:
        pair, self._pair = self._pair, None
        if pair is not None:
            pair[1].close()

    async def batches(self) -> AsyncGenerator[list[object], None]:
        reading = self._reading
        answer: _Answer | None = None
        try:
            try:
                answer = await self._respond()
                while True:
                    async with asyncio.timeout(reading.next_wait()):
                        piece = await answer.piece(READ_SIZE)
                    if not piece:
                        reading.ended()
                        break
                    if reading.feed(piece):
                        break
                    if reading.out and not answer.buffered():  # what came in one read
                        yield reading.take()
            except Exception as exc:
                reading.post(reading.failed(exc, self._endpoint))
                answer = None
            reading.post(END)
            pair, self._pair = self._pair, None
            if pair is not None:
                if (answer is not None and reading.clean_end and not reading.error_seen
                        and not answer.closes):
                    self._connections.drain(_key(self._endpoint), pair, answer)
                else:
                    pair[1].close()
            yield reading.take()
        finally:
            self.abort()  # cancelled, or closed before the end: the connection is no use

    async def _respond(self) -> _Answer:
        """Send the request (on a kept connection when there is one) and read the
        answer's head; an answer other than 200 is a ``Failure`` (the dialect's)."""
        connections, key = self._connections, _key(self._endpoint)
        request = _request(self._endpoint, self._headers, self._body)
        reading = self._reading
        pair = connections.take(key)
        reused = pair is not None
        if pair is None:
            async with asyncio.timeout(reading.timeout):
                pair = await connections.open(self._endpoint)
        self._pair = pair
        try:
            answer = await self._exchange(pair, request)
        except STALE:
            if not reused:
                raise
            # The server closed it while it waited: not answered, so send it anew.
            self.abort()
            async with asyncio.timeout(reading.timeout):
                self._pair = pair = await connections.open(self._endpoint)
            answer = await self._exchange(pair, request)
        if answer.status != 200:
            async with asyncio.timeout(reading.timeout):
                error = await answer.error_body()
            raise (reading.dialect.failure or http_failure)(error)
        return answer

    async def _exchange(self, pair: Pair, request: bytes) -> _Answer:
        reader, writer = pair
        writer.write(request)
        async with asyncio.timeout(self._reading.next_wait()):
            await writer.drain()
            return await _Answer.read_head(reader)


class _Answer:
    """An answer's status, headers and body, its body read as its framing says
    (chunked, sized, or up to the connection's end)."""

    def __init__(self, reader: asyncio.StreamReader, version: str, status: int, reason: str,
                 headers: dict[str, str]) -> None:
        self._reader = reader
        self.status = status
        self.reason = reason
        self.headers = headers
        coding = headers.get("transfer-encoding", "").lower()
        self._chunked = "chunked" in coding
        length = headers.get("content-length")
        self._left: int | None = None if self._chunked or length is None else int(length)
        self._chunk = 0
        """Bytes left of the current chunk."""
        self._crlf = False
        """A chunk's closing line break is still to be read."""
        self.done = self._left == 0
        """The body was read to its end."""
        connection = headers.get("connection", "").lower()
        self.closes = ((not self._chunked and length is None) or connection == "close"
                       or (version == "HTTP/1.0" and connection != "keep-alive"))
        """The server closes the connection after this answer."""

    @classmethod
    async def read_head(cls, reader: asyncio.StreamReader) -> _Answer:
        line = await reader.readline()
        if not line:  # as ``http.client`` says it (a ``ConnectionResetError``)
            import http.client

            raise http.client.RemoteDisconnected(
                "Remote end closed connection without response")
        version, _, rest = line.decode("latin-1").rstrip("\r\n").partition(" ")
        code, _, reason = rest.partition(" ")
        if not version.startswith("HTTP/") or not code.isdigit():
            raise ValueError(f"the server answered {line[:80]!r}, not HTTP")
        headers: dict[str, str] = {}
        for _ in range(HEADERS + 1):
            field = await reader.readline()
            if field in (b"\r\n", b"\n", b""):
                return cls(reader, version, int(code), reason, headers)
            name, _, value = field.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        raise ValueError(f"the answer has more than {HEADERS} header lines")

    async def piece(self, most: int) -> bytes:
        """The next bytes of the body, at most ``most``; ``b""`` at its end (or when the
        server hung up before it)."""
        reader = self._reader
        if self.done:
            return b""
        if self._left is not None:
            data = await reader.read(min(self._left, most))
            self._left -= len(data)
            self.done = self._left == 0 or not data
            return data
        if not self._chunked:
            data = await reader.read(most)
            self.done = not data
            return data
        try:
            if self._crlf:
                await reader.readexactly(2)
                self._crlf = False
            if self._chunk == 0:
                size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                        pass  # trailer fields
                    self.done = True
                    return b""
                self._chunk = size
            data = await reader.read(min(self._chunk, most))
        except asyncio.IncompleteReadError:  # hung up mid-chunk: the stream ends here
            data = b""
        if not data:
            self.done = True
            return b""
        self._chunk -= len(data)
        if self._chunk == 0:
            self._crlf = True
            if _waiting(reader) >= 2:  # the chunk's line break is here
                await reader.readexactly(2)
                self._crlf = False
        return data

    def buffered(self) -> bool:
        """Whether more of the answer has arrived already, beyond a chunk's line break
        (the events of one read are handed over together, as a thread's exchange hands
        over one socket read). A line break still owed is part of the chunk read: at
        most its first byte can be here (``read`` takes both when they are)."""
        return _waiting(self._reader) > (1 if self._crlf else 0)

    async def error_body(self) -> _ErrorAnswer:
        """The answer read for its dialect's failure (up to ``MAX_ERROR_BODY``)."""
        body = b""
        while len(body) < MAX_ERROR_BODY:
            piece = await self.piece(MAX_ERROR_BODY - len(body))
            if not piece:
                break
            body += piece
        return _ErrorAnswer(self.status, self.reason, self.headers, body)


class _ErrorAnswer:
    """An error answer, read: what ``http.client.HTTPResponse`` offers a dialect."""

    def __init__(self, status: int, reason: str, headers: dict[str, str], body: bytes
                 ) -> None:
        self.status = status
        self.reason = reason
        self._headers = headers
        self._body = body

    def read(self, amt: int | None = None) -> bytes:
        body, self._body = (self._body, b"") if amt is None else (
            self._body[:amt], self._body[amt:])
        return body

    def getheader(self, name: str) -> str | None:
        return self._headers.get(name.lower())


def _key(endpoint: Endpoint) -> Key:
    return (endpoint.scheme, endpoint.host, endpoint.port)


def _request(endpoint: Endpoint, headers: dict[str, str], body: bytes) -> bytes:
    """The request as ``http.client`` writes it (``putrequest``, then ``Content-Length``,
    then the caller's headers in their order)."""
    names = {name.lower() for name in headers}
    lines = [f"POST {endpoint.path} HTTP/1.1"]
    if "host" not in names:
        host = f"[{endpoint.host}]" if ":" in endpoint.host else endpoint.host
        default = 443 if endpoint.scheme == "https" else 80
        lines.append(f"Host: {host}" if endpoint.port == default
                     else f"Host: {host}:{endpoint.port}")
    if "accept-encoding" not in names:
        lines.append("Accept-Encoding: identity")
    if "content-length" not in names and "transfer-encoding" not in names:
        lines.append(f"Content-Length: {len(body)}")
    for name, value in headers.items():
        if any(c in name for c in ":\r\n") or "\r" in value or "\n" in value:
            raise ValueError(f"Invalid header {name!r}: a line break or colon in it")
        lines.append(f"{name}: {value}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
