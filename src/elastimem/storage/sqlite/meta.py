"""SQLite implementation of ``storage.meta.MetaRows``: the meta key/value table, generation
counters and the event log."""

from __future__ import annotations

import json
import sqlite3

from ...clock import now_ts
from ..meta import EVENTS_KEPT


class SqliteMetaRows:
    """``MetaRows`` on one SQLite connection (inside the caller's transaction)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def get(self, key: str, default: str | None = None) -> str | None:
        return get_meta(self._conn, key, default)

    def get_int(self, key: str, default: int = 0) -> int:
        return get_meta_int(self._conn, key, default)

    def set(self, key: str, value: object) -> None:
        set_meta(self._conn, key, value)

    def bump(self, key: str, by: int = 1) -> int:
        return bump_meta(self._conn, key, by)

    def log_event(self, kind: str, **detail: object) -> None:
        log_event(self._conn, kind, **detail)

    def trim_events(self) -> None:
        self._conn.execute(
            "DELETE FROM events WHERE id <= (SELECT max(id) FROM events) - ?", (EVENTS_KEPT,)
        )


def get_meta(conn: sqlite3.Connection, key: str, default: str | None = None) -> str | None:
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return str(row[0]) if row else default


def get_meta_int(conn: sqlite3.Connection, key: str, default: int = 0) -> int:
    value = get_meta(conn, key)
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default


def set_meta(conn: sqlite3.Connection, key: str, value: object) -> None:
    conn.execute(
        "INSERT INTO meta (key, value) VALUES (?, ?) "
        "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        (key, str(value)),
    )


def bump_meta(conn: sqlite3.Connection, key: str, by: int = 1) -> int:
    """Add ``by`` to an integer meta counter and return the new value."""
    value = get_meta_int(conn, key) + by
    set_meta(conn, key, value)
    return value


def log_event(conn: sqlite3.Connection, kind: str, **detail: object) -> None:
    """Append to the local audit log. ``detail`` holds counts and ids, never user text."""
    conn.execute(
        "INSERT INTO events (ts, kind, detail) VALUES (?, ?, ?)",
        (now_ts(), kind, json.dumps(detail, sort_keys=True, default=str)),
    )
    conn.execute("DELETE FROM events WHERE id <= (SELECT max(id) FROM events) - ?", (EVENTS_KEPT,))
