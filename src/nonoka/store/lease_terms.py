"""What every session lease shares, on the standard library only.

The owner token and the ttl. The bridge's early dispatch takes a session's lease before
it sends a model request, and runs before pydantic (and so ``nonoka.store.base`` and
``nonoka.store.leases``) is loaded.
"""

from __future__ import annotations

import os
import socket

DEFAULT_TTL = 30.0
"""Seconds a lease outlives its last renewal: how long a crash keeps a session busy."""


def new_lease_owner() -> str:
    """A token unique to this process and call: ``host:pid:random``.

    Readable in a busy message (which machine and process hold the session), unique even
    when two requests of one process run the same session. ``host`` is ``lease_host()``.
    """
    return f"{lease_host()}:{os.getpid()}:{os.urandom(6).hex()}"  # what secrets.token_hex does


_host: str | None = None


def lease_host() -> str:
    """This host as lease owners name it: ``hostname/boot.pidns`` on Linux.

    A pid means something only within one pid namespace of one boot, and containers
    sharing a database file often share a hostname too; an owner is judged dead by its
    pid (``nonoka.store.leases.holder_is_dead``) only when this whole name matches.
    Elsewhere it is the hostname alone.
    """
    global _host
    if _host is None:
        name = socket.gethostname()
        try:
            with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as boot:
                name += f"/{boot.read().strip()[:8]}.{os.stat('/proc/self/ns/pid').st_ino}"
        except OSError:
            pass
        _host = name
    return _host

