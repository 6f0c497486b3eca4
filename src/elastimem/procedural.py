"""Lessons: short procedural notes the host learned from its own mistakes (SPEC §5.15).

A lesson's text is unique; adding it again revives it (``use_count += 1``, unarchived). Only
the ``max_lessons`` most recently used lessons stay unarchived.
"""

from __future__ import annotations

import sqlite3

from .clock import now_ts


def add_lesson(conn: sqlite3.Connection, text: str, tag: str | None, max_lessons: int) -> bool:
    text = text.strip()
    if not text:
        return False
    now = now_ts()
    conn.execute(
        "INSERT INTO lessons (text, tag, created_at, last_used_at, use_count) "
        "VALUES (?, ?, ?, ?, 1) ON CONFLICT(text) DO UPDATE SET "
        "use_count = use_count + 1, last_used_at = excluded.last_used_at, archived = 0, "
        "tag = COALESCE(excluded.tag, tag)",
        (text, tag, now, now),
    )
    apply_cap(conn, max_lessons)
    return True


def apply_cap(conn: sqlite3.Connection, max_lessons: int) -> None:
    conn.execute(
        "UPDATE lessons SET archived = 1 WHERE archived = 0 AND id NOT IN ("
        "SELECT id FROM lessons WHERE archived = 0 "
        "ORDER BY last_used_at DESC, id DESC LIMIT ?)",
        (max_lessons,),
    )


def top_lessons(conn: sqlite3.Connection, n: int) -> list[str]:
    rows = conn.execute(
        "SELECT text, last_used_at, id FROM lessons WHERE archived = 0 "
        "ORDER BY use_count DESC, last_used_at DESC, id DESC LIMIT ?",
        (n,),
    ).fetchall()
    rows.sort(key=lambda r: (r[1], r[2]))
    return [str(r[0]) for r in rows]
