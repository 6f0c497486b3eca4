"""SQLite implementation of ``storage.facts.FactRows``: fact versions, quarantine and the facts'
keyword table."""

from __future__ import annotations

import sqlite3


class SqliteFactRows:
    """``FactRows`` on one SQLite connection (inside the caller's transaction)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    # -- h15: reads and writes of the query path (retrieval) and the job handlers ----------

    def key_exists(self, key: str) -> bool:
        row = self._conn.execute("SELECT 1 FROM facts WHERE key = ? LIMIT 1", (key,))
        return row.fetchone() is not None

    def keys_of(self, ids: list[int]) -> list[tuple[int, str, bool]]:
        if not ids:
            return []
        return [
            (int(r[0]), str(r[1]), bool(r[2]))
            for r in self._conn.execute(
                "SELECT id, key, invalidated_at IS NULL FROM facts "
                f"WHERE id IN ({','.join('?' * len(ids))})",
                ids,
            )
        ]

    def archived_among(self, ids: list[int]) -> set[int]:
        if not ids:
            return set()
        return {
            int(r[0])
            for r in self._conn.execute(
                f"SELECT id FROM facts WHERE id IN ({','.join('?' * len(ids))}) AND archived != 0",
                ids,
            )
        }

    def candidate_rows(self, ids: list[int]) -> list[tuple[int, str, str, str, float]]:
        if not ids:
            return []
        return [
            (int(r[0]), str(r[1]), str(r[2]), str(r[3]), float(r[4]))
            for r in self._conn.execute(
                "SELECT f.id, f.key, f.value, f.valid_from, f.importance FROM facts f "
                f"WHERE f.id IN ({','.join('?' * len(ids))})",
                ids,
            )
        ]

    def unreviewed_supersessions(
        self, since: str, limit: int
    ) -> list[tuple[int, int, str, str, str, str, str]]:
        return [
            (int(r[0]), int(r[1]), str(r[2]), str(r[3]), str(r[4]), str(r[5]), str(r[6]))
            for r in self._conn.execute(
                "SELECT o.id, n.id, n.key, o.value, o.valid_from, n.value, n.valid_from "
                "FROM facts o JOIN facts n ON n.id = o.invalidated_by "
                "WHERE o.invalidated_at >= ? AND n.invalidated_at IS NULL "
                "AND n.source <> 'merge' AND NOT EXISTS (SELECT 1 FROM fact_reviews r "
                "WHERE r.old_fact_id = o.id AND r.new_fact_id = n.id) "
                "ORDER BY o.invalidated_at, o.id LIMIT ?",
                (since, limit),
            )
        ]

    def live_version(self, key: str) -> tuple[int, float, str | None, int | None] | None:
        row = self._conn.execute(
            "SELECT id, importance, category, origin_session_id FROM facts "
            "WHERE key = ? AND invalidated_at IS NULL",
            (key,),
        ).fetchone()
        return None if row is None else (int(row[0]), float(row[1]), row[2], row[3])

    def record_review(
        self, old_id: int, new_id: int, verdict: str, result_id: int | None, at: str
    ) -> None:
        self._conn.execute(
            "INSERT OR IGNORE INTO fact_reviews (old_fact_id, new_fact_id, verdict, "
            "result_fact_id, reviewed_at) VALUES (?, ?, ?, ?, ?)",
            (old_id, new_id, verdict, result_id, at),
        )

    def trim_quarantine(self, keep: int) -> None:
        self._conn.execute(
            "DELETE FROM quarantine WHERE id <= (SELECT max(id) FROM quarantine) - ?", (keep,)
        )
