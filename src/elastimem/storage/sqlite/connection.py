"""SQLite connections: how one is made, its pragmas, and what its errors mean (SPEC §4.1).

Every connection of a store is made here (``connect``) with the same pragmas; every raw
``sqlite3.Error`` that reaches a caller goes through ``translate_error`` first, which turns it
into ``StoreError`` or ``StoreLockedError`` with a message that names the file and the fix.
Also here: the write lock shared by every store of this process on one file, and the file's
identity (to notice a store file deleted or replaced while open).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from typing import Any

from ...errors import StoreError, StoreLockedError
from ...text import em_fold
from .cipher import CipherKey, apply_key, driver
from .files import create_private_file

logger = logging.getLogger("elastimem")

# 10 s: long enough to ride out another process's commit or checkpoint, short enough that a
# truly stuck lock surfaces as StoreLockedError instead of a hang. Tests lower it.
BUSY_TIMEOUT_MS = 10_000
CACHE_KIB = 16_000
MEMORY_PATH = ":memory:"

# SQLite primary result codes (sqlite_errorcode & 0xff).
SQLITE_READONLY = 8
SQLITE_BUSY = 5
SQLITE_LOCKED = 6
SQLITE_IOERR = 10
SQLITE_CORRUPT = 11
SQLITE_FULL = 13
SQLITE_CANTOPEN = 14
SQLITE_NOTADB = 26

_MESSAGE_CODES = (
    ("database is locked", SQLITE_BUSY),
    ("database table is locked", SQLITE_LOCKED),
    ("file is not a database", SQLITE_NOTADB),
    ("file is encrypted or is not a database", SQLITE_NOTADB),
    ("database disk image is malformed", SQLITE_CORRUPT),
    ("database or disk is full", SQLITE_FULL),
    ("unable to open database file", SQLITE_CANTOPEN),
    ("attempt to write a readonly database", SQLITE_READONLY),
    ("disk i/o error", SQLITE_IOERR),
)

# The DB-API errors a store connection may raise. SQLCipher's driver (an encrypted store,
# ``cipher_connect``) has its own classes, not subclasses of ``sqlite3.Error``: they are added
# here before its first connection exists. Catch ``ERRORS`` through this module
# (``except connection.ERRORS``), so the tuple is looked up when the except clause runs.
ERRORS: tuple[type[Exception], ...] = (sqlite3.Error,)
INTEGRITY_ERRORS: tuple[type[Exception], ...] = (sqlite3.IntegrityError,)


def _add_driver_errors(error: type[Exception], integrity: type[Exception]) -> None:
    """Let every ``except connection.ERRORS`` catch another driver's errors too."""
    global ERRORS, INTEGRITY_ERRORS
    if error not in ERRORS:
        ERRORS = (*ERRORS, error)
        INTEGRITY_ERRORS = (*INTEGRITY_ERRORS, integrity)


_path_locks: dict[str, threading.RLock] = {}
_path_locks_guard = threading.Lock()
_wal_warned = False


# Store files this process has open now (resolved path -> open Database count). Closing ANY
# file descriptor of a file drops every POSIX lock this process holds on it, SQLite's too:
# a header read with open()/close() while a store is open lets another process think it
# holds the last connection, checkpoint and delete the -wal/-shm under this one (stale reads,
# "database disk image is malformed"). So nothing opens such a file outside SQLite.
_open_files: dict[str, int] = {}
# Those of them opened with a key. An encrypted store's connections are SQLCipher's, another
# copy of SQLite with its own lock bookkeeping: a plain sqlite3 connection opened and closed
# on the same file would drop them too, so an open without the key (or with a key, of a plain
# file) is refused by this record, without any connection (``opening.check_file``).
_open_encrypted: set[str] = set()


def note_open(resolved: str, *, encrypted: bool = False) -> None:
    """Count one more open store of the file at ``resolved`` in this process."""
    with _path_locks_guard:
        _open_files[resolved] = _open_files.get(resolved, 0) + 1
        if encrypted:
            _open_encrypted.add(resolved)


def open_encrypted(resolved: str) -> bool:
    """True while this process has the store at ``resolved`` open with a key."""
    with _path_locks_guard:
        return resolved in _open_encrypted


def note_closed(resolved: str) -> None:
    """Count one store of the file at ``resolved`` closed."""
    with _path_locks_guard:
        left = _open_files.get(resolved, 0) - 1
        if left > 0:
            _open_files[resolved] = left
        else:
            _open_files.pop(resolved, None)
            _open_encrypted.discard(resolved)


def open_here(resolved: str) -> bool:
    """True while this process has the store file at ``resolved`` open."""
    with _path_locks_guard:
        return resolved in _open_files


def path_lock(resolved: str) -> threading.RLock:
    """The write lock of the store file at ``resolved``, one per file in this process."""
    with _path_locks_guard:
        lock = _path_locks.get(resolved)
        if lock is None:
            lock = _path_locks[resolved] = threading.RLock()
        return lock


