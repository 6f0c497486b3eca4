"""The facts family's interface: fact versions, quarantine and the facts' keyword table.

Code above ``storage`` calls these methods on ``tx.facts``; each backend implements them
(``storage.sqlite.facts.SqliteFactRows``). Methods take and return plain values (ints, strings,
tuples, dataclasses from ``elastimem.values``), never a driver's rows or cursors.
"""

from __future__ import annotations

from typing import Protocol


class FactRows(Protocol):
    """Fact versions, quarantine and the facts' keyword table."""

    # -- for the facade (quarantine_entries) ------------------------------------------------

    def recent_quarantine(self, n: int) -> list[dict[str, object]]:
        """The newest ``n`` quarantine entries, oldest first, as dicts of ts, key, value,
        reason and source."""
        ...
