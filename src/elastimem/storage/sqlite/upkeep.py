"""What an erase does to a SQLite store's file outside transactions (``StoreUpkeep``), and
reading a store file's settings without opening it.

Deleting rows is not enough for privacy on SQLite: it leaves deleted bytes in free pages, in
the slack space of live pages, in FTS5 segments (a deleted document's tokens stay in its
segment until a merge) and in the ``-wal`` file. So an erase runs with ``PRAGMA
secure_delete=ON`` (freed cells and pages are zeroed), then merges the FTS segments
(``'optimize'``), rewrites the file (``VACUUM``) and truncates the WAL.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path

from . import connection
from .admin import FTS_TABLES
from .cipher import CipherKey
from .database import Database, translate_error
from .meta import get_meta

logger = logging.getLogger("elastimem")

# A TRUNCATE checkpoint waits busy_timeout for other processes' readers; retry a few times
# before warning that the -wal may still hold erased bytes.
CHECKPOINT_ATTEMPTS = 3
CHECKPOINT_RETRY_SECONDS = 0.2


class SqliteUpkeep:
    """``StoreUpkeep`` on a SQLite ``Database``: its writer connection, outside transactions
    (secure_delete, VACUUM and wal_checkpoint cannot run inside one). Callers hold the lock."""

    def __init__(self, database: Database) -> None:
        self._db = database

    @contextmanager
    def secure_delete(self) -> Iterator[None]:
        # The pragma cannot change inside a transaction, so it is set on the writer
        # connection itself, under the write lock the caller holds.
        writer = self._db.writer_connection()
        try:
            writer.execute("PRAGMA secure_delete = ON")
        except connection.ERRORS as exc:
            raise translate_error(exc, self._db.path, "erase from") from exc
        try:
            yield
        finally:
            try:
                writer.execute("PRAGMA secure_delete = OFF")
            except connection.ERRORS as exc:  # a closed or broken connection: nothing to restore
                logger.debug("could not reset secure_delete: %s", exc)

    def purge_erased(self, tables: Collection[str]) -> None:
        """Remove the erased bytes from the FTS segments, the file's free space and the WAL.

        secure_delete zeroes only what is deleted while it is on. Measured on SQLite 3.40 with
        a host embedder and a busy workload (long turns, vectors written by the worker while
        more turns arrived): in about one erase in ten, secure_delete + FTS 'optimize' + a
        TRUNCATE checkpoint still left an older copy of an erased chunk row in the unused
        space of a live ``chunks`` page, written there by page rewrites long before the erase.
        Only rewriting every page removes such copies, so erase ends with ``VACUUM`` (see
        ``test_erase_leaves_no_copy_after_a_busy_workload``). Its cost is proportional to the
        file size, and it needs free disk space about the size of the store for its temporary
        copy. The FTS merge comes first because VACUUM copies FTS segments as they are,
        deleted documents' tokens included.
        """
        database = self._db
        if database.is_memory:
            return
        writer = database.writer_connection()
        if database.fts_enabled:
            for name, table in FTS_TABLES.items():
                if name in tables:
                    with database.atomic() as tx:
                        tx.conn.execute(f"INSERT INTO {table}({table}) VALUES ('optimize')")
        else:
            self._clear_stale_fts()
        try:
            writer.execute("VACUUM")
        except connection.ERRORS as exc:
            logger.warning(
                "erase removed the rows, but %s could not be rewritten (%s); erased text may "
                "stay in the file's free space until a later erase or VACUUM succeeds",
                database.path, exc,
            )  # fmt: skip
        for attempt in range(CHECKPOINT_ATTEMPTS):
            try:
                busy = writer.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            except connection.ERRORS as exc:
                busy = (1, str(exc))
            if not busy or not busy[0]:
                return
            if attempt + 1 < CHECKPOINT_ATTEMPTS:
                time.sleep(CHECKPOINT_RETRY_SECONDS)
        logger.warning(
            "erase could not truncate %s-wal because another process is reading the store; "
            "the erased text leaves the -wal at the next checkpoint",
            database.path,
        )

    def _clear_stale_fts(self) -> None:
        """With FTS off, the kept FTS tables are stale copies of old rows: empty their storage.

        They cannot be maintained without the FTS5 module, and the next open that has FTS5
        drops, recreates and rebuilds them from ``chunks`` and ``facts`` (``fts.state`` is not
        ``on``). So the index segments and term pages are deleted from the plain shadow
        tables; only the averages (rowid 1) and structure (rowid 10) records stay, holding no
        text, because FTS5 reads them to connect to (and so to drop) the table.
        """
        with self._db.atomic() as tx:
            conn = tx.conn
            names = {str(r[0]) for r in conn.execute("SELECT name FROM sqlite_master")}
            for table in FTS_TABLES.values():
                if f"{table}_data" in names:
                    conn.execute(f'DELETE FROM "{table}_data" WHERE id NOT IN (1, 10)')
                for suffix in ("_idx", "_docsize"):
                    if table + suffix in names:
                        conn.execute(f'DELETE FROM "{table}{suffix}"')


def peek_meta(path: str | Path, key: str, cipher: CipherKey | None = None) -> str | None:
    """The meta value ``key`` of the store file at ``path``, read without writing anything;
    None when unset, not a store, or unreadable (an encrypted store without its ``cipher``
    key, or with a wrong one).

    ``immutable=1`` reads only the main file (no locks, no ``-wal``/``-shm`` created): a value
    still in another process's WAL is missed.
    """
    try:
        uri = f"{Path(path).as_uri()}?mode=ro&immutable=1"
    except ValueError:
        return None
    try:
        conn = connection.raw_connect(uri, uri=True, key=cipher)
    except connection.ERRORS:
        return None
    try:
        return get_meta(conn, key)
    except connection.ERRORS:
        return None  # not a store yet, or unreadable: the normal open decides
    finally:
        conn.close()
