"""Lessons: short procedural notes the host learned from its own mistakes (SPEC §5.15).

A lesson's text is unique; adding it again revives it (``use_count += 1``, unarchived). Only
the ``max_lessons`` most recently used lessons stay unarchived. Every unarchived lesson is
rendered into every prompt, so a lesson passes the instruction and markup guards first; a
refused one is recorded in the quarantine (key and source ``lesson``) and never stored.
"""

from __future__ import annotations

from typing import NamedTuple

from ..clock import now_ts
from ..guards import guard_lesson
from ..storage.tx import Tx
from .semantic import quarantine

# The quarantine's key and source for a refused lesson (the column has no CHECK, and no fact
# source is named so), so the entry reads as a lesson and not as a fact.
LESSON_QUARANTINE_KEY = "lesson"
LESSON_QUARANTINE_SOURCE = "lesson"


class LessonWrite(NamedTuple):
    """What ``add_lesson`` did. ``added``: the lesson was not among the current (unarchived)
    lessons, so it is new or revived from the archive; a lesson already current is not
    added, but its use is still counted (``stored``). ``refused``: the guard's reason."""

    added: bool
    stored: bool
    refused: str | None = None


def add_lesson(
    conn: Tx,
    text: str,
    tag: str | None,
    max_lessons: int,
    *,
    quarantine_cap: int,
) -> LessonWrite:
    """Store or revive a lesson (§5.15). Call inside ``atomic()``; ``text`` must be
    sanitised. An empty text stores nothing; a refused one goes to the quarantine."""
    text = text.strip()
    if not text:
        return LessonWrite(False, False)
    reason = guard_lesson(text)
    if reason is not None:
        quarantine(
            conn, LESSON_QUARANTINE_KEY, text, reason, LESSON_QUARANTINE_SOURCE, quarantine_cap
        )
        return LessonWrite(False, False, reason)
    archived = conn.lessons.archived_state(text)
    conn.lessons.add_or_revive(text, tag, now_ts())
    apply_cap(conn, max_lessons)
    return LessonWrite(archived is None or archived, True)


def apply_cap(conn: Tx, max_lessons: int) -> None:
    conn.lessons.archive_beyond(max_lessons)


def top_lessons(conn: Tx, n: int) -> list[str]:
    """The ``n`` most used current lessons, oldest use first (as a prompt shows them)."""
    rows = conn.lessons.most_used(n)
    rows.sort(key=lambda r: (r.last_used_at, r.id))
    return [r.text for r in rows]
