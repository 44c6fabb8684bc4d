"""The ``retention`` setting of ``.nonoka/config.toml``, applied at most once a day.

```toml
[retention]
older_than = "90d"                            # required
status = ["completed", "failed", "cancelled"]  # the default
keep_last = 20                                 # the default is 0
```

``maybe_apply`` is called by the human commands (``nonoka run``, ``nonoka sessions``),
never by the per-turn bridge. Its first step is one ``stat`` of a stamp file
(``.nonoka/retention.stamp``); only when that is older than a day does it read the
configuration and prune, then touch the stamp, so the normal path pays microseconds
(without a ``[retention]`` table nothing is written, the check is one more ``stat``).
The stamp and the configuration are opened without following links
(``store/statedir.py``): a committed link cannot make nonoka create or read a file
elsewhere.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from nonoka.errors import ConfigurationError

STAMP = Path(".nonoka") / "retention.stamp"
PERIOD = 86400.0


@dataclass(frozen=True)
class Retention:
    older_than: float
    statuses: tuple[str, ...]
    keep_last: int


def read_retention(project: Path) -> Retention | None:
    """The project's ``[retention]`` table, or ``None`` when it has none."""
    from nonoka.config import CONFIG_FILE
    from nonoka.store.statedir import read_private

    path = project / CONFIG_FILE
    import tomllib

    from nonoka.ops.prune import TERMINAL, parse_age

    try:
        raw = read_private(path.parent, path.name)
        if raw is None:
            return None
        data = tomllib.loads(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigurationError(f"cannot read {path}: {exc}; fix or remove it") from exc
    table = data.get("retention")
    if table is None:
        return None
    if not isinstance(table, dict) or not isinstance(table.get("older_than"), str):
        raise ConfigurationError(f'{path}: [retention] needs older_than = "30d" (an age)')
    try:
        age = parse_age(table["older_than"])
    except ValueError as exc:
        raise ConfigurationError(f"{path}: [retention] {exc}") from None
    statuses = table.get("status", list(TERMINAL))
    keep = table.get("keep_last", 0)
    if (not isinstance(statuses, list) or not all(isinstance(s, str) for s in statuses)
            or not isinstance(keep, int) or keep < 0):
        raise ConfigurationError(f"{path}: [retention] status must be a list of statuses "
                                 "and keep_last a whole number")
    return Retention(age, tuple(statuses), keep)


def due(project: Path, now: float | None = None) -> bool:
    """Whether a day has passed since retention last ran here (one ``stat``)."""
    try:
        last = os.stat(project / STAMP, follow_symlinks=False).st_mtime
    except OSError:
        return True
    return (time.time() if now is None else now) - last >= PERIOD


def touch(project: Path) -> None:
    """Mark today's run: the stamp is created or touched in place, never through a link
    (``WorkspaceError``); without a ``.nonoka/`` nothing is written."""
    from nonoka.store.statedir import open_private

    stamp = project / STAMP
    try:
        fd = open_private(stamp.parent, stamp.name, os.O_WRONLY | os.O_CREAT)
    except FileNotFoundError:
        return
    try:
        os.utime(fd)
    finally:
        os.close(fd)


async def maybe_apply(project: Path, now: float | None = None) -> list[str] | None:
    """Prune by the project's retention setting if a day has passed; the removed ids, or
    ``None`` when nothing was due or configured."""
    if not due(project, now):
        return None
    retention = read_retention(project)
    if retention is None:
        return None  # nothing configured: nothing written either
    from nonoka.ops.prune import prune
    from nonoka.turn.project import open_stores

    async with open_stores(project) as stores:
        result = await prune(stores, older_than=retention.older_than,
                             statuses=retention.statuses, keep_last=retention.keep_last,
                             now=now)
    touch(project)
    return result.removed
