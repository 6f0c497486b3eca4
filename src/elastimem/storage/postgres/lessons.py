"""PostgreSQL implementation of ``storage.lessons.LessonRows``: one user's procedural lessons.

A lesson's text is unique per user through the index on ``(user_id, md5(text))`` (a btree
entry cannot hold a long text); statements find a text by its hash and then compare the
text itself."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..lessons import LessonRows, UsedLesson
from .sql import limit as _limit


class PostgresLessonRows:
    """``LessonRows`` for one user on one psycopg connection (inside the caller's
    transaction)."""

    __slots__ = ("_conn", "_user")

    def __init__(self, conn: Any, user_id: str) -> None:
        self._conn = conn
        self._user = user_id

    def archived_state(self, text: str) -> bool | None:
        row = self._conn.execute(
            "SELECT archived FROM lessons WHERE user_id = %s AND md5(text) = md5(%s) AND text = %s",
            (self._user, text, text),
        ).fetchone()
        return None if row is None else bool(row[0])

    def add_or_revive(self, text: str, tag: str | None, at: str) -> None:
        self._conn.execute(
            "INSERT INTO lessons (user_id, text, tag, created_at, last_used_at, use_count) "
            "VALUES (%s, %s, %s, %s, %s, 1) ON CONFLICT (user_id, md5(text)) DO UPDATE SET "
            "use_count = lessons.use_count + 1, last_used_at = excluded.last_used_at, "
            "archived = 0, tag = COALESCE(excluded.tag, lessons.tag)",
            (self._user, text, tag, at, at),
        )

    def archive_beyond(self, keep: int) -> None:
        self._conn.execute(
            "UPDATE lessons SET archived = 1 WHERE user_id = %s AND archived = 0 "
            "AND id NOT IN (SELECT id FROM lessons WHERE user_id = %s AND archived = 0 "
            "ORDER BY last_used_at DESC, id DESC LIMIT %s)",
            (self._user, self._user, _limit(keep)),
        )

    def most_used(self, n: int) -> list[UsedLesson]:
        rows = self._conn.execute(
            "SELECT text, last_used_at, id FROM lessons WHERE user_id = %s AND archived = 0 "
            "ORDER BY use_count DESC, last_used_at DESC, id DESC LIMIT %s",
            (self._user, _limit(n)),
        ).fetchall()
        return [UsedLesson(str(r[0]), str(r[1]), int(r[2])) for r in rows]


if TYPE_CHECKING:  # mypy proves the class implements the interface

    def _implements(conn: Any) -> LessonRows:
        return PostgresLessonRows(conn, "user")
