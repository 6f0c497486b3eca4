"""The jobs family's interface: the durable job queue.

Code above ``storage`` calls these methods on ``tx.jobs``; each backend implements them
(``storage.sqlite.jobs.SqliteJobRows``). Methods take and return plain values (ints, strings,
tuples, dataclasses from ``elastimem.values``), never a driver's rows or cursors.
"""

from __future__ import annotations

from typing import Protocol


class JobRows(Protocol):
    """The durable job queue."""

    # -- for the facade (session end) -------------------------------------------------------

    def count_unfinished(self, job_ids: list[int]) -> int:
        """How many of ``job_ids`` are still queued or running (0 for an empty list)."""
        ...
