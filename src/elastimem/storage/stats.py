"""The stats family's interface: counts and sizes for stats() and the governor.

Code above ``storage`` calls these methods on ``tx.stats``; each backend implements them
(``storage.sqlite.stats.SqliteStatsRows``). Methods take and return plain values.
"""

from __future__ import annotations

from typing import Protocol


class StatsRows(Protocol):
    """Counts and sizes for ``stats()`` and the governor."""
