"""SQLite implementation of ``storage.postings.PostingRows``: keyword postings read for exact BM25
(FTS5 vocabularies on SQLite)."""

from __future__ import annotations

import sqlite3


class SqlitePostingRows:
    """``PostingRows`` on one SQLite connection (inside the caller's transaction)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
