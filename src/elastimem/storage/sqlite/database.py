"""Connections, pragmas, transactions and the open sequence (SPEC §4.1, §4.3, §4.5).

One ``Database`` per store instance holds one *writer* connection and one *reader*
connection per thread. Every write goes through ``atomic()``: it takes the write lock (an
RLock shared by every instance in this process that opened the same resolved path), runs
``BEGIN IMMEDIATE … COMMIT`` at the top level and a SAVEPOINT when nested, and rolls back on
any exception. Reads go through ``read()``: the calling thread's own connection inside one
``BEGIN … COMMIT`` so a multi-statement read sees one snapshot. ``:memory:`` has a single
connection, so its reads take the lock too.

SQLite errors never leave this module raw: ``translate_error`` turns them into ``StoreError``
or ``StoreLockedError`` with a message that names the file and the fix.
"""

from __future__ import annotations

import logging
import os
import re
import sqlite3
import stat
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ...clock import now_ts
from ...errors import ConfigError, SchemaTooNewError, StoreClosedError, StoreError, StoreLockedError
from ...text import em_fold
from . import files, migrations
from .meta import get_meta, log_event, set_meta
from .postings import FTS_TOKENIZER
from .tx import SqliteTx

logger = logging.getLogger("elastimem")

# 10 s: long enough to ride out another process's commit or checkpoint, short enough that a
# truly stuck lock surfaces as StoreLockedError instead of a hang. Tests lower it.
BUSY_TIMEOUT_MS = 10_000
FTS_DISABLE_ENV_VAR = "ELASTIMEM_DISABLE_FTS"
CACHE_KIB = 16_000
# close() waits this long for reads running on other threads (a recall takes milliseconds;
# an export streams for longer, and closes its own connection when it ends).
CLOSE_READ_WAIT_SECONDS = 10.0
MEMORY_PATH = ":memory:"
# The first 16 bytes of every SQLite 3 database file (https://sqlite.org/fileformat.html).
SQLITE_HEADER = b"SQLite format 3\x00"

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

_path_locks: dict[str, threading.RLock] = {}
_path_locks_guard = threading.Lock()
_wal_warned = False


def _path_lock(resolved: str) -> threading.RLock:
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


def translate_error(exc: sqlite3.Error, path: str, action: str = "access") -> StoreError:
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


