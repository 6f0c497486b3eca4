"""SQLite implementation of ``storage.stats.StatsRows``: counts and sizes for stats()."""

from __future__ import annotations

import sqlite3


class SqliteStatsRows:
    """``StatsRows`` on one SQLite connection (inside the caller's transaction)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
