"""The project's ``.nonoka/`` directory: owner-only, and out of every host's snapshot.

Hosts such as OpenCode snapshot the project's files with git and restore them on undo; a
restored ``sessions.db`` would roll nonoka's store back under a running conversation. A
``.gitignore`` holding ``*`` inside the directory keeps all of it out of git, and so out of
any git-based snapshot, whatever the project's own ``.gitignore`` says. Standard library
only: the bridge opens the directory on every turn.
"""

from __future__ import annotations

import os
from pathlib import Path

GITIGNORE = ".gitignore"
GITIGNORE_TEXT = ("# nonoka's state: never in git, nor in a host's snapshot "
                  "(undo must not roll it back)\n*\n")


def ensure_state_dir(folder: Path, *, ignore: bool = True) -> bool:
    """Create ``folder`` mode 0700 if missing and make sure it holds the ``.gitignore``.

    Returns whether the directory was created. An existing directory keeps its mode (it may
    hold files with their own); it only gets the ``.gitignore`` when that is missing.
    """
    created = False
    try:
        folder.mkdir(mode=0o700)
    except FileExistsError:
        pass
    else:
        os.chmod(folder, 0o700)  # mkdir's mode is filtered by the umask
        created = True
    if ignore:
        ignore_everything(folder)
    return created


def ignore_everything(folder: Path) -> None:
    """Write ``folder/.gitignore`` (``*``) unless one is there; a read-only folder is left be."""
    target = folder / GITIGNORE
    if target.exists():
        return
    try:
        # Owner-only like everything else in the folder, whatever the umask.
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, GITIGNORE_TEXT.encode())
        finally:
            os.close(fd)
    except FileExistsError:
        return  # another process wrote it first
    except OSError:
        return  # a read-only project: nonoka still works; only snapshots may include it
