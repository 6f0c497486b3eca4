"""SQLite implementation of ``storage.meta.MetaRows``: the meta key/value table, generation
counters and the event log."""

from __future__ import annotations

import sqlite3

from . import database


class SqliteMetaRows:
    """``MetaRows`` on one SQLite connection (inside the caller's transaction)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def get(self, key: str, default: str | None = None) -> str | None:
        return database.get_meta(self._conn, key, default)

    def get_int(self, key: str, default: int = 0) -> int:
        return database.get_meta_int(self._conn, key, default)

    def set(self, key: str, value: object) -> None:
        database.set_meta(self._conn, key, value)

    def bump(self, key: str, by: int = 1) -> int:
        return database.bump_meta(self._conn, key, by)

    def log_event(self, kind: str, **detail: object) -> None:
        database.log_event(self._conn, kind, **detail)
