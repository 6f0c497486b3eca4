"""The lessons family's interface: procedural lessons.

Code above ``storage`` calls these methods on ``tx.lessons``; each backend implements them
(``storage.sqlite.lessons.SqliteLessonRows``). Methods take and return plain values (ints,
strings, tuples, dataclasses from ``elastimem.values``), never a driver's rows or cursors.
"""

from __future__ import annotations

from typing import Protocol


class LessonRows(Protocol):
    """Procedural lessons."""
