"""The postings family's interface: keyword postings read for exact BM25 (FTS5 vocabularies on
SQLite).

Code above ``storage`` calls these methods on ``tx.postings``; each backend implements them
(``storage.sqlite.postings.SqlitePostingRows``). Methods take and return plain values (ints,
strings, tuples, dataclasses from ``elastimem.values``), never a driver's rows or cursors.
"""

from __future__ import annotations

from typing import Protocol


class PostingRows(Protocol):
    """Keyword postings read for exact BM25 (FTS5 vocabularies on SQLite)."""

    # -- h15: keyword search without cached postings (the query path's fallback) ---------
    # Each returns ``(id, score)`` best first (ties: higher id first), or None when the
    # backend could not run the search (the query then goes on without this leg).

    def chunk_matches(
        self,
        terms: list[str],
        limit: int,
        *,
        exclude_session: int | None = None,
        since: str | None = None,
        until: str | None = None,
    ) -> list[tuple[int, float]] | None:
        """Chunks by BM25 over their text (higher is better) among those outside
        ``exclude_session`` created in ``[since, until)``."""
        ...

    def chunk_term_counts(
        self,
        terms: list[str],
        limit: int,
        *,
        exclude_session: int | None = None,
        since: str | None = None,
        until: str | None = None,
    ) -> list[tuple[int, float]] | None:
        """Chunks by how many of the (first eight, folded) terms their folded text contains,
        for a store without a full-text index; chunks containing none are left out."""
        ...

    def fact_matches(
        self,
        terms: list[str],
        limit: int,
        *,
        live_only: bool = True,
        since: str | None = None,
        until: str | None = None,
    ) -> list[tuple[int, float]] | None:
        """Fact versions (live ones unless ``live_only`` is False, valid from ``[since,
        until)``) by BM25 over key and value (higher is better)."""
        ...

    def fact_term_counts(
        self,
        terms: list[str],
        limit: int,
        *,
        live_only: bool = True,
        since: str | None = None,
        until: str | None = None,
    ) -> list[tuple[int, float]] | None:
        """As ``fact_matches`` for a store without a full-text index: by how many of the
        folded terms the key (underscores as spaces) and value contain."""
        ...
