"""SQLite implementation of ``storage.transcript.TranscriptRows``: sessions, messages and chunks
(with their keyword table)."""

from __future__ import annotations

import sqlite3


class SqliteTranscriptRows:
    """``TranscriptRows`` on one SQLite connection (inside the caller's transaction)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    # -- for the context plan (assembly) ----------------------------------------------------

    def ended_session_summaries(
        self, exclude: int | None, n: int
    ) -> list[tuple[str, str | None, str | None]]:
        rows = self._conn.execute(
            "SELECT started_at, summary, title FROM sessions WHERE ended_at IS NOT NULL "
            "AND id IS NOT ? AND (summary IS NOT NULL OR title IS NOT NULL) "
            "ORDER BY started_at DESC, id DESC LIMIT ?",
            (exclude, n),
        ).fetchall()
        return [(str(r[0]), r[1], r[2]) for r in rows]

    def rolling_summary(self, session_id: int) -> str | None:
        row = self._conn.execute(
            "SELECT rolling_summary FROM sessions WHERE id = ?", (session_id,)
        ).fetchone()
        return row[0] if row else None
