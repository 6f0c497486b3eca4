"""SQLite implementation of ``storage.transcript.TranscriptRows``: sessions, messages and chunks
(with their keyword table)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from ..transcript import ChunkRow, OpenSession, SessionState, StoredTurn, TranscriptRows

_SESSION_LIST_KEYS = (
    "id",
    "started_at",
    "ended_at",
    "title",
    "summary",
    "message_count",
    "host_tag",
)


class SqliteTranscriptRows:
    """``TranscriptRows`` on one SQLite connection (inside the caller's transaction)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    # -- sessions -----------------------------------------------------------------------------

    def insert_session(
        self,
        *,
        above: int,
        started_at: str,
        host_tag: str | None,
        owner_pid: int,
        owner_host: str,
        heartbeat_at: str,
        backdated: bool,
    ) -> int:
        # The caller's write transaction (BEGIN IMMEDIATE) holds the only write lock, so
        # nobody adds a session between this max() and the insert.
        highest = self._conn.execute("SELECT max(id) FROM sessions").fetchone()[0]
        session_id = max(int(highest or 0), int(above)) + 1
        self._conn.execute(
            "INSERT INTO sessions (id, started_at, host_tag, owner_pid, owner_host, "
            "heartbeat_at, backdated) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                session_id,
                started_at,
                host_tag,
                owner_pid,
                owner_host,
                heartbeat_at,
                1 if backdated else 0,
            ),
        )
        return session_id

    def session_exists(self, session_id: int) -> bool:
        found = self._conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,))
        return found.fetchone() is not None

    def session_state(self, session_id: int) -> SessionState | None:
        row = self._conn.execute(
            "SELECT started_at, ended_at, backdated FROM sessions WHERE id = ?", (session_id,)
        ).fetchone()
        if row is None:
            return None
        return SessionState(str(row[0]), row[1], bool(row[2]))

    def first_user_message(self, session_id: int) -> str | None:
        row = self._conn.execute(
            "SELECT content FROM messages WHERE session_id = ? AND role = 'user' "
            "ORDER BY turn, id LIMIT 1",
            (session_id,),
        ).fetchone()
        return None if row is None else str(row[0])

    def last_message_time(self, session_id: int) -> str | None:
        row = self._conn.execute(
            "SELECT max(created_at) FROM messages WHERE session_id = ?", (session_id,)
        ).fetchone()
        return str(row[0]) if row and row[0] else None

    def end_session(self, session_id: int, ended_at: str, title: str | None) -> None:
        self._conn.execute(
            "UPDATE sessions SET ended_at = ?, title = COALESCE(title, ?), owner_pid = NULL, "
            "owner_host = NULL WHERE id = ?",
            (ended_at, title, session_id),
        )

    def set_heartbeat(self, session_id: int, at: str) -> None:
        self._conn.execute("UPDATE sessions SET heartbeat_at = ? WHERE id = ?", (at, session_id))

    def clear_owner(self, session_id: int) -> None:
        self._conn.execute(
            "UPDATE sessions SET owner_pid = NULL, owner_host = NULL WHERE id = ?", (session_id,)
        )

    def open_sessions(self) -> list[OpenSession]:
        rows = self._conn.execute(
            "SELECT id, owner_pid, owner_host, heartbeat_at FROM sessions WHERE ended_at IS NULL"
        ).fetchall()
        return [OpenSession(int(r[0]), r[1], r[2], r[3]) for r in rows]

    def recent_sessions(self, n: int) -> list[dict[str, object]]:
        rows = self._conn.execute(
            "SELECT id, started_at, ended_at, title, summary, message_count, host_tag "
            "FROM sessions ORDER BY started_at DESC, id DESC LIMIT ?",
            (max(0, n),),
        ).fetchall()
        return [dict(zip(_SESSION_LIST_KEYS, row)) for row in rows]

    def session_page(self, offset: int, n: int) -> list[dict[str, object]]:
        rows = self._conn.execute(
            "SELECT id, started_at, ended_at, title, summary, message_count, host_tag "
            "FROM sessions ORDER BY started_at DESC, id DESC LIMIT ? OFFSET ?",
            (max(0, n), max(0, offset)),
        ).fetchall()
        return [dict(zip(_SESSION_LIST_KEYS, row)) for row in rows]

    def session_info(self, session_id: int) -> dict[str, object] | None:
        row = self._conn.execute(
            "SELECT id, started_at, ended_at, title, summary, message_count, host_tag "
            "FROM sessions WHERE id = ?",
            (session_id,),
        ).fetchone()
        return None if row is None else dict(zip(_SESSION_LIST_KEYS, row))

    def latest_ended_session(self, exclude: int | None) -> int | None:
        row = self._conn.execute(
            "SELECT id FROM sessions WHERE ended_at IS NOT NULL AND message_count > 0 "
            "AND id IS NOT ? ORDER BY started_at DESC, id DESC LIMIT 1",
            (exclude,),
        ).fetchone()
        return None if row is None else int(row[0])

    def rolling_summary(self, session_id: int) -> str | None:
        row = self._conn.execute(
            "SELECT rolling_summary FROM sessions WHERE id = ?", (session_id,)
        ).fetchone()
        return None if row is None or row[0] is None else str(row[0])

    # -- messages and chunks ------------------------------------------------------------------

    def last_turn(self, session_id: int) -> int:
        row = self._conn.execute(
            "SELECT coalesce(max(turn), 0) FROM messages WHERE session_id = ?", (session_id,)
        ).fetchone()
        return int(row[0])

    def insert_message(
        self,
        session_id: int,
        turn: int,
        role: str,
        content: str,
        *,
        created_at: str,
        token_estimate: int,
    ) -> int:
        cur = self._conn.execute(
            "INSERT INTO messages (session_id, turn, role, content, created_at, "
            "token_estimate) VALUES (?, ?, ?, ?, ?, ?)",
            (session_id, turn, role, content, created_at, token_estimate),
        )
        return int(cur.lastrowid or 0)

    def count_turn(
        self, session_id: int, messages: int, title: str | None, heartbeat_at: str
    ) -> None:
        self._conn.execute(
            "UPDATE sessions SET message_count = message_count + ?, "
            "title = COALESCE(title, ?), heartbeat_at = ? WHERE id = ?",
            (messages, title, heartbeat_at, session_id),
        )

    def insert_turn(
        self,
        session_id: int,
        messages: Sequence[tuple[str, str, int]],
        chunk_texts: Sequence[str],
        *,
        created_at: str,
        title: str | None,
        heartbeat_at: str,
    ) -> StoredTurn:
        # In-process statements cost microseconds each: the family's own steps, in order.
        turn = self.last_turn(session_id) + 1
        message_ids = [
            self.insert_message(
                session_id, turn, role, content, created_at=created_at, token_estimate=tokens
            )
            for role, content, tokens in messages
        ]
        self.count_turn(session_id, len(message_ids), title, heartbeat_at)
        chunk_ids = (
            self.insert_chunks(
                session_id, message_ids[0], message_ids[-1], chunk_texts, created_at=created_at
            )
            if chunk_texts
            else []
        )
        return StoredTurn(turn, tuple(message_ids), tuple(chunk_ids))

    def newest_messages(self, session_id: int) -> Iterator[tuple[str, str, int]]:
        cur = self._conn.execute(
            "SELECT role, content, token_estimate FROM messages WHERE session_id = ? "
            "ORDER BY turn DESC, id DESC",
            (session_id,),
        )
        for role, content, tokens in cur:
            yield str(role), str(content), int(tokens)

    def insert_chunks(
        self,
        session_id: int,
        first_msg_id: int,
        last_msg_id: int,
        texts: Sequence[str],
        *,
        created_at: str,
    ) -> list[int]:
        ids: list[int] = []
        for text in texts:
            cur = self._conn.execute(
                "INSERT INTO chunks (session_id, first_msg_id, last_msg_id, text, created_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (session_id, first_msg_id, last_msg_id, text, created_at),
            )
            ids.append(int(cur.lastrowid or 0))
        return ids

    def session_chunks(self, session_id: int) -> list[ChunkRow]:
        rows = self._conn.execute(
            "SELECT id, first_msg_id, last_msg_id, text, created_at, importance FROM chunks "
            "WHERE session_id = ? ORDER BY id",
            (session_id,),
        ).fetchall()
        return [
            ChunkRow(int(r[0]), int(r[1]), int(r[2]), str(r[3]), str(r[4]), float(r[5]))
            for r in rows
        ]

    def raise_chunk_importance(self, chunk_ids: Sequence[int], floor: float) -> None:
        if chunk_ids:
            marks = ",".join("?" * len(chunk_ids))
            self._conn.execute(
                f"UPDATE chunks SET importance = max(importance, ?) WHERE id IN ({marks})",
                (floor, *chunk_ids),
            )

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

    def chunks_without_vector(self, limit: int, *, newest: bool = False) -> list[tuple[int, str]]:
        order = "DESC" if newest else "ASC"  # both walk idx_chunks_unembedded
        return [
            (int(r[0]), str(r[1]))
            for r in self._conn.execute(
                f"SELECT id, text FROM chunks WHERE embedding IS NULL ORDER BY id {order} LIMIT ?",
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


if TYPE_CHECKING:  # mypy proves the class implements the interface

    def _implements(conn: sqlite3.Connection) -> TranscriptRows:
        return SqliteTranscriptRows(conn)
