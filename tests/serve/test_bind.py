"""The listening socket ``nonoka serve`` binds: its accepted connections send small
writes at once (``TCP_NODELAY``), so a client that keeps its connection does not wait for
its own delayed ACK between an answer's headers and body."""

from __future__ import annotations

import asyncio
import socket

from nonoka.serve.server import bind


async def test_accepted_connections_do_not_wait_to_send() -> None:
    sock = bind("127.0.0.1", 0)
    accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    class Probe(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            conn = transport.get_extra_info("socket")
            accepted.set_result(conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            transport.close()

    server = await asyncio.get_running_loop().create_server(Probe, sock=sock)
    try:
        _, writer = await asyncio.open_connection(*sock.getsockname()[:2])
        assert await asyncio.wait_for(accepted, 10) != 0
        writer.close()
    finally:
        server.close()
        await server.wait_closed()