def _configure(
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


def _connect(target: str, *, writer: bool, read_only_uri: str | None = None) -> sqlite3.Connection:
    conn = sqlite3.connect(
        read_only_uri or target,
        isolation_level=None,  # we issue BEGIN/COMMIT ourselves, nothing commits implicitly
        check_same_thread=False,
        timeout=BUSY_TIMEOUT_MS / 1000.0,
        uri=read_only_uri is not None,
    )
    try:
        _configure(conn, writer=writer, read_only=read_only_uri is not None)
    except BaseException:
        conn.close()
        raise
    return conn


def _file_identity(path: str) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of the file at ``path``; None when there is none."""
    try:
        status = os.stat(path)
    except (OSError, ValueError):
        return None
    return status.st_dev, status.st_ino


class Database:
    """One store's connections, its write lock and its transaction helpers."""

    def __init__(
        self,
        path: str,
        writer: sqlite3.Connection,
        lock: threading.RLock,
        *,
        read_only_uri: str | None = None,
    ) -> None:
        self.path = path
        self.is_memory = path == MEMORY_PATH
        # Set when this process may not write the file or its folder: reads work, every
        # atomic() raises StoreError, and nothing at open (migrations, FTS, recovery) writes.
        self.read_only_uri = read_only_uri
        self.read_only = read_only_uri is not None
        self.fts_enabled = False
        # Where this open moved a damaged store file (§4.5 step 2), else None.
        self.set_aside: str | None = None
        self._writer = writer
        self._lock = lock
        self._depth = 0
        self._owner: int | None = None
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_guard = threading.Lock()
        # Readers inside read() now (a count per connection), and their going idle.
        self._busy: dict[sqlite3.Connection, int] = {}
        self._reads_done = threading.Condition(self._readers_guard)
        self._closed = False
        # The file this store opened, as (device, inode): see _check_still_the_file.
        self._identity = None if self.is_memory else _file_identity(path)

    # -- transactions ------------------------------------------------------------------------

    @contextmanager
    def atomic(self) -> Iterator[Any]:  # TRANSITIONAL: Iterator[Tx] once the seam is done
        """The only way to write: BEGIN IMMEDIATE at the top, SAVEPOINT when nested."""
        with self._lock:
            if self._closed:
                raise StoreClosedError(f"{self.path} is closed")
            if self.read_only:
                raise StoreError(
                    f"{self.path} is read-only for this process (the file or its folder cannot "
                    "be written); reads work, but to change it fix the permissions or open a "
                    "writable copy"
                )
            conn = self._writer
            depth = self._depth
            if depth == 0:
                self._check_still_the_file()
            try:
                if depth == 0:
                    conn.execute("BEGIN IMMEDIATE")
                else:
                    conn.execute(f"SAVEPOINT em_sp{depth}")
            except sqlite3.Error as exc:
                raise translate_error(exc, self.path, "write to") from exc
            self._depth = depth + 1
            self._owner = threading.get_ident()
            try:
                yield SqliteTx(conn)
            except BaseException as exc:
                self._finish(depth, commit=False)
                if isinstance(exc, sqlite3.Error):
                    raise translate_error(exc, self.path, "write to") from exc
                raise
            else:
                try:
                    self._finish(depth, commit=True)
                except sqlite3.Error as exc:
                    self._finish(depth, commit=False, quiet=True)
                    raise translate_error(exc, self.path, "write to") from exc

    def _check_still_the_file(self) -> None:
        """Refuse to write (or to open a reader) once the path no longer names the file
        this store opened.

        SQLite keeps writing to the file it holds open: deleted (by hand, a cleanup job, a
        sync tool) or replaced by another file at that path, every later turn would go to
        a file nobody can open again and be lost at close, without a word. One ``stat``
        per transaction (~2 µs) says so instead.
        """
        if self._identity is None:
            return
        if _file_identity(self.path) != self._identity:
            raise StoreError(
                f"{self.path} was deleted or replaced while this store had it open, so "
                "nothing more is written to it; close the store and open it again"
            )

    def _finish(self, depth: int, *, commit: bool, quiet: bool = True) -> None:
        """COMMIT/RELEASE or ROLLBACK the level opened at ``depth``, then pop it."""
        conn = self._writer
        try:
            if depth == 0:
                conn.execute("COMMIT" if commit else "ROLLBACK")
            elif commit:
                conn.execute(f"RELEASE em_sp{depth}")
            else:
                conn.execute(f"ROLLBACK TO em_sp{depth}")
                conn.execute(f"RELEASE em_sp{depth}")
        except sqlite3.Error:
            if commit or not quiet:
                raise
            # A failed rollback leaves SQLite's own automatic rollback in place.
            if depth == 0 and conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
        self._depth = depth
        if depth == 0:
            self._owner = None

    def in_write(self) -> bool:
        """True when the calling thread is inside this store's ``atomic()``."""
        return self._depth > 0 and self._owner == threading.get_ident()

    @contextmanager
    def read(self) -> Iterator[Any]:  # TRANSITIONAL: Iterator[Tx] once the seam is done
        """A connection for reading, inside one snapshot; never writes."""
        if self.is_memory or self.in_write():
            with self._lock:
                if self._closed:
                    raise StoreClosedError(f"{self.path} is closed")
                try:
                    yield SqliteTx(self._writer)
                except sqlite3.Error as exc:
                    raise translate_error(exc, self.path, "read") from exc
            return
        conn = self._begin_read()
        try:
            try:
                conn.execute("BEGIN")
            except sqlite3.Error as exc:
                raise translate_error(exc, self.path, "read") from exc
            try:
                yield SqliteTx(conn)
            except sqlite3.Error as exc:
                raise translate_error(exc, self.path, "read") from exc
            finally:
                try:
                    conn.execute("COMMIT")
                except sqlite3.Error:
                    pass
        finally:
            self._end_read(conn)

    def _begin_read(self) -> sqlite3.Connection:
        """This thread's reader, marked busy: ``close()`` never closes a busy reader (a
        connection closed while another thread steps it can crash the process)."""
        conn = self._reader()
        with self._readers_guard:
            if self._closed:
                raise StoreClosedError(f"{self.path} is closed")
            self._busy[conn] = self._busy.get(conn, 0) + 1
        return conn

    def _end_read(self, conn: sqlite3.Connection) -> None:
        with self._readers_guard:
            left = self._busy.pop(conn, 1) - 1
            if left > 0:
                self._busy[conn] = left
            elif self._closed:
                # close() left this one to us; it may be waiting for us to finish.
                _close_quietly(conn)
            self._reads_done.notify_all()

    def _reader(self) -> sqlite3.Connection:
        """This thread's reader connection, opened on its first read."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None:
            return conn
        if self._closed:
            raise StoreClosedError(f"{self.path} is closed")
        # Opening the path anew would create an empty file where the store was deleted, or
        # read another file that replaced it.
        self._check_still_the_file()
        try:
            conn = _connect(self.path, writer=False, read_only_uri=self.read_only_uri)
            # Readers never write: enforce it.
            conn.execute("PRAGMA query_only = ON")
        except sqlite3.Error as exc:
            raise translate_error(exc, self.path, "read") from exc
        with self._readers_guard:
            if self._closed:
                _close_quietly(conn)
                raise StoreClosedError(f"{self.path} is closed")
            self._readers.append(conn)
        self._local.conn = conn
        return conn

    # -- lifecycle ---------------------------------------------------------------------------

    def writer_connection(self) -> sqlite3.Connection:
        """The writer outside ``atomic()``, for statements no transaction may hold
        (``PRAGMA secure_delete``, ``VACUUM``, checkpoints). The caller holds ``lock``."""
        if self._closed:
            raise StoreClosedError(f"{self.path} is closed")
        if self._depth:
            raise StoreError(f"{self.path}: the writer is inside atomic(); finish it first")
        return self._writer

    @property
    def lock(self) -> threading.RLock:
        return self._lock

    @property
    def closed(self) -> bool:
        return self._closed

    def checkpoint(self, mode: str = "PASSIVE") -> None:
        if self.is_memory or self.read_only:
            return
        with self._lock:
            try:
                self._writer.execute(f"PRAGMA wal_checkpoint({mode})")
            except sqlite3.Error as exc:
                logger.debug("checkpoint(%s) of %s failed: %s", mode, self.path, exc)

    def close(self) -> None:
        """Close the writer (after the write in progress, which holds the lock) and every
        reader. Reads already running on other threads are waited for, up to
        ``CLOSE_READ_WAIT_SECONDS``; a read still running then closes its own connection
        when it ends. New reads and writes raise :class:`StoreClosedError`."""
        with self._lock:
            if self._closed:
                return
            with self._readers_guard:
                self._closed = True
            _close_quietly(self._writer)
        deadline = time.monotonic() + CLOSE_READ_WAIT_SECONDS
        with self._readers_guard:
            while self._busy and time.monotonic() < deadline:
                self._reads_done.wait(max(0.0, deadline - time.monotonic()))
            readers, self._readers = self._readers, []
            for conn in readers:
                if conn not in self._busy:
                    _close_quietly(conn)


def _close_quietly(conn: sqlite3.Connection) -> None:
    try:
        conn.close()
    except sqlite3.Error:
        pass


# -- meta and events ---------------------------------------------------------------------------


# -- FTS ---------------------------------------------------------------------------------------

FTS_TRIGGER_NAMES = (
    "chunks_fts_ai",
    "chunks_fts_ad",
    "chunks_fts_au",
    "facts_fts_ai",
    "facts_fts_ad",
    "facts_fts_au",
)

_FTS_DDL = (
    f"CREATE VIRTUAL TABLE chunks_fts USING fts5(text, content='chunks', content_rowid='id', "
    f"tokenize='{FTS_TOKENIZER}')",
    f"CREATE VIRTUAL TABLE facts_fts USING fts5(key, value, content='facts', "
    f"content_rowid='id', tokenize='{FTS_TOKENIZER}')",
    "CREATE TRIGGER chunks_fts_ai AFTER INSERT ON chunks BEGIN "
    "INSERT INTO chunks_fts(rowid, text) VALUES (new.id, new.text); END",
    "CREATE TRIGGER chunks_fts_ad AFTER DELETE ON chunks BEGIN "
    "INSERT INTO chunks_fts(chunks_fts, rowid, text) VALUES ('delete', old.id, old.text); END",
    "CREATE TRIGGER chunks_fts_au AFTER UPDATE OF text ON chunks BEGIN "
    "INSERT INTO chunks_fts(chunks_fts, rowid, text) VALUES ('delete', old.id, old.text); "
    "INSERT INTO chunks_fts(rowid, text) VALUES (new.id, new.text); END",
    "CREATE TRIGGER facts_fts_ai AFTER INSERT ON facts BEGIN "
    "INSERT INTO facts_fts(rowid, key, value) VALUES (new.id, new.key, new.value); END",
    "CREATE TRIGGER facts_fts_ad AFTER DELETE ON facts BEGIN "
    "INSERT INTO facts_fts(facts_fts, rowid, key, value) "
    "VALUES ('delete', old.id, old.key, old.value); END",
    "CREATE TRIGGER facts_fts_au AFTER UPDATE OF key, value ON facts BEGIN "
    "INSERT INTO facts_fts(facts_fts, rowid, key, value) "
    "VALUES ('delete', old.id, old.key, old.value); "
    "INSERT INTO facts_fts(rowid, key, value) VALUES (new.id, new.key, new.value); END",
)


def fts5_available(conn: sqlite3.Connection) -> bool:
    """Probe FTS5 with a temporary table; ``ELASTIMEM_DISABLE_FTS=1`` makes the probe fail."""
    if os.environ.get(FTS_DISABLE_ENV_VAR, "").strip() == "1":
        return False
    try:
        conn.execute("CREATE VIRTUAL TABLE temp.em_fts_probe USING fts5(x)")
        conn.execute("DROP TABLE temp.em_fts_probe")
        return True
    except sqlite3.Error:
        return False


def _fts_tables_readable(conn: sqlite3.Connection) -> bool:
    """FTS5 works on this read-only connection: a query on both tables runs.

    ``fts5_available`` creates a temporary table, which a ``mode=ro`` or immutable
    connection refuses even where FTS5 reads fine: recall then fell back to LIKE scans.
    """
    if os.environ.get(FTS_DISABLE_ENV_VAR, "").strip() == "1":
        return False
    try:
        for table in ("chunks_fts", "facts_fts"):
            conn.execute(f"SELECT rowid FROM {table} WHERE {table} MATCH '\"x\"' LIMIT 1")
        return True
    except sqlite3.Error:
        return False


def reconcile_fts(db: Database) -> None:
    """Bring the FTS tables in line with this build's FTS5 support (§4.3)."""
    with db.atomic() as conn:
        available = fts5_available(conn)
        state = get_meta(conn, "fts.state")
        tokenizer = get_meta(conn, "fts.tokenizer")
        if available and (state != "on" or tokenizer != FTS_TOKENIZER):
            for name in FTS_TRIGGER_NAMES:
                conn.execute(f"DROP TRIGGER IF EXISTS {name}")
            conn.execute("DROP TABLE IF EXISTS chunks_fts")
            conn.execute("DROP TABLE IF EXISTS facts_fts")
            for ddl in _FTS_DDL:
                conn.execute(ddl)
            conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('rebuild')")
            conn.execute("INSERT INTO facts_fts(facts_fts) VALUES ('rebuild')")
            set_meta(conn, "fts.state", "on")
            set_meta(conn, "fts.tokenizer", FTS_TOKENIZER)
            log_event(conn, "fts_rebuilt", previous_state=state)
        elif not available and state == "on":
            # Dropping triggers needs no FTS module; the tables stay for the next FTS open.
            for name in FTS_TRIGGER_NAMES:
                conn.execute(f"DROP TRIGGER IF EXISTS {name}")
            set_meta(conn, "fts.state", "off")
            log_event(conn, "fts_disabled")
        elif not available and state is None:
            set_meta(conn, "fts.state", "off")
        db.fts_enabled = available


# -- open sequence -----------------------------------------------------------------------------

# Database addresses this version cannot open yet. Taken as a path, "postgresql://h/db" made a
# folder "postgresql:" in the working folder and a SQLite file inside it.
UNSUPPORTED_URL_PREFIXES = ("postgresql://", "postgres://")
_URL_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")


def refuse_database_url(path: object) -> None:
    """Refuse an address given where a store file (or a folder of them) is expected, before
    anything is created for it: PostgreSQL is not supported yet; any other ``scheme://`` is
    no file path."""
    if not isinstance(path, str):
        return
    if path.lower().startswith(UNSUPPORTED_URL_PREFIXES):
        raise ConfigError(
            "PostgreSQL stores are not supported yet; pass a file path (or a folder of "
            "per-user stores to elastimem serve)"
        )
    if _URL_RE.match(path):
        raise ConfigError(
            f"{path!r} is an address, not a file path; pass the path of a store file "
            "(or ':memory:')"
        )


def resolve_path(path: str | os.PathLike[str]) -> str:
    """Expand ``~``, create missing parent folders (0700) and return the absolute path."""
    raw: object = os.fspath(path)
    if not isinstance(raw, str):  # a path-like object giving bytes
        raise ConfigError(f"path={path!r} is invalid; pass a str or a path-like giving str")
    if raw == MEMORY_PATH:
        return MEMORY_PATH
    if not raw or "\x00" in raw:
        raise StoreError(f"{raw!r} is not a usable store path; pass a file path or ':memory:'")
    target = Path(os.path.expanduser(raw))
    try:
        files.make_private_folders(target.parent)
    except OSError as exc:
        raise StoreError(
            f"cannot create the folder {target.parent} for the store ({exc.strerror}); "
            "choose a writable location"
        ) from exc
    try:
        if target.is_dir():
            raise StoreError(f"{target} is a folder; pass the path of a store file inside it")
        return str(target.resolve())
    except OSError as exc:  # a folder on the way this user may not search
        raise StoreError(
            f"cannot reach {target} ({exc.strerror}); check the permissions of its folders"
        ) from exc


def _missing_store(path: str) -> str:
    return (
        f"there is no elastimem store at {path}, and none was created (create=False): check "
        "the path, or open it with create=True to start a new store"
    )


def _no_store_yet(path: str) -> str:
    return (
        f"{path} holds no elastimem store yet (it is an empty database file); it was left "
        "unchanged (create=False): open it with create=True to make it a store"
    )


def _require_existing(path: str | os.PathLike[str]) -> None:
    """``create=False``: refuse a path with no file before anything is created for it."""
    raw: object = os.fspath(path)
    if not isinstance(raw, str) or raw == MEMORY_PATH or not raw or "\x00" in raw:
        return  # resolve_path judges these (and ":memory:" is always new)
    target = os.path.expanduser(raw)
    try:
        found = os.path.exists(target)
    except (OSError, ValueError):
        return
    if not found:
        raise StoreError(_missing_store(os.path.abspath(target)))


def _check_file(resolved: str, *, create: bool) -> None:
    """§4.5 step 1, before SQLite touches the file: refuse what is not an SQLite database.

    A text file, a picture or an encrypted database given as the store was "corrupt" to the
    probe, so it was renamed away and a fresh store created in its place. Only a file that
    starts with the SQLite header can be a damaged store worth setting aside; anything else
    is someone's file, and left exactly as it is. An empty file is an empty database to
    SQLite (``sqlite3`` makes it one), so with ``create`` a store is created in it.
    """
    if resolved == MEMORY_PATH:
        return
    try:
        status = os.stat(resolved)
    except FileNotFoundError:
        if not create:
            raise StoreError(_missing_store(resolved)) from None
        return
    except OSError:
        return  # SQLite's own error says what is wrong (translate_error)
    if not stat.S_ISREG(status.st_mode):
        raise StoreError(
            f"{resolved} is not a regular file (a device, pipe or socket), so not an elastimem "
            "store; it was left unchanged: pass the path of a store file"
        )
    if status.st_size == 0:
        if not create:
            raise StoreError(_no_store_yet(resolved))
        return
    try:
        with open(resolved, "rb") as handle:
            header = handle.read(len(SQLITE_HEADER))
    except OSError:
        return  # unreadable: SQLite's error names it
    if header != SQLITE_HEADER:
        raise StoreError(
            f"{resolved} is not an elastimem store (not an SQLite file); it was left unchanged: "
            "pass the path of a store, or of a file that does not exist yet to start one "
            "(if it was a store whose first bytes were damaged, restore it from a backup)"
        )


def _probe(conn: sqlite3.Connection) -> None:
    """§4.5 step 2: read the schema, then ``meta.schema_version``: a damaged page in either
    raises here, where it is classified (a corrupt store is set aside), not later."""
    conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    has_meta = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
    ).fetchone()
    if has_meta:
        conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()


