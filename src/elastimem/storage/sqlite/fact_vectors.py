"""SQLite implementation of ``storage.fact_vectors.FactVectorRows``: one vector per fact version,
on file."""

from __future__ import annotations

import sqlite3


class SqliteFactVectorRows:
    """``FactVectorRows`` on one SQLite connection (inside the caller's transaction)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
