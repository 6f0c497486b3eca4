"""Private on disk: a store holds what a person told their agent (health, money, family).

Every file elastimem creates for a store is created with mode 0600 before SQLite opens it, so
it is never readable by other accounts, not even for a moment; SQLite gives the ``-wal`` and
``-shm`` files it makes the main file's mode. Every folder elastimem creates on the way to a
store is 0700, level by level; a folder that already exists is the user's and keeps its mode.
An existing store that other accounts may read or write is named in one warning with the
command that fixes it; its mode is never changed behind the user's back.

On Windows these mode bits mean nothing (Python maps them to the read-only flag only): a store
there is exactly as private as the folder it is in. Folders under the user's profile
(``%APPDATA%``, ``%LOCALAPPDATA%``, the home folder) are readable by that user, the
administrators and SYSTEM only, by their inherited ACLs; a store in a shared folder
(``C:\\Users\\Public``, a share, the root of another drive) is as readable as that folder.
"""

from __future__ import annotations

import logging
import os
import shlex
import stat
import threading
from pathlib import Path

logger = logging.getLogger("elastimem")

FILE_MODE = 0o600
FOLDER_MODE = 0o700
# Permission bits of the group and of others: any of them makes a store readable or writable
# by another account on the machine.
SHARED_BITS = 0o077
SIDE_SUFFIXES = ("-wal", "-shm")

_POSIX = os.name == "posix"
_warned: set[str] = set()
_warned_lock = threading.Lock()


def make_private_folders(folder: str | os.PathLike[str]) -> None:
    """Create each missing level of ``folder``, outermost first, with mode 0700.

    Levels that exist are left as they are. Raises ``OSError`` like ``os.mkdir`` (a file in
    the way, no permission to create).
    """
    missing: list[Path] = []
    level = Path(folder)
    while not os.path.isdir(level):
        missing.append(level)
        if level.parent == level:
            break
        level = level.parent
    for path in reversed(missing):
        try:
            os.mkdir(path, FOLDER_MODE)
        except FileExistsError:
            if os.path.isdir(path):
                continue  # another process made it meanwhile: theirs to keep as it is
            raise
        if _POSIX:
            # mkdir's mode passes through the umask, which can only take bits away; a umask
            # that takes the owner's own (0o277) would leave a folder the store cannot use.
            os.chmod(path, FOLDER_MODE)


def create_private_file(path: str) -> bool:
    """Create ``path`` empty with mode 0600 unless something is already there.

    True when this call created it. SQLite then opens it as a new, empty database (a file of
    zero bytes is one). Any error other than "it exists" is left for SQLite to report when it
    opens the path, as it did before (a folder this user may not write, say).
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, FILE_MODE)
    except OSError:
        return False
    try:
        if _POSIX:
            os.fchmod(fd, FILE_MODE)  # the umask may have taken the owner's bits too
    finally:
        os.close(fd)
    return True


def make_private(path: str) -> None:
    """Take the group's and others' bits off a file elastimem made (a set-aside copy)."""
    if not _POSIX:
        return
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
        if mode & SHARED_BITS:
            os.chmod(path, mode & ~SHARED_BITS)
    except OSError as exc:
        logger.warning("could not make %s private (%s); run: chmod 600 %s", path, exc, path)


def file_mode(path: str) -> str | None:
    """The permission bits of ``path`` as four octal digits ("0600"), or None."""
    return f"{_mode(path):04o}" if os.path.exists(path) else None


def warn_if_shared(path: str) -> None:
    """Log one warning (once per file and process) when other accounts may read or write the
    store at ``path``; its mode is left as it is."""
    if not _POSIX:
        return
    mode = _mode(path)
    if not mode & 0o066:
        return
    with _warned_lock:
        if path in _warned:
            return
        _warned.add(path)
    can = " and ".join(verb for verb, mask in (("read", 0o044), ("write", 0o022)) if mode & mask)
    # SQLite made the side files with the store's mode: they need the same fix.
    files = [path, *(path + s for s in SIDE_SUFFIXES if os.path.exists(path + s))]
    logger.warning(
        "other accounts on this machine can %s the memory store %s (mode %04o); make it "
        "private with: chmod 600 %s",
        can,
        path,
        mode,
        " ".join(shlex.quote(f) for f in files),
    )


def _mode(path: str) -> int:
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except (OSError, ValueError):
        return 0


STORE_COMPANIONS = ("", "-wal", "-shm", "-journal")


def store_file_at(target: str, store: str) -> str | None:
    """The suffix ("" for the store itself, else "-wal"...) when writing ``target`` would
    write onto the store file ``store`` or a companion of it (by path, symlink or hard
    link), else None. An export or a graph page written there destroyed the store."""
    real = os.path.realpath(os.path.expanduser(target))
    for suffix in STORE_COMPANIONS:
        companion = store + suffix
        if real == companion:
            return suffix
        try:
            if os.path.samefile(real, companion):
                return suffix
        except OSError:
            continue
    return None
