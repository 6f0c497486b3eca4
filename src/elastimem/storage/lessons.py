"""The lessons family's interface: procedural lessons.

Code above ``storage`` calls these methods on ``tx.lessons``; each backend implements them
(``storage.sqlite.lessons.SqliteLessonRows``). Methods take and return plain values (ints,
strings, tuples, dataclasses from ``elastimem.values``), never a driver's rows or cursors.

The rules (guards, the cap, which lessons a prompt shows) live in ``memory.procedural``. A
lesson's text is unique: a database constraint every backend keeps, so concurrent writers of
the same text revive one lesson rather than store two.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol


class UsedLesson(NamedTuple):
    """A current lesson with what orders it."""

    text: str
    last_used_at: str
    id: int


class LessonRows(Protocol):
    """Procedural lessons."""

    def archived_state(self, text: str) -> bool | None:
        """Whether the lesson with this exact text is archived; None when there is none."""
        ...

    def add_or_revive(self, text: str, tag: str | None, at: str) -> None:
        """Store the lesson used once at ``at``; when the text is already stored, count one
        more use at ``at``, unarchive it and set ``tag`` unless ``tag`` is None. Atomic per
        text: concurrent calls with one text leave one lesson counting every use."""
        ...

    def archive_beyond(self, keep: int) -> None:
        """Archive every current (unarchived) lesson but the ``keep`` most recently used
        (by last use, then id)."""
        ...

    def most_used(self, n: int) -> list[UsedLesson]:
        """The ``n`` current lessons used most (ties: the most recently used, then the
        highest id), in that order."""
        ...
