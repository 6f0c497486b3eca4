"""The one place a test looks at (or changes) a store's raw rows.

Tests use the public API wherever it can say what they check. Where a test must see rows
(a migration's result, an audit trail's exact columns) or damage them on purpose (a corrupt
BLOB, a row from a crashed process), it opens its OWN connection to the store's file here,
as another process would, never the store's private connection. File stores only: a
``:memory:`` store has no file to open, so such a test uses ``tmp_path``.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

BUSY_TIMEOUT_S = 10.0


def _path_of(store: Any) -> str:
    path = store if isinstance(store, (str, os.PathLike)) else store.path
    path = os.fspath(path)
    if path == ":memory:":
        raise ValueError("a :memory: store has no file for raw rows; open the store in tmp_path")
    return path


@contextmanager
def connect(store: Any) -> Iterator[sqlite3.Connection]:
    """A connection of the test's own to the store's file (``store``: an open store or a path);
    changes made through it are committed when the block ends without an error."""
    conn = sqlite3.connect(_path_of(store), timeout=BUSY_TIMEOUT_S, isolation_level=None)
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
    """Every row ``sql`` returns, read through the test's own connection."""
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
