"""Rows the contract suite needs from families that cannot write them yet (sessions, chunks,
facts), written through the test's own connection (``tests.rows``) on SQLite, and through the
transcript and facts families on PostgreSQL (which write the rows' keyword postings with
them, as the store does).

Backend-specific on purpose and kept in this one file: a second backend adds its own way
to seed the same rows, and the contract tests above it stay as they are.
"""

from __future__ import annotations

from typing import Any

from tests import rows as raw


def _postgres(database: Any) -> bool:
    return type(database).__module__.startswith("elastimem.storage.postgres")


def add_session(database: Any, started_at: str = "2025-01-01T10:00:00.000000Z") -> int:
    """A new session with one message; its id."""
    if _postgres(database):
        with database.atomic() as tx:
            sid = tx.transcript.insert_session(
                above=0, started_at=started_at, host_tag=None, owner_pid=0, owner_host="seed",
                heartbeat_at=started_at, backdated=False,
            )  # fmt: skip
            tx.transcript.insert_message(
                sid, 1, "user", "x", created_at=started_at, token_estimate=1
            )
        return int(sid)
    with raw.connect(database) as conn:
        sid = int(
            conn.execute("INSERT INTO sessions (started_at) VALUES (?)", (started_at,)).lastrowid
            or 0
        )
        conn.execute(
            "INSERT INTO messages (session_id, turn, role, content, created_at) "
            "VALUES (?, 1, 'user', 'x', ?)",
            (sid, started_at),
        )
    return sid


def add_chunks(
    database: Any, session_id: int, texts: list[str], *, created_at: str | None = None
) -> list[int]:
    """One chunk per text in ``session_id`` (no vector); their ids, ascending."""
    ids: list[int] = []
    if _postgres(database):
        with database.atomic() as tx:
            msg = tx.conn.execute(
                "SELECT min(id) FROM messages WHERE user_id = %s AND session_id = %s",
                (tx.user_id, session_id),
            ).fetchone()[0]
            for i, text in enumerate(texts):
                at = created_at or f"2025-01-01T10:00:{i % 60:02d}.000000Z"
                ids += tx.transcript.insert_chunks(session_id, msg, msg, [text], created_at=at)
        return ids
    with raw.connect(database) as conn:
        msg = conn.execute(
            "SELECT min(id) FROM messages WHERE session_id = ?", (session_id,)
        ).fetchone()[0]
        for i, text in enumerate(texts):
            at = created_at or f"2025-01-01T10:00:{i % 60:02d}.000000Z"
            cur = conn.execute(
                "INSERT INTO chunks (session_id, first_msg_id, last_msg_id, text, created_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (session_id, msg, msg, text, at),
            )
            ids.append(int(cur.lastrowid or 0))
    return ids


def add_facts(database: Any, pairs: list[tuple[str, str]]) -> list[int]:
    """One live note per ``(key, value)``; their ids, ascending."""
    ids: list[int] = []
    at = "2025-01-01T10:00:00.000000Z"
    if _postgres(database):
        with database.atomic() as tx:
            for key, value in pairs:
                ids.append(
                    tx.facts.insert_version(
                        key,
                        value,
                        category="note",
                        source="explicit",
                        importance=0.5,
                        created_at=at,
                        valid_from=at,
                        origin_session_id=None,
                    )
                )
        return ids
    with raw.connect(database) as conn:
        for key, value in pairs:
            cur = conn.execute(
                "INSERT INTO facts (key, value, category, source, importance, created_at, "
                "valid_from) VALUES (?, ?, 'note', 'explicit', 0.5, ?, ?)",
                (key, value, at, at),
            )
            ids.append(int(cur.lastrowid or 0))
    return ids


def delete_chunks(database: Any, ids: list[int]) -> None:
    if _postgres(database):
        with database.atomic() as tx:
            tx.conn.execute(
                "DELETE FROM chunks WHERE user_id = %s AND id = ANY(%s)", (tx.user_id, ids)
            )
        return
    with raw.connect(database) as conn:
        conn.executemany("DELETE FROM chunks WHERE id = ?", [(i,) for i in ids])
