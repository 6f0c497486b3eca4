"""PostgreSQL implementation of ``storage.postings.PostingRows``: one user's keyword postings
(``chunk_terms`` / ``fact_terms``, written with the rows they index, see
``schema.KEYWORD_DOC``), the BM25 inputs SQLite's FTS5 vocabulary gives.

A term's postings are one range of the primary key ``(user_id, term, id)``; ``term`` sorts
in byte order (``COLLATE "C"``), so "by term then id" is the index order and the order
Python sorts strings in. The document count, token total and change marker are the
trigger-kept totals in ``meta`` (``schema.TERM_TOTALS_KEYS``): one primary-key read. The
tokenizer is SQLite's FTS5 one (``storage.sqlite.postings.SqliteTokenizer``), the very one the
postings were made with (``terms``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import StoreError
from ..postings import ERASE_GEN_KEY, PostingRows, PostingsState
from ..sqlite.postings import SqliteTokenizer
from .schema import TERM_TOTALS_KEYS

# Per corpus: (table of rows, postings table, its row-id column, the row's keyword text).
_CORPORA = {
    "chunks": ("chunks", "chunk_terms", "chunk_id", "text"),
    "facts": ("facts", "fact_terms", "fact_id", "key || ' ' || value"),
}


def _corpus(corpus: str) -> tuple[str, str, str, str]:
    try:
        return _CORPORA[corpus]
    except KeyError:
        raise ValueError(f"no keyword corpus {corpus!r}; use one of {sorted(_CORPORA)}") from None


class PostgresPostingRows:
    """``PostingRows`` for one user on one psycopg connection (inside the caller's
    transaction). Every statement names the user as well as being confined to it by
    row-level security."""

    __slots__ = ("_conn", "_user")

    def __init__(self, conn: Any, user_id: str) -> None:
        self._conn = conn
        self._user = user_id

    def state(self, corpus: str) -> PostingsState:
        _corpus(corpus)
        key = TERM_TOTALS_KEYS[corpus]
        values = dict(
            self._conn.execute(
                "SELECT key, value FROM meta WHERE user_id = %s AND key IN (%s, %s)",
                (self._user, key, ERASE_GEN_KEY),
            ).fetchall()
        )
        totals = str(values.get(key) or "0 0 -").split(" ")
        rows, tokens = int(totals[0]), int(totals[1])
        stamp = totals[2] if len(totals) > 2 else "-"
        return PostingsState(rows, tokens, stamp, values.get(ERASE_GEN_KEY))

    def doc_lengths(self, corpus: str) -> tuple[np.ndarray, np.ndarray]:
        table = _corpus(corpus)[0]
        rows = self._conn.execute(
            f"SELECT id, term_count FROM {table} WHERE user_id = %s AND term_count IS NOT NULL "
            "ORDER BY id",
            (self._user,),
        ).fetchall()
        data = np.array(rows, dtype=np.int64).reshape(-1, 2)
        return data[:, 0].copy(), data[:, 1].copy()

    def docs_after(self, corpus: str, after_id: int, limit: int) -> list[tuple[int, str]]:
        table, _postings, _column, text = _corpus(corpus)
        rows = self._conn.execute(
            f"SELECT id, {text} FROM {table} WHERE user_id = %s AND id > %s ORDER BY id LIMIT %s",
            (self._user, after_id, limit),
        ).fetchall()
        return [(int(i), str(t or "")) for i, t in rows]

    def term_size(self, corpus: str, term: str) -> tuple[int, int] | None:
        _table, postings, _column, _text = _corpus(corpus)
        row = self._conn.execute(
            f"SELECT count(*), sum(tf) FROM {postings} WHERE user_id = %s AND term = %s",
            (self._user, term),
        ).fetchone()
        return None if not row or not row[0] else (int(row[0]), int(row[1]))

    def term_postings(self, corpus: str, term: str) -> tuple[np.ndarray, np.ndarray]:
        _table, postings, column, _text = _corpus(corpus)
        rows = self._conn.execute(
            f"SELECT {column}, tf FROM {postings} WHERE user_id = %s AND term = %s "
            f"ORDER BY {column}",
            (self._user, term),
        ).fetchall()
        data = np.array(rows, dtype=np.int64).reshape(-1, 2)
        return data[:, 0].copy(), data[:, 1].astype(np.float64)

    def all_postings(
        self, corpus: str, block: int
    ) -> Iterator[tuple[Sequence[str], np.ndarray, np.ndarray]]:
        _table, postings, column, _text = _corpus(corpus)
        # Keyset pages in index order, each its own statement (no server-side cursor left
        # behind on the pooled connection by a reader that stops early).
        last: tuple[str, int] | None = None
        while True:
            after = "" if last is None else f" AND (term, {column}) > (%s, %s)"
            rows = self._conn.execute(
                f"SELECT term, {column}, tf FROM {postings} WHERE user_id = %s{after} "
                f"ORDER BY term, {column} LIMIT %s",
                (self._user, *(() if last is None else last), block),
            ).fetchall()
            if not rows:
                return
            terms, docs, counts = zip(*rows)
            yield terms, np.array(docs, dtype=np.int32), np.array(counts, dtype=np.int32)
            if len(rows) < block:
                return
            last = (str(rows[-1][0]), int(rows[-1][1]))

    def tokenizer(self) -> SqliteTokenizer:
        try:
            return SqliteTokenizer()
        except sqlite3.Error as exc:
            raise StoreError(
                "PostgreSQL stores tokenise keyword terms with SQLite's FTS5, which this "
                f"Python's sqlite3 lacks ({exc}); use a Python whose SQLite has FTS5"
            ) from exc

    # -- the query path's fallbacks (issue #18: still to come on PostgreSQL) -------------------
    # The keyword legs use these only when the cached-postings index is not in use (the LITE
    # tier, or a store without a keyword index); on PostgreSQL the index always is, so far.

    NOT_YET = frozenset({"chunk_matches", "chunk_term_counts", "fact_matches", "fact_term_counts"})

    def chunk_matches(
        self,
        terms: list[str],
        limit: int,
        *,
        exclude_session: int | None = None,
        since: str | None = None,
        until: str | None = None,
    ) -> list[tuple[int, float]] | None:
        raise _not_yet("chunk_matches")

    def chunk_term_counts(
        self,
        terms: list[str],
        limit: int,
        *,
        exclude_session: int | None = None,
        since: str | None = None,
        until: str | None = None,
    ) -> list[tuple[int, float]] | None:
        raise _not_yet("chunk_term_counts")

    def fact_matches(
        self,
        terms: list[str],
        limit: int,
        *,
        live_only: bool = True,
        since: str | None = None,
        until: str | None = None,
    ) -> list[tuple[int, float]] | None:
        raise _not_yet("fact_matches")

    def fact_term_counts(
        self,
        terms: list[str],
        limit: int,
        *,
        live_only: bool = True,
        since: str | None = None,
        until: str | None = None,
    ) -> list[tuple[int, float]] | None:
        raise _not_yet("fact_term_counts")


def _not_yet(method: str) -> NotImplementedError:
    return NotImplementedError(
        f"postings.{method} is not implemented on PostgreSQL yet (issue #18)"
    )


if TYPE_CHECKING:  # mypy proves the class implements the interface

    def _implements(conn: Any) -> PostingRows:
        return PostgresPostingRows(conn, "user")
