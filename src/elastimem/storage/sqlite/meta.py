"""SQLite implementation of ``storage.meta.MetaRows``: the meta key/value table, generation
counters and the event log."""

from __future__ import annotations

import sqlite3


class SqliteMetaRows:
    """``MetaRows`` on one SQLite connection (inside the caller's transaction)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
