"""SQLite implementation of ``storage.lessons.LessonRows``: procedural lessons."""

from __future__ import annotations

import sqlite3


class SqliteLessonRows:
    """``LessonRows`` on one SQLite connection (inside the caller's transaction)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
