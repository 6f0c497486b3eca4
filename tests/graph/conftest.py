"""The graph layer's tests work on the store's file through the storage layer, never through
the facade's private state.

``database(mem)`` stands for the store's storage ``Database``: a connection of the test's
own on the same file, configured as the store's are, whose ``read()`` / ``atomic()`` yield a
storage transaction (``tx.graph`` …) that also runs the test's raw SQL (``execute``) to set
rows up or look at them. ``reading(mem)`` / ``writing(mem)`` are its two transactions.

Not a second ``storage.sqlite.database.open_store`` on a file the store holds open: opening
reads the file's header with Python's own file handle, and closing that handle drops every
POSIX lock this process holds on the file (its connections then read stale pages once
another process writes; see the report of the layered redesign's graph step).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from elastimem.storage.postgres.tx import PostgresTx
from elastimem.storage.sqlite.tx import SqliteTx
from elastimem.text import em_fold
from tests.rows import is_postgres, postgres_execute, postgres_sql, postgres_url

BUSY_TIMEOUT_MS = 10_000


class RawTx(SqliteTx):
    """A storage transaction that also runs a test's raw statements on its connection."""

    def execute(self, sql: str, parameters: Any = (), /) -> Any:
        return self.conn.execute(sql, parameters)

    def executemany(self, sql: str, parameters: Any, /) -> Any:
        return self.conn.executemany(sql, parameters)


class TestDatabase:
    """``read()`` and ``atomic()`` on one connection of the test's own to a store's file
    (nested ``atomic()`` blocks are savepoints)."""

    __test__ = False  # not a test class

    def __init__(self, path: str) -> None:
        self.path = path
        self.conn = sqlite3.connect(
            path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000
        )
        self.conn.execute("PRAGMA foreign_keys = ON")
        self.conn.create_function("em_fold", 1, em_fold, deterministic=True)
        self.lock = threading.RLock()
        self.depth = 0

    @contextmanager
    def read(self) -> Iterator[RawTx]:
        with self.lock:
            if self.depth:
                yield RawTx(self.conn)
                return
            self.conn.execute("BEGIN")
            try:
                yield RawTx(self.conn)
            finally:
                self.conn.execute("COMMIT")

    @contextmanager
    def atomic(self) -> Iterator[RawTx]:
        with self.lock:
            depth = self.depth
            self.conn.execute("BEGIN IMMEDIATE" if depth == 0 else f"SAVEPOINT t{depth}")
            self.depth = depth + 1
            try:
                yield RawTx(self.conn)
            except BaseException:
                if depth == 0:
                    self.conn.execute("ROLLBACK")
                else:
                    self.conn.execute(f"ROLLBACK TO t{depth}")
                    self.conn.execute(f"RELEASE t{depth}")
                raise
            else:
                self.conn.execute("COMMIT" if depth == 0 else f"RELEASE t{depth}")
            finally:
                self.depth = depth

    def close(self) -> None:
        self.conn.close()


class PostgresRawTx(PostgresTx):
    """A PostgreSQL storage transaction that also runs a test's raw statements (written for
    SQLite; ``?`` placeholders translated)."""

    def execute(self, sql: str, parameters: Any = (), /) -> Any:
        return postgres_execute(self.conn, sql, parameters)

    def executemany(self, sql: str, parameters: Any, /) -> Any:
        cursor = self.conn.cursor()
        cursor.executemany(postgres_sql(sql), [tuple(p) for p in parameters])
        return cursor


class PostgresTestDatabase:
    """``read()`` and ``atomic()`` of a store's user on the test session's PostgreSQL
    database, through a ``Database`` of the test's own (confined to the user as the
    application is)."""

    __test__ = False

    def __init__(self, user_id: str) -> None:
        from elastimem.storage.postgres import database as postgres_database

        self.db = postgres_database.open_database(postgres_url(), user_id, create=False)

    @contextmanager
    def read(self) -> Iterator[PostgresRawTx]:
        with self.db.read() as tx:
            yield PostgresRawTx(tx.conn, tx.user_id, writable=tx.writable)

    @contextmanager
    def atomic(self) -> Iterator[PostgresRawTx]:
        with self.db.atomic() as tx:
            yield PostgresRawTx(tx.conn, tx.user_id, writable=tx.writable)

    def close(self) -> None:
        self.db.close()


_opened: dict[str, Any] = {}


def database(store: Any) -> Any:
    """The test's ``TestDatabase`` on ``store``'s file (an open store or a path), made once
    per test; on PostgreSQL, a ``PostgresTestDatabase`` of the store's user."""
    if is_postgres(store):
        key = f"{store.path}#{store.user_id}"
        if key not in _opened:
            _opened[key] = PostgresTestDatabase(store.user_id)
        return _opened[key]
    path = str(getattr(store, "path", store))
    if path == ":memory:":
        raise ValueError("a :memory: store has no file to open; open the store in tmp_path")
    if path not in _opened:
        _opened[path] = TestDatabase(path)
    return _opened[path]


def reading(store: Any) -> Any:
    """One read snapshot of ``store``'s file."""
    return database(store).read()


def writing(store: Any) -> Any:
    """One write transaction on ``store``'s file."""
    return database(store).atomic()


@pytest.fixture(autouse=True)
def _close_opened() -> Iterator[None]:
    yield
    while _opened:
        _opened.popitem()[1].close()