def _quarantine_corrupt(resolved: str) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    aside = f"{resolved}.corrupt-{stamp}"
    counter = 1
    while os.path.exists(aside):
        counter += 1
        aside = f"{resolved}.corrupt-{stamp}-{counter}"
    try:
        os.replace(resolved, aside)
        moved = [aside]
        for suffix in ("-wal", "-shm"):
            if os.path.exists(resolved + suffix):
                os.replace(resolved + suffix, aside + suffix)
                moved.append(aside + suffix)
    except OSError as exc:
        raise StoreError(
            f"{resolved} is corrupt and could not be set aside ({exc.strerror}); "
            "move it away by hand and reopen"
        ) from exc
    # A rename keeps the mode: a copy set aside from a store made before files were private
    # would stay readable by others, under a name no one opens or checks.
    for path in moved:
        files.make_private(path)
    files.create_private_file(resolved)  # the fresh store, private before SQLite opens it
    return aside


def _cannot_write(resolved: str) -> bool:
    """An existing store this process may not write: the file, or its folder (WAL needs to
    create ``-wal``/``-shm`` beside it). ``os.access`` also reports read-only mounts and
    immutable files, which bind root too."""
    if resolved == MEMORY_PATH or not os.path.exists(resolved):
        return False
    folder = os.path.dirname(resolved) or "."
    return not os.access(resolved, os.W_OK) or not os.access(folder, os.W_OK)


