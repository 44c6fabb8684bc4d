"""Serve the ui: open the project's stores, bind, print the address with its token, run.

The socket is bound here rather than by uvicorn so that ``--port 0`` (any free port)
still prints the real address and the ``Host`` check knows the port. ``--open`` starts
the browser on a page only this user can read (``opener``), which sends it to the
address with a one-time code: neither the token nor the code is ever on the browser's
command line, which every user of the machine can read (``ps``, ``/proc/*/cmdline``).
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import shutil
import socket
import tempfile
import threading
import webbrowser
from collections.abc import Callable
from html import escape
from pathlib import Path

import uvicorn

from nonoka.store.project import open_project_stores
from nonoka.ui.app import Settings, create_app
from nonoka.ui.data import SessionQuery, UiData


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    """A listening socket; ``OSError`` names the address when it is taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def address(host: str, port: int, token: str, *, name: str = "token") -> str:
    """The page's address with ``token`` (or, with ``name="code"``, a one-time code)."""
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"http://{shown}:{port}/?{name}={token}"


OPENER = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="referrer" content="no-referrer">
<meta http-equiv="refresh" content="0; url={url}">
<title>nonoka ui</title>
</head>
<body><p>Opening <a href="{url}">nonoka ui</a>&hellip;</p></body>
</html>
"""
"""The page ``--open`` hands the browser: it goes on to ``url`` (with the one-time code)."""


def opener(url: str) -> Path:
    """A page that sends a browser to ``url``, in a new directory only this user may enter
    (mode 0700), the file only this user may read (0600): the browser is given its path,
    so what ``url`` carries never reaches a command line. Remove its directory when done."""
    directory = Path(tempfile.mkdtemp(prefix="nonoka-ui-"))
    path = directory / "open.html"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0),
                 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as page:
        page.write(OPENER.format(url=escape(url)))
    return path


async def serve(project: Path, database_url: str | None, *, host: str, port: int,
                allow_actions: bool, open_browser: bool, say: Callable[[str], None]) -> None:
    """Run until interrupted (SIGINT or SIGTERM)."""
    stores = open_project_stores(project, database_url)
    page: Path | None = None
    try:
        data = UiData(stores)
        await data.list_sessions(SessionQuery(limit=1))  # fail now, not on the first page
        sock = bind(host, port)
        port = sock.getsockname()[1]
        token = secrets.token_urlsafe(24)
        hosts = None
        if is_loopback(host):
            hosts = frozenset(f"{name}:{port}" for name in ("127.0.0.1", "localhost", "[::1]",
                                                               host))
        settings = Settings(project=str(project), database=stores.url,
                            allow_actions=allow_actions)
        code = secrets.token_urlsafe(16) if open_browser else None
        app = create_app(data, settings, token=token, hosts=hosts, code=code)
        url = address(host, port, token)
        mode = "actions allowed" if allow_actions else "read-only"
        say(f"nonoka ui: {settings.project} ({mode})\n  {url}\n"
            "  the address carries an access token: share it only with people who may read "
            "these sessions. Ctrl+C stops.")
        if code is not None:
            page = opener(address(host, port, code, name="code"))
            threading.Thread(target=webbrowser.open, args=(page.as_uri(),),
                             daemon=True).start()
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                                timeout_graceful_shutdown=2, server_header=False)
        await uvicorn.Server(config).serve(sockets=[sock])
    finally:
        if page is not None:
            shutil.rmtree(page.parent, ignore_errors=True)
        await stores.close()
