"""The one place a test looks at (or changes) a store's raw rows.

Tests use the public API wherever it can say what they check. Where a test must see rows
(a migration's result, an audit trail's exact columns) or damage them on purpose (a corrupt
BLOB, a row from a crashed process), it opens its OWN connection to the store's file here,
as another process would, never the store's private connection. A ``:memory:`` store has no
file to open, so such a test uses ``tmp_path``.

A user's store on PostgreSQL (the ``postgres`` half of ``make_store``) is reached the same way:
a connection of the test's own, as the application role, confined to the store's user by the
row-level security the application itself runs under. Statements are written for SQLite;
``?`` placeholders are translated, and a test whose SQL only SQLite speaks is ``sqlite_only``.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

BUSY_TIMEOUT_S = 10.0

# The address (with its password) of the test session's PostgreSQL database, set by the
# ``postgres_url`` fixture: a store's own ``path`` hides the password.
POSTGRES_URLS: list[str] = []

# Encrypted store files (the "sqlcipher" backend of ``make_store``, issue 31) and their key:
# the test's connection to such a file is an SQLCipher one with that key. Registered by
# path, not found by reading the file: a plain open()/close() of a file this process has
# open drops SQLite's locks on it (storage/sqlite/connection.py).
TEST_STORE_KEY = "correct horse battery staple"
ENCRYPTED_PATHS: set[str] = set()


def _is_postgres(store: Any) -> bool:
    return not isinstance(store, (str, os.PathLike)) and str(store.path).startswith("postgres")


def postgres_sql(sql: str) -> str:
    """A statement written for SQLite with ``?`` placeholders, as psycopg takes it."""
    return sql.replace("%", "%%").replace("?", "%s")


def postgres_url(store: Any = None) -> str:
    """The address of the test session's PostgreSQL database (``postgres_url`` fixture);
    given an open ``store``, of the registered database it lives in (``pgvector_url`` adds
    a second)."""
    if not POSTGRES_URLS:
        raise RuntimeError("no PostgreSQL test database registered (postgres_url fixture)")
    if store is not None:
        from elastimem.storage.postgres.database import redact

        for url in POSTGRES_URLS:
            if redact(url) == str(store.path):
                return url
        raise RuntimeError(f"no PostgreSQL test database registered for {store.path}")
    return POSTGRES_URLS[-1]


def is_postgres(store: Any) -> bool:
    """True for an open store on PostgreSQL."""
    return _is_postgres(store)


class PostgresCursor:
    """A psycopg cursor that also answers ``lastrowid`` as ``sqlite3`` does (the id the
    last INSERT drew from its table's identity sequence)."""

    def __init__(self, cursor: Any) -> None:
        self._cursor = cursor

    @property
    def lastrowid(self) -> int:
        return int(self._cursor.connection.execute("SELECT lastval()").fetchone()[0])

    def __iter__(self) -> Iterator[Any]:
        return iter(self._cursor)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)


def postgres_execute(conn: Any, sql: str, params: Sequence[Any] = ()) -> PostgresCursor:
    """Run a statement written for SQLite on a psycopg connection."""
    return PostgresCursor(conn.execute(postgres_sql(sql), tuple(params)))


class _PostgresConnection:
    """The slice of ``sqlite3.Connection`` tests use, on a psycopg connection."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return postgres_execute(self._conn, sql, params)


@contextmanager
def _connect_postgres(store: Any) -> Iterator[Any]:
    import psycopg

    with psycopg.connect(postgres_url(store)) as conn:  # one transaction, committed at the end
        conn.execute("SELECT set_config('elastimem.user_id', %s, true)", (store.user_id,))
        yield _PostgresConnection(conn)


def _path_of(store: Any) -> str:
    path = store if isinstance(store, (str, os.PathLike)) else store.path
    path = os.fspath(path)
    if path == ":memory:":
        raise ValueError("a :memory: store has no file for raw rows; open the store in tmp_path")
    return path


def file_connection(path: str | os.PathLike[str], **kw: Any) -> sqlite3.Connection:
    """``sqlite3.connect(path, **kw)``; for an encrypted test store (``ENCRYPTED_PATHS``, or
    any store while the test runs with ``ELASTIMEM_KEY`` set: conftest's ``at_rest``), an
    SQLCipher connection keyed with that key."""
    key = TEST_STORE_KEY if os.path.realpath(path) in ENCRYPTED_PATHS else None
    key = key or os.environ.get("ELASTIMEM_KEY")
    if key is None:
        return sqlite3.connect(path, **kw)
    from sqlcipher3 import dbapi2

    conn = dbapi2.connect(os.fspath(path), **kw)
    conn.set_key(key.encode())
    return conn  # type: ignore[no-any-return]


@contextmanager
def connect(store: Any) -> Iterator[sqlite3.Connection]:
    """A connection of the test's own to the store's file (``store``: an open store or a path);
    changes made through it are committed when the block ends without an error."""
    if _is_postgres(store):
        with _connect_postgres(store) as pg:
            yield pg
        return
    conn = file_connection(_path_of(store), timeout=BUSY_TIMEOUT_S, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    finally:
        conn.close()


def rows(store: Any, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """Every row ``sql`` returns, read through the test's own connection. On PostgreSQL,
    ``PRAGMA integrity_check`` answers ``ok`` once a statement succeeds: the server checks
    its own pages, and a damaged table answers with an error, not a row."""
    if sql.strip() == "PRAGMA integrity_check" and _is_postgres(store):
        sql = "SELECT 'ok' FROM meta LIMIT 1"
    with connect(store) as conn:
        return [tuple(row) for row in conn.execute(sql, params).fetchall()]


def one(store: Any, sql: str, params: Sequence[Any] = ()) -> Any:
    """The first column of the first row (None when there is no row)."""
    found = rows(store, sql, params)
    return found[0][0] if found else None


def execute(store: Any, sql: str, params: Sequence[Any] = ()) -> int:
    """Run one changing statement through the test's own connection; the rows it changed."""
    with connect(store) as conn:
        return conn.execute(sql, params).rowcount


def open_storage(store: Any) -> Any:
    """A storage ``Database`` of the test's own on ``store``'s store (an open or closed
    store, or a path): its file, or its user on the test session's PostgreSQL database.
    The caller closes it."""
    from elastimem.storage import open_database

    if _is_postgres(store):
        return open_database(postgres_url(store), create=False, user_id=store.user_id)
    return open_database(_path_of(store), create=False)


def open_args(store: Any) -> list[str]:
    """What a child process passes to ``elastimem.open`` to open ``store`` again: its file,
    or the PostgreSQL address (with its password) and the user."""
    if _is_postgres(store):
        return [postgres_url(store), str(store.user_id)]
    return [_path_of(store)]
