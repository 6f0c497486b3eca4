"""SQLite implementation of ``storage.facts.FactRows``: fact versions, quarantine and the facts'
keyword table."""

from __future__ import annotations

import sqlite3


class SqliteFactRows:
    """``FactRows`` on one SQLite connection (inside the caller's transaction)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    # -- for the facade (quarantine_entries) ------------------------------------------------

    def recent_quarantine(self, n: int) -> list[dict[str, object]]:
        rows = self._conn.execute(
            "SELECT ts, key, value, reason, source FROM quarantine ORDER BY id DESC LIMIT ?",
            (max(0, n),),
        ).fetchall()
        keys = ("ts", "key", "value", "reason", "source")
        return [dict(zip(keys, row, strict=True)) for row in reversed(rows)]
