"""The facts family's interface: fact versions, quarantine and the facts' keyword table.

Code above ``storage`` calls these methods on ``tx.facts``; each backend implements them
(``storage.sqlite.facts.SqliteFactRows``). Methods take and return plain values (ints, strings,
tuples, dataclasses from ``elastimem.values``), never a driver's rows or cursors.
"""

from __future__ import annotations

from typing import Protocol


class FactRows(Protocol):
    """Fact versions, quarantine and the facts' keyword table."""

    # -- h15: reads and writes of the query path (retrieval) and the job handlers ----------

    def key_exists(self, key: str) -> bool:
        """Whether any version (live or not) of ``key`` is stored."""
        ...

    def keys_of(self, ids: list[int]) -> list[tuple[int, str, bool]]:
        """``(id, key, is live)`` of those fact versions that exist."""
        ...

    def archived_among(self, ids: list[int]) -> set[int]:
        """Those of ``ids`` that are archived."""
        ...

    def candidate_rows(self, ids: list[int]) -> list[tuple[int, str, str, str, float]]:
        """``(id, key, value, valid_from, importance)`` of those fact versions that exist."""
        ...

    def unreviewed_supersessions(
        self, since: str, limit: int
    ) -> list[tuple[int, int, str, str, str, str, str]]:
        """``(old id, new id, key, old value, old valid_from, new value, new valid_from)`` of
        up to ``limit`` versions superseded at or after ``since`` whose successor is live, not
        itself a merge, and not yet reviewed as a pair; oldest supersession first."""
        ...

    def live_version(self, key: str) -> tuple[int, float, str | None, int | None] | None:
        """``(id, importance, category, origin_session_id)`` of the live version of ``key``."""
        ...

    def record_review(
        self, old_id: int, new_id: int, verdict: str, result_id: int | None, at: str
    ) -> None:
        """Record the merge review of one supersession (a pair is reviewed once)."""
        ...

    def trim_quarantine(self, keep: int) -> None:
        """Keep only the newest ``keep`` quarantine entries."""
        ...