def error_code(exc: BaseException) -> int | None:
    """The primary SQLite result code of an exception, from its code or its message."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF
    message = str(exc).lower()
    for fragment, mapped in _MESSAGE_CODES:
        if fragment in message:
            return mapped
    return None


def translate_error(exc: BaseException, path: str, action: str = "access") -> StoreError:
    """A ``StoreError`` (or ``StoreLockedError``) for a raw SQLite error, with a fix."""
    code = error_code(exc)
    if code in (SQLITE_BUSY, SQLITE_LOCKED):
        err: StoreError = StoreLockedError(
            f"{path} is locked by another process; close that process or retry later"
        )
    elif code == SQLITE_FULL:
        err = StoreError(f"the disk holding {path} is full; free some space and retry")
    elif code == SQLITE_READONLY:
        err = StoreError(f"{path} is read-only; fix its permissions or open a writable copy")
    elif code == SQLITE_IOERR:
        # A write past a file-size limit or quota (EFBIG, EDQUOT) surfaces as an I/O error.
        err = StoreError(
            f"could not {action} {path} because of a disk I/O error ({exc}); the disk may be "
            "full, over quota or failing: free some space or check the disk, then retry"
        )
    elif code == SQLITE_CANTOPEN and os.path.exists(path) and not os.access(path, os.R_OK):
        err = StoreError(f"cannot open {path}: this user may not read it; fix its permissions")
    elif code == SQLITE_CANTOPEN:
        err = StoreError(
            f"cannot open {path}; check that its folder exists and is writable by this user"
        )
    else:
        err = StoreError(f"could not {action} {path}: {exc}; the store was left unchanged")
    err.__cause__ = exc
    return err


def configure(
    conn: sqlite3.Connection, *, writer: bool, memory: bool = False, read_only: bool = False
) -> None:
    """Pragmas for every connection (why each one is chosen is noted inline)."""
    global _wal_warned
    # Wait for other writers instead of failing at once.
    conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_MS)}")
    # Enforce the cascades and SET NULLs the schema relies on (erase, fact chains).
    conn.execute("PRAGMA foreign_keys = ON")
    conn.create_function("em_fold", 1, em_fold, deterministic=True)
    # 16 MB of page cache (the default is ~2 MB): keeps the small hot tables (facts, graph,
    # meta) resident while chunk scans stream past, measured ~0.5 ms per recall at 10k.
    conn.execute(f"PRAGMA cache_size = {-CACHE_KIB}")
    if read_only:
        # A file this process may not write: make any write fail at once, in SQLite.
        conn.execute("PRAGMA query_only = ON")
    elif writer and not memory:
        # WAL lets readers on other threads and processes run while one writer commits.
        # (":memory:" has no file and always answers "memory"; that is not a refusal.)
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()
        if not mode or str(mode[0]).lower() != "wal":
            conn.execute("PRAGMA journal_mode = DELETE")
            if not _wal_warned:
                _wal_warned = True
                logger.warning("the filesystem refused WAL; using the slower DELETE journal")
    # NORMAL is durable across application crashes in WAL mode and much faster than FULL;
    # only an OS crash or power loss can lose the last commits.
    conn.execute("PRAGMA synchronous = NORMAL")


def raw_connect(
    target: str, *, uri: bool = False, key: CipherKey | None = None
) -> sqlite3.Connection:
    """A connection without pragmas yet: transactions are ours, any thread may use it.
    With ``key``, an SQLCipher connection with the key already applied (``cipher``)."""
    options = {
        "isolation_level": None,  # we issue BEGIN/COMMIT ourselves, nothing commits implicitly
        "check_same_thread": False,
        "timeout": BUSY_TIMEOUT_MS / 1000.0,
        "uri": uri,
    }
    if key is not None:
        return cipher_connect(target, key, **options)
    return sqlite3.connect(target, **options)  # type: ignore[arg-type]


def cipher_connect(target: str, key: CipherKey | None, **kw: Any) -> sqlite3.Connection:
    """An SQLCipher connection to ``target`` (``kw`` as ``sqlite3.connect`` takes them), keyed
    with ``key`` before any statement touches the file; with None, SQLCipher reading a plain
    file (to export it encrypted). Its errors are caught by ``except ERRORS``."""
    dbapi2 = driver()
    _add_driver_errors(dbapi2.Error, dbapi2.IntegrityError)
    conn = dbapi2.connect(target, **kw)
    try:
        if key is not None:
            apply_key(conn, key)
        else:
            conn.execute("PRAGMA cipher_log_level = NONE")
            conn.execute("PRAGMA temp_store = MEMORY")
    except BaseException:
        conn.close()
        raise
    return conn


def connect_destination(path: str, key: CipherKey | None) -> sqlite3.Connection:
    """A connection to a new, empty file at ``path`` for a copy of a store: an SQLCipher
    connection keyed with ``key`` when one is given (an encrypted copy), a plain one
    otherwise; the file is created private first, as every store file is.

    Made for ``source.backup(dest)`` (SQLite's online backup): it copies pages between
    connections of one library, so the source must be a connection of the same kind, e.g.
    ``raw_connect(store_path, key=database.cipher)``; a plain store copied to an encrypted
    file (or the other way round) is ``rekey.convert``'s work instead."""
    create_private_file(path)
    if key is None:
        return sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    return cipher_connect(path, key, isolation_level=None, check_same_thread=False)


def connect(
    target: str,
    *,
    writer: bool,
    read_only_uri: str | None = None,
    key: CipherKey | None = None,
) -> sqlite3.Connection:
    """A configured connection to ``target`` (through ``read_only_uri`` when one is given)."""
    conn = raw_connect(read_only_uri or target, uri=read_only_uri is not None, key=key)
    try:
        configure(conn, writer=writer, read_only=read_only_uri is not None)
    except BaseException:
        conn.close()
        raise
    return conn


def close_quietly(conn: sqlite3.Connection) -> None:
    """Close ``conn``; a failure to close changes nothing for the caller."""
    try:
        conn.close()
    except ERRORS:
        pass


def file_identity(path: str) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of the file at ``path``; None when there is none."""
    try:
        status = os.stat(path)
    except (OSError, ValueError):
        return None
    return status.st_dev, status.st_ino
