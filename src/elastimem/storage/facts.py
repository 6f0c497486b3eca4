"""The facts family's interface: fact versions, quarantine and the facts' keyword table.

Code above ``storage`` calls these methods on ``tx.facts``; each backend implements them
(``storage.sqlite.facts.SqliteFactRows``). Methods take and return plain values (ints, strings,
tuples, dataclasses from ``elastimem.values``), never a driver's rows or cursors.
"""

from __future__ import annotations

from typing import Protocol


class FactRows(Protocol):
    """Fact versions, quarantine and the facts' keyword table."""