def _connect_read_only(resolved: str) -> tuple[sqlite3.Connection, str]:
    """A read-only connection and the URI that made it (readers reuse it)."""
    base = "file:" + urllib.parse.quote(resolved) + "?mode=ro"
    try:
        conn = _connect(resolved, writer=True, read_only_uri=base)
        _probe(conn)
        return conn, base
    except sqlite3.Error as exc:
        if error_code(exc) != SQLITE_READONLY:
            raise translate_error(exc, resolved, "open") from exc
    # A WAL store in a folder we cannot write has no -shm to share: SQLite can then read it
    # only as an immutable snapshot.
    immutable = base + "&immutable=1"
    try:
        conn = _connect(resolved, writer=True, read_only_uri=immutable)
        _probe(conn)
    except sqlite3.Error as exc:
        raise translate_error(exc, resolved, "open") from exc
    pending = os.path.exists(resolved + "-wal")
    logger.warning(
        "%s is in a read-only folder; it is read as a snapshot, so changes other processes "
        "make while it is open are not seen%s",
        resolved,
        " (and the changes still in its -wal file are not seen either)" if pending else "",
    )
    return conn, immutable


def _connect_checked(
    resolved: str, *, create: bool = True
) -> tuple[sqlite3.Connection, dict[str, str] | None]:
    """Connect and probe, setting a corrupt file aside once. Returns (conn, recovery detail).

    With ``create`` False the file is opened with ``mode=rw``, so a file removed since it was
    checked is not created anew, and a file without tables is refused untouched.
    """
    recovery: dict[str, str] | None = None
    for attempt in range(2):
        conn: sqlite3.Connection | None = None
        try:
            existing_only = not create and resolved != MEMORY_PATH
            conn = sqlite3.connect(
                "file:" + urllib.parse.quote(resolved) + "?mode=rw" if existing_only else resolved,
                isolation_level=None,  # we issue BEGIN/COMMIT ourselves
                check_same_thread=False,
                timeout=BUSY_TIMEOUT_MS / 1000.0,
                uri=existing_only,
            )
            # Before _configure: switching to WAL would already change a foreign file.
            version = None if resolved == MEMORY_PATH else _schema_version(conn, resolved)
            if version is None and existing_only:
                raise StoreError(_no_store_yet(resolved))
            _configure(conn, writer=True, memory=resolved == MEMORY_PATH)
            _probe(conn)
            return conn, recovery
        except StoreError:
            if conn is not None:
                conn.close()
            raise
        except sqlite3.Error as exc:
            code = error_code(exc)
            corrupt = code in (SQLITE_NOTADB, SQLITE_CORRUPT) and resolved != MEMORY_PATH
            aside = None
            if corrupt and existing_only:
                # Setting it aside would leave no store at all: say so, change nothing.
                if conn is not None:
                    conn.close()
                raise StoreError(
                    f"{resolved} is a damaged store ({exc}); it was left unchanged "
                    "(create=False): restore it from a backup, or open it with create=True "
                    "(on the command line, a command that stores something), which moves it "
                    "aside and starts a fresh store"
                ) from exc
            if corrupt and attempt == 0:
                # Rename before closing: closing could otherwise delete the side files,
                # and they may hold the only copy of recent writes.
                aside = _quarantine_corrupt(resolved)
            if conn is not None:
                conn.close()
            if aside is None:
                raise translate_error(exc, resolved, "open") from exc
            logger.warning(
                "%s was not a readable elastimem store (%s); it was moved to %s and a "
                "fresh store was created",
                resolved,
                exc,
                aside,
            )
            recovery = {"moved_to": os.path.basename(aside), "error": str(exc)}
    raise StoreError(f"could not open {resolved} after setting a corrupt file aside")


