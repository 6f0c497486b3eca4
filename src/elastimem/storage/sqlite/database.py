"""The SQLite ``Database``: one store's connections, its write lock and its transactions
(SPEC §4.1, §4.5), and ``open_store``, which opens one.

One ``Database`` per store instance holds one *writer* connection and one *reader*
connection per thread. Every write goes through ``atomic()``: it takes the write lock (an
RLock shared by every instance in this process that opened the same resolved path), runs
``BEGIN IMMEDIATE … COMMIT`` at the top level and a SAVEPOINT when nested, and rolls back on
any exception. Reads go through ``read()``: the calling thread's own connection inside one
``BEGIN … COMMIT`` so a multi-statement read sees one snapshot. ``:memory:`` has a single
connection, so its reads take the lock too.

It implements ``storage.database.Database``. The rest of the SQLite core: connections,
pragmas and error translation in ``connection``, the open sequence's steps in ``opening``,
the FTS tables in ``fts``, the schema in ``migrations``. SQLite errors never leave this
package raw: ``translate_error`` turns them into ``StoreError`` or ``StoreLockedError``.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from ...errors import StoreClosedError, StoreError
from . import connection, files, fts, migrations, opening
from .cipher import CipherKey
from .connection import MEMORY_PATH, close_quietly, file_identity, translate_error
from .fts import FTS_TOKENIZER
from .meta import get_meta, log_event, set_meta
from .opening import SQLITE_HEADER, refuse_database_url, resolve_path
from .tx import SqliteTx

# What other modules import from here (the SQLite backend's entry points).
__all__ = [
    "FTS_TOKENIZER",
    "MEMORY_PATH",
    "SQLITE_HEADER",
    "Database",
    "get_meta",
    "log_event",
    "open_store",
    "refuse_database_url",
    "resolve_path",
    "set_meta",
    "translate_error",
]

logger = logging.getLogger("elastimem")

# close() waits this long for reads running on other threads (a recall takes milliseconds;
# an export streams for longer, and closes its own connection when it ends).
CLOSE_READ_WAIT_SECONDS = 10.0


class Database:
    """One store's connections, its write lock and its transactions
    (``storage.database.Database`` on SQLite)."""

    def __init__(
        self,
        path: str,
        writer: sqlite3.Connection,
        lock: threading.RLock,
        *,
        read_only_uri: str | None = None,
        cipher: CipherKey | None = None,
    ) -> None:
        self.path = path
        # The store's encryption key (None: a plain file); every reader is keyed with it.
        # A CipherKey never shows its material (repr, str, pickling).
        self.cipher = cipher
        self.is_memory = path == MEMORY_PATH
        self.key = path  # one file, one user
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
        self._identity = None if self.is_memory else file_identity(path)
        if not self.is_memory:
            connection.note_open(path, encrypted=cipher is not None)

    # -- transactions ------------------------------------------------------------------------

    @contextmanager
    def atomic(self) -> Iterator[SqliteTx]:
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
            except connection.ERRORS as exc:
                raise translate_error(exc, self.path, "write to") from exc
            self._depth = depth + 1
            self._owner = threading.get_ident()
            try:
                yield SqliteTx(conn)
            except BaseException as exc:
                self._finish(depth, commit=False)
                if isinstance(exc, connection.ERRORS):
                    raise translate_error(exc, self.path, "write to") from exc
                raise
            else:
                try:
                    self._finish(depth, commit=True)
                except connection.ERRORS as exc:
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
        if file_identity(self.path) != self._identity:
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
        except connection.ERRORS:
            if commit or not quiet:
                raise
            # A failed rollback leaves SQLite's own automatic rollback in place.
            if depth == 0 and conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                except connection.ERRORS:
                    pass
        self._depth = depth
        if depth == 0:
            self._owner = None

    def in_write(self) -> bool:
        """True when the calling thread is inside this store's ``atomic()``."""
        return self._depth > 0 and self._owner == threading.get_ident()

    @contextmanager
    def read(self) -> Iterator[SqliteTx]:
        """A connection for reading, inside one snapshot; never writes."""
        if self.is_memory or self.in_write():
            with self._lock:
                if self._closed:
                    raise StoreClosedError(f"{self.path} is closed")
                try:
                    yield SqliteTx(self._writer)
                except connection.ERRORS as exc:
                    raise translate_error(exc, self.path, "read") from exc
            return
        conn = self._begin_read()
        try:
            try:
                conn.execute("BEGIN")
            except connection.ERRORS as exc:
                raise translate_error(exc, self.path, "read") from exc
            try:
                yield SqliteTx(conn)
            except connection.ERRORS as exc:
                raise translate_error(exc, self.path, "read") from exc
            finally:
                try:
                    conn.execute("COMMIT")
                except connection.ERRORS:
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
                close_quietly(conn)
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
            conn = connection.connect(
                self.path, writer=False, read_only_uri=self.read_only_uri, key=self.cipher
            )
            # Readers never write: enforce it.
            conn.execute("PRAGMA query_only = ON")
        except connection.ERRORS as exc:
            raise translate_error(exc, self.path, "read") from exc
        with self._readers_guard:
            if self._closed:
                close_quietly(conn)
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
            except connection.ERRORS as exc:
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
            close_quietly(self._writer)
            if not self.is_memory:
                connection.note_closed(self.path)
        deadline = time.monotonic() + CLOSE_READ_WAIT_SECONDS
        with self._readers_guard:
            while self._busy and time.monotonic() < deadline:
                self._reads_done.wait(max(0.0, deadline - time.monotonic()))
            readers, self._readers = self._readers, []
            for conn in readers:
                if conn not in self._busy:
                    close_quietly(conn)


