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
