"""SQLite implementation of ``storage.graph.GraphRows``: nodes, edges, aliases, mentions and
clusters."""

from __future__ import annotations

import sqlite3


class SqliteGraphRows:
    """``GraphRows`` on one SQLite connection (inside the caller's transaction)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
