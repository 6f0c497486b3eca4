"""The fact vectors family's interface: one vector per fact version, on file.

Code above ``storage`` calls these methods on ``tx.fact_vectors``; each backend implements them
(``storage.sqlite.fact_vectors.SqliteFactVectorRows``). Methods take and return plain values
(ints, strings, tuples, dataclasses from ``elastimem.values``), never a driver's rows or
cursors.
"""

from __future__ import annotations

from typing import Protocol


class FactVectorRows(Protocol):
    """One vector per fact version, on file."""