# The tables every elastimem layout has had: a file holding them without a ``meta`` table is
# a very early store (version 1); a file without them is another program's database.
_CORE_TABLES = frozenset({"sessions", "messages", "chunks", "facts"})


def _schema_version(conn: sqlite3.Connection, path: str = "") -> int | None:
    """None for a file with no tables; 1 for tables without a recorded version.

    Raises ``StoreError`` for another program's SQLite database: migrating it would add
    elastimem's tables to it, and rebuild any of its own that share a name.
    """
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if not tables:
        return None
    if "meta" not in tables and not tables >= _CORE_TABLES:
        raise StoreError(
            f"{path or 'this file'} is an SQLite database of another program, not an "
            "elastimem store; it was left unchanged: pass the path of a store (or of a new file)"
        )
    if "meta" not in tables:
        return 1
    value = get_meta(conn, "schema_version")
    if value is None:
        return 1
    try:
        return int(value)
    except ValueError as exc:
        raise StoreError(f"meta.schema_version={value!r} in the store is unreadable") from exc


def _create_fresh(db: Database) -> None:
    from ... import __version__

    with db.atomic() as conn:
        if _schema_version(conn) is not None:
            return  # another process created it while we waited for the lock
        migrations.create_fresh(conn)
        now = now_ts()
        set_meta(conn, "schema_version", migrations.CURRENT_SCHEMA_VERSION)
        set_meta(conn, "created_at", now)
        set_meta(conn, "created_by", __version__)
        conn.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, 'initial', ?)",
            (migrations.CURRENT_SCHEMA_VERSION, now),
        )
        log_event(conn, "created", schema_version=migrations.CURRENT_SCHEMA_VERSION)


