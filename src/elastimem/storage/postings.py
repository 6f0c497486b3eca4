"""The postings family's interface: the keyword postings the exact BM25 of ``index.keyword``
is computed from.

Data model: two corpora, ``"chunks"`` (one document per chunk, its text) and ``"facts"`` (one
document per fact version, its key and value together). A document is a list of tokens as
the backend's full-text tokenizer makes them; a term's postings are the ids of the documents
holding it with its frequency in each. The backend keeps the postings in step with the rows
(on SQLite: the FTS5 tables ``chunks_fts`` and ``facts_fts``, read through ``fts5vocab``).

Code above ``storage`` calls these methods on ``tx.postings``; each backend implements them
(``storage.sqlite.postings.SqlitePostingRows``). Methods take and return plain values (ints,
strings, tuples, numpy arrays); a failure of the backend is raised as ``StoreError``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

# The meta key of the erase count, bumped by every erase that deletes chunks or facts
# (portability.erase): what tells an erase followed by new rows from appends alone.
ERASE_GEN_KEY = "erase.gen"
CORPORA = ("chunks", "facts")


@dataclass(frozen=True)
class PostingsState:
    """Where a corpus's postings stand: equal states mean unchanged postings."""

    rows: int  # documents
    tokens: int  # tokens over all documents (all their columns)
    version: object  # differs after any write to the corpus's postings; compare with ==
    erase_gen: object  # the store's erase count (ERASE_GEN_KEY) as stored


class Tokenizer(Protocol):
    """The backend's full-text tokenizer, run on text outside the store (not thread-safe:
    one caller at a time; ``close`` when done)."""

    def documents(self, rows: list[tuple[int, str]]) -> list[tuple[int, dict[str, int], int]]:
        """``(id, token -> frequency, length in tokens)`` for each ``(id, text)``."""
        ...

    def tokens(self, texts: list[str]) -> list[list[str]]:
        """The tokens of each text, in order."""
        ...

    def close(self) -> None:
        """Free what the tokenizer holds."""
        ...


class PostingRows(Protocol):
    """The keyword postings of the corpora ``chunks`` and ``facts`` (see the module doc)."""

    def state(self, corpus: str) -> PostingsState:
        """Document count, token total, change marker and erase count of ``corpus``."""
        ...

    def doc_lengths(self, corpus: str) -> tuple[np.ndarray, np.ndarray]:
        """``(ids, lengths)``: every document's id (int64, ascending) and its length in
        tokens."""
        ...

    def docs_after(self, corpus: str, after_id: int, limit: int) -> list[tuple[int, str]]:
        """``(id, text)`` of the first ``limit`` documents with an id above ``after_id``,
        ascending (a fact's text: its key and value joined by a space)."""
        ...

    def term_size(self, corpus: str, term: str) -> tuple[int, int] | None:
        """``(documents, occurrences)`` of one token, or None when no document holds it."""
        ...

    def term_postings(self, corpus: str, term: str) -> tuple[np.ndarray, np.ndarray]:
        """``(ids, frequencies)`` of one token: int64 ids ascending, float64 counts."""
        ...

    def all_postings(
        self, corpus: str, block: int
    ) -> Iterator[tuple[Sequence[str], np.ndarray, np.ndarray]]:
        """Every posting, in ``(terms, ids, frequencies)`` blocks of up to ``block`` rows
        (int64 ids, int32 frequencies), ordered by term then id, so one term's postings are
        one run."""
        ...

    def tokenizer(self) -> Tokenizer:
        """A new tokenizer making the same tokens as the corpora's postings."""
        ...

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
