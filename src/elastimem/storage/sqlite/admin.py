"""SQLite implementation of ``storage.admin.AdminRows``: whole-store work: stats counts,
export/import of rows, erase."""

from __future__ import annotations

import sqlite3


class SqliteAdminRows:
    """``AdminRows`` on one SQLite connection (inside the caller's transaction)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
