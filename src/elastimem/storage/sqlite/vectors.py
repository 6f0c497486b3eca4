"""SQLite implementation of ``storage.vectors.VectorRows``: the chunks' vectors on file (float32
BLOBs, quantized copies)."""

from __future__ import annotations

import sqlite3


class SqliteVectorRows:
    """``VectorRows`` on one SQLite connection (inside the caller's transaction)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
