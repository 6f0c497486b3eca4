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

    # -- for the context plan (assembly) ----------------------------------------------------

    def ended_session_summaries(
        self, exclude: int | None, n: int
    ) -> list[tuple[str, str | None, str | None]]:
        """(started_at, summary, title) of the ``n`` newest ended sessions that have a summary
        or a title, ``exclude`` aside, newest first."""
        ...

    def rolling_summary(self, session_id: int) -> str | None:
        """The stored rolling digest of the session; None when it has none or does not exist."""
        ...
