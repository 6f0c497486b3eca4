"""SQLite implementation of ``storage.lessons.LessonRows``: procedural lessons."""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

from ..lessons import LessonRows, UsedLesson


class SqliteLessonRows:
    """``LessonRows`` on one SQLite connection (inside the caller's transaction)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def archived_state(self, text: str) -> bool | None:
        row = self._conn.execute("SELECT archived FROM lessons WHERE text = ?", (text,)).fetchone()
        return None if row is None else bool(row[0])

    def add_or_revive(self, text: str, tag: str | None, at: str) -> None:
        self._conn.execute(
            "INSERT INTO lessons (text, tag, created_at, last_used_at, use_count) "
            "VALUES (?, ?, ?, ?, 1) ON CONFLICT(text) DO UPDATE SET "
            "use_count = use_count + 1, last_used_at = excluded.last_used_at, archived = 0, "
            "tag = COALESCE(excluded.tag, tag)",
            (text, tag, at, at),
        )

    def archive_beyond(self, keep: int) -> None:
        self._conn.execute(
            "UPDATE lessons SET archived = 1 WHERE archived = 0 AND id NOT IN ("
            "SELECT id FROM lessons WHERE archived = 0 "
            "ORDER BY last_used_at DESC, id DESC LIMIT ?)",
            (keep,),
        )

    def most_used(self, n: int) -> list[UsedLesson]:
        rows = self._conn.execute(
            "SELECT text, last_used_at, id FROM lessons WHERE archived = 0 "
            "ORDER BY use_count DESC, last_used_at DESC, id DESC LIMIT ?",
            (n,),
        ).fetchall()
        return [UsedLesson(str(r[0]), str(r[1]), int(r[2])) for r in rows]


if TYPE_CHECKING:  # mypy proves the class implements the interface

    def _implements(conn: sqlite3.Connection) -> LessonRows:
        return SqliteLessonRows(conn)
