"""SQLite implementation of ``storage.facts.FactRows``: fact versions, quarantine and the facts'
keyword table."""

from __future__ import annotations

import sqlite3


class SqliteFactRows:
    """``FactRows`` on one SQLite connection (inside the caller's transaction)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
