"""The project's ``.nonoka/`` directory: nonoka's own, owner-only, and out of every snapshot.

Hosts such as OpenCode snapshot the project's files with git and restore them on undo; a
restored ``sessions.db`` would roll nonoka's store back under a running conversation. A
``.gitignore`` holding ``*`` inside the directory keeps all of it out of git, and so out of
any git-based snapshot, whatever the project's own ``.gitignore`` says.

A repository decides what its checkout holds, ``.nonoka`` included: committed as a
symlink (``.nonoka -> ../elsewhere``) it would have nonoka write the conversations and
the ``.gitignore`` wherever it points. So ``.nonoka`` must be a real directory owned by
the user (anything else is refused with a ``WorkspaceError`` that says what to do), and
the files nonoka creates or opens in it are opened relative to the directory's
descriptor with ``O_NOFOLLOW``: a link inside is refused too, never followed. Standard
library only: the bridge opens the directory on every turn.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

from nonoka.errors import WorkspaceError

GITIGNORE = ".gitignore"
GITIGNORE_TEXT = ("# nonoka's state: never in git, nor in a host's snapshot "
                  "(undo must not roll it back)\n*\n")


def check_state_dir(folder: Path) -> bool:
    """Whether ``folder`` exists; when it does it is a real directory of this user's, or
    a ``WorkspaceError`` says what it is instead (nothing behind it is looked at)."""
    try:
        info = os.lstat(folder)
    except FileNotFoundError:
        return False
    _judge(folder, info)
    return True


def _judge(folder: Path, info: os.stat_result) -> None:
    if stat.S_ISLNK(info.st_mode):
        try:
            target = f" (to {os.readlink(folder)})"
        except OSError:
            target = ""
        raise WorkspaceError(
            f"{folder} is a symbolic link{target}, and nonoka keeps its data only in a "
            "real directory of its own; remove the link, and nonoka creates the directory")
    if not stat.S_ISDIR(info.st_mode):
        raise WorkspaceError(f"{folder} is not a directory; move it away, and nonoka "
                             "creates its directory there")
    if info.st_uid != os.geteuid():
        raise WorkspaceError(
            f"{folder} belongs to another user (uid {info.st_uid}), and nonoka keeps its "
            "data only in a directory of your own; run it in a project of your own, or set "
            "NONOKA_DATABASE_URL")


def ensure_state_dir(folder: Path, *, ignore: bool = True) -> bool:
    """Create ``folder`` mode 0700 if missing and make sure it holds the ``.gitignore``.

    Returns whether the directory was created. An existing directory keeps its mode (it may
    hold files with their own); it only gets the ``.gitignore`` when that is missing. A
    link, a file or another user's directory in its place is a ``WorkspaceError``.
    """
    created = False
    if not check_state_dir(folder):
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            check_state_dir(folder)  # made by another process meanwhile: judge it too
        else:
            os.chmod(folder, 0o700)  # mkdir's mode is filtered by the umask
            created = True
    if ignore:
        ignore_everything(folder)
    return created


def open_private(folder: Path, name: str, flags: int, mode: int = 0o600) -> int:
    """A descriptor for ``folder/name``, neither path followed if it is a link: the
    directory is checked on its own descriptor, the file opened relative to it.

    ``WorkspaceError`` for a link (the directory or the file), ``OSError`` otherwise.
    """
    try:
        directory = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
                            | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            check_state_dir(folder)
        raise
    try:
        _judge(folder, os.fstat(directory))
        try:
            return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=directory)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise WorkspaceError(
                    f"{folder / name} is a symbolic link, and nonoka never follows one in "
                    f"{folder.name}/; remove it") from None
            raise
    finally:
        os.close(directory)


def read_private(folder: Path, name: str, limit: int = 1 << 20) -> bytes | None:
    """The first ``limit`` bytes of ``folder/name`` opened as ``open_private`` does;
    ``None`` when there is no such file."""
    try:
        fd = open_private(folder, name, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise WorkspaceError(f"{folder / name} is not a regular file; remove it")
        return os.read(fd, limit)
    finally:
        os.close(fd)


def ignore_everything(folder: Path) -> None:
    """Write ``folder/.gitignore`` (``*``) unless one is there; a read-only folder is left be."""
    try:
        # Owner-only like everything else in the folder, whatever the umask.
        fd = open_private(folder, GITIGNORE, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    except FileExistsError:
        return  # there already (a link included, never followed), or written meanwhile
    except OSError:
        return  # a read-only project: nonoka still works; only snapshots may include it
    try:
        with contextlib.suppress(OSError):
            os.fchmod(fd, 0o600)
            os.write(fd, GITIGNORE_TEXT.encode())
    finally:
        os.close(fd)
