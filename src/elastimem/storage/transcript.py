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

    # -- h15: reads and writes of the query path (retrieval) and the job handlers ----------

    def session_chunk_ids(self, session_id: int) -> list[int]:
        """The ids of one session's chunks (any order)."""
        ...

    def chunk_spans(self, ids: list[int]) -> dict[int, tuple[str, int | None, int | None]]:
        """``id -> (text, first message id, last message id)`` of those chunks that exist."""
        ...

    def chunk_rows(self, ids: list[int]) -> list[tuple[int, int, str, float]]:
        """``(id, session_id, created_at, importance)`` of those chunks that exist."""
        ...

    def chunk_texts(self, ids: list[int]) -> list[tuple[int, str]]:
        """``(id, text)`` of those chunks that exist, by id."""
        ...

    def consecutive_pairs(self, pairs: list[tuple[int, int, int]]) -> list[tuple[int, int]]:
        """Of ``(a, b, session_id)`` pairs (``a < b``), the ``(a, b)`` with no chunk of that
        session between them."""
        ...

    def chunks_without_vector(self, limit: int) -> list[tuple[int, str]]:
        """``(id, text)`` of up to ``limit`` chunks with no vector, by id."""
        ...

    def any_chunk_without_vector(self) -> bool:
        """Whether some chunk has no vector."""
        ...

    def chunks_needing_vector(
        self, ids: list[int], label: str, dim: int | None
    ) -> list[tuple[int, str]]:
        """``(id, text)`` of those of ``ids`` without a vector of ``label``/``dim``, by id."""
        ...

    def all_chunk_ids(self) -> list[int]:
        """Every chunk id, ascending."""
        ...

    def chunk_ids_needing_vector(self, label: str, dim: int) -> list[int]:
        """Ids of the chunks without a vector of ``label``/``dim``, ascending."""
        ...

    def turn_messages(self, session_id: int, turns: list[int]) -> list[tuple[int, str, str, str]]:
        """``(turn, role, content, created_at)`` of a session's messages of ``turns``, in order."""
        ...

    def turn_chunks(self, session_id: int, turns: list[int]) -> list[tuple[int, str]]:
        """``(id, text)`` of a session's chunks that begin in ``turns``, by id."""
        ...

    def rolling_summary(self, session_id: int) -> str | None:
        """A session's rolling digest ("" when it has none); None when the session is gone."""
        ...

    def set_rolling_summary(self, session_id: int, text: str | None) -> None:
        """Replace a session's rolling digest (None: none)."""
        ...

    def recent_user_messages(self, session_id: int, limit: int) -> list[str]:
        """The contents of a session's last ``limit`` user messages, newest first."""
        ...

    def set_session_summary(self, session_id: int, summary: str) -> None:
        """Replace a session's summary."""
        ...
