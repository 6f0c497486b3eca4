"""The meta family's interface: the meta key/value table, generation counters and the event log.

Code above ``storage`` calls these methods on ``tx.meta``; each backend implements them
(``storage.sqlite.meta.SqliteMetaRows``). Methods take and return plain values (ints, strings,
tuples, dataclasses from ``elastimem.values``), never a driver's rows or cursors.
"""

from __future__ import annotations

from typing import Protocol


class MetaRows(Protocol):
    """The meta key/value table, generation counters and the event log."""
