"""The admin family's interface: whole-store work: stats counts, export/import of rows, erase.

Code above ``storage`` calls these methods on ``tx.admin``; each backend implements them
(``storage.sqlite.admin.SqliteAdminRows``). Methods take and return plain values (ints, strings,
tuples, dataclasses from ``elastimem.values``), never a driver's rows or cursors.
"""

from __future__ import annotations

from typing import Protocol


class AdminRows(Protocol):
    """Whole-store work: stats counts, export/import of rows, erase."""