# -- opening -----------------------------------------------------------------------------------


def open_store(
    path: str | os.PathLike[str], *, create: bool = True, key: CipherKey | None = None
) -> Database:
    """Open, recover, migrate and reconcile a store (§4.5 steps 1–4).

    ``create`` False opens only an existing store: a missing path, an empty file or an
    SQLite file without tables raises ``StoreError`` and nothing is created (no folder, no
    file). A file that is not SQLite at all is refused untouched whatever ``create`` says.
    ``key`` opens (or creates) an encrypted store (``cipher``); a missing or wrong key is
    ``EncryptionKeyError`` and the file is left exactly as it was.
    """
    refuse_database_url(os.fspath(path), file_only=True)
    if not create:
        opening.require_existing(path)  # before resolve_path, which creates missing folders
    resolved = resolve_path(path)
    opening.check_file(resolved, create=create, key=key)
    lock = threading.RLock() if resolved == MEMORY_PATH else connection.path_lock(resolved)
    if opening.cannot_write(resolved):
        return _open_read_only(resolved, lock, key)
    # Made private before SQLite opens it, so it is never readable by others (SQLite's own
    # create would follow the umask, typically 0644); -wal and -shm then take its mode.
    created = resolved != MEMORY_PATH and create and files.create_private_file(resolved)
    with lock:
        conn, recovery = opening.connect_checked(resolved, create=create, key=key)
        if not created and recovery is None:
            files.warn_if_shared(resolved)
        db = Database(resolved, conn, lock, cipher=key)
        if recovery is not None:
            db.set_aside = os.path.join(os.path.dirname(resolved), recovery["moved_to"])
        try:
            opening.migrate(conn, db.atomic, resolved)
            if recovery is not None:
                with db.atomic() as tx:
                    log_event(tx.conn, "recovered_from_corruption", **recovery)
            with db.atomic() as tx:
                db.fts_enabled = fts.reconcile(tx.conn)
            with db.atomic() as tx:
                migrations.ensure_self_node(tx.conn)
        except BaseException:
            db.close()
            raise
    return db


def _open_read_only(resolved: str, lock: threading.RLock, key: CipherKey | None = None) -> Database:
    """Open a store this process cannot write: no migration, no FTS rebuild, no recovery.

    A damaged file is never set aside here (that would need write access); an old schema
    cannot be migrated, so it is refused with a message saying how to fix it.
    """
    conn, uri = opening.connect_read_only(resolved, key)
    files.warn_if_shared(resolved)
    db = Database(resolved, conn, lock, read_only_uri=uri, cipher=key)
    try:
        with lock:
            # Search the FTS index only if it is current; otherwise the LIKE legs answer.
            db.fts_enabled = opening.read_only_fts(conn, resolved)
    except BaseException:
        db.close()
        raise
    return db
