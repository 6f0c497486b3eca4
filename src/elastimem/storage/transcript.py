"""The transcript family's interface: sessions, messages and chunks (with their keyword table).

Code above ``storage`` calls these methods on ``tx.transcript``; each backend implements them
(``storage.sqlite.transcript.SqliteTranscriptRows``). Methods take and return plain values
(ints, strings, tuples, dataclasses from ``elastimem.values``), never a driver's rows or
cursors.
"""

from __future__ import annotations

from typing import Protocol


class TranscriptRows(Protocol):
    """Sessions, messages and chunks (with their keyword table)."""
