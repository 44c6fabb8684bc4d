"""Serve: open the project's stores, bind, run uvicorn, say where once it listens.

The socket is bound here rather than by uvicorn, so ``--port 0`` (any free port) still
prints the real address; the address is printed once the server accepts requests. On a
loopback address the ``Host`` header must name it (a page that rebinds a DNS name to
127.0.0.1 gets 403) and a key is optional; binding any other address needs one.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Callable
from pathlib import Path

import uvicorn

from nonoka.serve.app import Served, create_app
from nonoka.serve.chat import ChatCompletions
from nonoka.serve.files import Files
from nonoka.serve.keys import Gate, KeyStore, open_keys
from nonoka.serve.model import Models
from nonoka.serve.responses import Responses
from nonoka.store.files import open_files
from nonoka.store.project import ProjectStores, open_project_stores
from nonoka.store.reuse import StoreReuse


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    """A listening socket; ``OSError`` when the address is taken.

    Made as ``IPPROTO_TCP``, not protocol 0: asyncio sets ``TCP_NODELAY`` only on
    accepted sockets that say so (they take the listening socket's), and without it an
    answer's body waits behind its headers for the client's delayed ACK (40 ms) on a
    connection the client keeps."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def base_url(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"http://{shown}:{port}/v1"


def open_served(project: Path, database_url: str | None, model: str
                ) -> tuple[Served, ProjectStores]:
    """What a server serves, over the project's stores (the caller closes them)."""
    reuse = StoreReuse()
    stores = open_project_stores(project, database_url, reuse=reuse)
    models = Models(project, model)
    return Served(Responses(stores, models, project), ChatCompletions(project, models, reuse),
                  models, Files(open_files(stores.checkpoints))), stores


class _Server(uvicorn.Server):
    """uvicorn's server, telling ``started`` once it accepts requests."""

    def __init__(self, config: uvicorn.Config,
                 started: Callable[[uvicorn.Server], None] | None) -> None:
        super().__init__(config)
        self._told = started

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started and self._told is not None:
            self._told(self)


async def run(served: Served, sock: socket.socket, *, key: str | None,
              started: Callable[[uvicorn.Server], None] | None = None,
              keys: KeyStore | None = None) -> None:
    """Serve on ``sock`` until the server is told to exit (a signal, ``should_exit``);
    turns still running then are cancelled, and saved as such. ``key``: the server's
    own key; ``keys``: the keys of ``nonoka serve keys``."""
    host, port = sock.getsockname()[:2]
    hosts = None
    if is_loopback(host):
        hosts = frozenset(f"{name}:{port}" for name in ("127.0.0.1", "localhost", "[::1]"))
    gate = Gate(keys, key, always=not is_loopback(host))
    app = create_app(served, hosts=hosts, gate=gate)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                            timeout_graceful_shutdown=5, server_header=False)
    try:
        await _Server(config, started).serve(sockets=[sock])
    finally:
        tasks = list(served.tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        served.models.close()


async def serve(project: Path, database_url: str | None, *, model: str, host: str,
                port: int, key: str | None, say: Callable[[str], None]) -> None:
    """The command: run until interrupted (SIGINT or SIGTERM)."""
    served, stores = open_served(project, database_url, model)
    keys: KeyStore | None = None
    try:
        await stores.index.list_sessions(limit=1)  # fail now, not on the first request
        keys = open_keys(project, database_url)
        named = await keys.any_active()
        if key is None and not named and not is_loopback(host):
            raise KeyRequired(host)
        sock = bind(host, port)
        url = base_url(host, sock.getsockname()[1])
        needs = ("clients send an API key" if key or named
                 else "no API key (loopback only)")
        await run(served, sock, key=key, keys=keys, started=lambda _server: say(
            f"nonoka serve: {project} with {model}\n  {url}\n  {needs}; Ctrl+C stops."))
    finally:
        if keys is not None:
            await keys.close()
        await served.chat.kept.close()
        await stores.close()


class KeyRequired(Exception):
    """Binding beyond loopback with no key to require."""
