"""SQLite implementation of ``storage.transcript.TranscriptRows``: sessions, messages and chunks
(with their keyword table)."""

from __future__ import annotations

import sqlite3


class SqliteTranscriptRows:
    """``TranscriptRows`` on one SQLite connection (inside the caller's transaction)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    # -- h15: reads and writes of the query path (retrieval) and the job handlers ----------

    def session_chunk_ids(self, session_id: int) -> list[int]:
        return [
            int(r[0])
            for r in self._conn.execute("SELECT id FROM chunks WHERE session_id = ?", (session_id,))
        ]

    def chunk_spans(self, ids: list[int]) -> dict[int, tuple[str, int | None, int | None]]:
        return {
            int(row[0]): (str(row[1]), row[2], row[3])
            for part in _parts(ids)
            for row in self._conn.execute(
                "SELECT id, text, first_msg_id, last_msg_id FROM chunks "
                f"WHERE id IN ({_marks(part)})",
                part,
            )
        }

    def chunk_rows(self, ids: list[int]) -> list[tuple[int, int, str, float]]:
        return [
            (int(cid), int(session_id), str(created_at), float(importance))
            for part in _parts(ids)
            for cid, session_id, created_at, importance in self._conn.execute(
                "SELECT id, session_id, created_at, importance FROM chunks "
                f"WHERE id IN ({_marks(part)})",
                part,
            )
        ]

    def chunk_texts(self, ids: list[int]) -> list[tuple[int, str]]:
        rows = [
            (int(cid), str(text))
            for part in _parts(ids)
            for cid, text in self._conn.execute(
                f"SELECT id, text FROM chunks WHERE id IN ({_marks(part)})", part
            )
        ]
        rows.sort()
        return rows

    def consecutive_pairs(self, pairs: list[tuple[int, int, int]]) -> list[tuple[int, int]]:
        found: list[tuple[int, int]] = []
        for start in range(0, len(pairs), 300):
            part = pairs[start : start + 300]
            values = ",".join("(?, ?, ?)" for _ in part)
            found.extend(
                (int(a), int(b))
                for a, b in self._conn.execute(
                    f"WITH pair(a, b, s) AS (VALUES {values}) SELECT a, b FROM pair "
                    "WHERE NOT EXISTS (SELECT 1 FROM chunks c WHERE c.session_id = pair.s "
                    "AND c.id > pair.a AND c.id < pair.b)",
                    [value for pair in part for value in pair],
                )
            )
        return found

    def chunks_without_vector(self, limit: int) -> list[tuple[int, str]]:
        return [
            (int(r[0]), str(r[1]))
            for r in self._conn.execute(
                "SELECT id, text FROM chunks WHERE embedding IS NULL ORDER BY id LIMIT ?",
                (limit,),
            )
        ]

    def any_chunk_without_vector(self) -> bool:
        row = self._conn.execute("SELECT 1 FROM chunks WHERE embedding IS NULL LIMIT 1")
        return row.fetchone() is not None

    def chunks_needing_vector(
        self, ids: list[int], label: str, dim: int | None
    ) -> list[tuple[int, str]]:
        if not ids:
            return []
        return [
            (int(r[0]), str(r[1]))
            for r in self._conn.execute(
                f"SELECT id, text FROM chunks WHERE id IN ({_marks(ids)}) AND (embedding IS NULL "
                "OR embedding_model IS NOT ? OR embedding_dim IS NOT ?) ORDER BY id",
                (*ids, label, dim if dim is not None else -1),
            )
        ]

    def all_chunk_ids(self) -> list[int]:
        return [int(r[0]) for r in self._conn.execute("SELECT id FROM chunks ORDER BY id")]

    def chunk_ids_needing_vector(self, label: str, dim: int) -> list[int]:
        return [
            int(r[0])
            for r in self._conn.execute(
                "SELECT id FROM chunks WHERE embedding IS NULL OR embedding_model IS NOT ? "
                "OR embedding_dim IS NOT ? ORDER BY id",
                (label, dim),
            )
        ]

    def turn_messages(self, session_id: int, turns: list[int]) -> list[tuple[int, str, str, str]]:
        if not turns:
            return []
        return [
            (int(r[0]), str(r[1]), str(r[2]), str(r[3]))
            for r in self._conn.execute(
                "SELECT turn, role, content, created_at FROM messages WHERE session_id = ? "
                f"AND turn IN ({_marks(turns)}) ORDER BY turn, id",
                (session_id, *turns),
            )
        ]

    def turn_chunks(self, session_id: int, turns: list[int]) -> list[tuple[int, str]]:
        if not turns:
            return []
        return [
            (int(r[0]), str(r[1]))
            for r in self._conn.execute(
                "SELECT c.id, c.text FROM chunks c JOIN messages m ON m.id = c.first_msg_id "
                f"WHERE c.session_id = ? AND m.turn IN ({_marks(turns)}) ORDER BY c.id",
                (session_id, *turns),
            )
        ]

    def rolling_summary(self, session_id: int) -> str | None:
        row = self._conn.execute(
            "SELECT rolling_summary FROM sessions WHERE id = ?", (session_id,)
        ).fetchone()
        return None if row is None else str(row[0] or "")

    def set_rolling_summary(self, session_id: int, text: str | None) -> None:
        self._conn.execute(
            "UPDATE sessions SET rolling_summary = ? WHERE id = ?", (text, session_id)
        )

    def recent_user_messages(self, session_id: int, limit: int) -> list[str]:
        return [
            str(r[0])
            for r in self._conn.execute(
                "SELECT content FROM messages WHERE session_id = ? AND role = 'user' "
                "ORDER BY turn DESC, id DESC LIMIT ?",
                (session_id, limit),
            )
        ]

    def set_session_summary(self, session_id: int, summary: str) -> None:
        self._conn.execute("UPDATE sessions SET summary = ? WHERE id = ?", (summary, session_id))


# SQLite's default limit on host parameters is 999 on older builds: ids go in parts of 500.
_PART = 500


def _parts(ids: list[int]) -> list[list[int]]:
    return [ids[start : start + _PART] for start in range(0, len(ids), _PART)]


def _marks(values: list[int]) -> str:
    return ",".join("?" * len(values))
