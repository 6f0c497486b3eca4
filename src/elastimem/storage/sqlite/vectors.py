"""SQLite implementation of ``storage.vectors.VectorRows``: the chunks' vectors on file (float32
BLOBs, quantized copies)."""

from __future__ import annotations

import sqlite3


class SqliteVectorRows:
    """``VectorRows`` on one SQLite connection (inside the caller's transaction)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    # -- for the command line ---------------------------------------------------------------

    def has_vectors_labelled(self, prefix: str) -> bool:
        pattern = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        row = self._conn.execute(
            "SELECT 1 FROM chunks WHERE embedding IS NOT NULL "
            "AND embedding_model LIKE ? ESCAPE '\\' LIMIT 1",
            (pattern,),
        ).fetchone()
        return row is not None