def _run_step(db: Database, version: int, name: str, step: migrations.Step) -> None:
    conn = db._writer
    with db.lock:
        # Table rebuilds must not fire cascades or rewrite child references (§4.5 step 3→4).
        conn.execute("PRAGMA foreign_keys = OFF")
        conn.execute("PRAGMA legacy_alter_table = ON")
        migrations.register_migration_functions(conn)
        try:
            with db.atomic():
                current = _schema_version(conn) or 1
                if current >= version:
                    return
                for ddl in (
                    migrations.TABLES_V4["meta"],
                    migrations.TABLES_V4["schema_migrations"],
                    migrations.TABLES_V4["events"],
                ):
                    conn.execute(ddl.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS", 1))
                step(conn)
                broken = conn.execute("PRAGMA foreign_key_check").fetchall()
                if broken:
                    # Old files may hold dangling references; drop those rows rather than
                    # refuse to open years of memory.
                    _drop_dangling(conn, broken)
                set_meta(conn, "schema_version", version)
                conn.execute(
                    "INSERT OR REPLACE INTO schema_migrations (version, name, applied_at) "
                    "VALUES (?, ?, ?)",
                    (version, name, now_ts()),
                )
                log_event(conn, "migrated", step=name, from_version=current, to_version=version)
        except StoreError as exc:
            raise StoreError(
                f"migration step {name} failed on {db.path} and was rolled back: {exc.__cause__}"
            ) from exc.__cause__
        except Exception as exc:
            raise StoreError(
                f"migration step {name} failed on {db.path} and was rolled back: {exc}"
            ) from exc
        finally:
            conn.execute("PRAGMA legacy_alter_table = OFF")
            conn.execute("PRAGMA foreign_keys = ON")


def _drop_dangling(conn: sqlite3.Connection, broken: list[tuple[object, ...]]) -> None:
    for table, rowid, _parent, _fk in broken:
        if rowid is not None:
            conn.execute(f'DELETE FROM "{table}" WHERE rowid = ?', (rowid,))


def _migrate(db: Database) -> None:
    with _writer_read(db) as conn:
        version = _schema_version(conn, db.path)
    if version is None:
        _create_fresh(db)
        return
    if version > migrations.CURRENT_SCHEMA_VERSION:
        raise SchemaTooNewError(
            f"{db.path} has schema version {version} but this elastimem supports "
            f"{migrations.CURRENT_SCHEMA_VERSION}; upgrade elastimem to open it"
        )
    for step_version, name, step in migrations.STEPS:
        if step_version > version:
            _run_step(db, step_version, name, step)


@contextmanager
def _writer_read(db: Database) -> Iterator[sqlite3.Connection]:
    with db.lock:
        try:
            yield db._writer
        except sqlite3.Error as exc:
            raise translate_error(exc, db.path, "read") from exc


def open_store(path: str | os.PathLike[str], *, create: bool = True) -> Database:
    """Open, recover, migrate and reconcile a store (§4.5 steps 1–4).

    ``create`` False opens only an existing store: a missing path, an empty file or an
    SQLite file without tables raises ``StoreError`` and nothing is created (no folder, no
    file). A file that is not SQLite at all is refused untouched whatever ``create`` says.
    """
    refuse_database_url(os.fspath(path))
    if not create:
        _require_existing(path)  # before resolve_path, which creates missing folders
    resolved = resolve_path(path)
    _check_file(resolved, create=create)
    lock = threading.RLock() if resolved == MEMORY_PATH else _path_lock(resolved)
    if _cannot_write(resolved):
        return _open_read_only(resolved, lock)
    # Made private before SQLite opens it, so it is never readable by others (SQLite's own
    # create would follow the umask, typically 0644); -wal and -shm then take its mode.
    created = resolved != MEMORY_PATH and create and files.create_private_file(resolved)
    with lock:
        conn, recovery = _connect_checked(resolved, create=create)
        if not created and recovery is None:
            files.warn_if_shared(resolved)
        db = Database(resolved, conn, lock)
        if recovery is not None:
            db.set_aside = os.path.join(os.path.dirname(resolved), recovery["moved_to"])
        try:
            _migrate(db)
            if recovery is not None:
                with db.atomic() as c:
                    log_event(c, "recovered_from_corruption", **recovery)
            reconcile_fts(db)
            with db.atomic() as c:
                migrations.ensure_self_node(c)
        except BaseException:
            db.close()
            raise
    return db


def _open_read_only(resolved: str, lock: threading.RLock) -> Database:
    """Open a store this process cannot write: no migration, no FTS rebuild, no recovery.

    A damaged file is never set aside here (that would need write access); an old schema
    cannot be migrated, so it is refused with a message saying how to fix it.
    """
    conn, uri = _connect_read_only(resolved)
    files.warn_if_shared(resolved)
    db = Database(resolved, conn, lock, read_only_uri=uri)
    try:
        with _writer_read(db) as c:
            version = _schema_version(c, resolved)
            if version is None:
                raise StoreError(f"{resolved} is read-only and holds no elastimem store")
            if version > migrations.CURRENT_SCHEMA_VERSION:
                raise SchemaTooNewError(
                    f"{resolved} has schema version {version} but this elastimem supports "
                    f"{migrations.CURRENT_SCHEMA_VERSION}; upgrade elastimem to open it"
                )
            if version < migrations.CURRENT_SCHEMA_VERSION:
                raise StoreError(
                    f"{resolved} has schema version {version} and needs an upgrade, but it "
                    "is read-only; open it once with write access to migrate it"
                )
            # Search the FTS index only if it is current; otherwise the LIKE legs answer.
            db.fts_enabled = (
                get_meta(c, "fts.state") == "on"
                and get_meta(c, "fts.tokenizer") == FTS_TOKENIZER
                and _fts_tables_readable(c)
            )
    except BaseException:
        db.close()
        raise
    return db
