"""The meta family's interface: the store's key/value settings, generation counters and the
event log.

Code above ``storage`` calls these methods on ``tx.meta``; each backend implements them
(``storage.sqlite.meta.SqliteMetaRows``). Methods take and return plain values.
"""

from __future__ import annotations

from typing import Protocol

# The audit log keeps the newest EVENTS_KEPT rows.
EVENTS_KEPT = 1000

# Keys under which each backend keeps a fresh random value that changes with any change to what
# a cache reads: of the facts (build_context's facts), of the graph leg, of the fact vectors.
FACTS_STAMP_KEY = "facts.stamp"
GRAPH_STAMP_KEY = "graph.stamp"
FACT_VECTORS_STAMP_KEY = "fact_vectors.stamp"


class MetaRows(Protocol):
    """The ``meta`` key/value table and the ``events`` audit log."""

    def get(self, key: str, default: str | None = None) -> str | None:
        """The value stored under ``key``, or ``default``."""
        ...

    def get_int(self, key: str, default: int = 0) -> int:
        """The value under ``key`` as an int; ``default`` when missing or not a number."""
        ...

    def set(self, key: str, value: object) -> None:
        """Store ``str(value)`` under ``key``."""
        ...

    def bump(self, key: str, by: int = 1) -> int:
        """Add ``by`` to an integer counter and return the new value."""
        ...

    def log_event(self, kind: str, **detail: object) -> None:
        """Append to the local audit log (``detail``: counts and ids, never user text)."""
        ...

    def trim_events(self) -> None:
        """Keep only the newest events of the audit log."""
        ...
