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
from .search import Bm25, pages, term_counts

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
            yield terms, np.array(docs, dtype=np.int64), np.array(counts, dtype=np.int32)
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

    # -- the query path's fallbacks (storage.postgres.search) ----------------------------------
    # The keyword legs use these where the cached-postings index does not answer: time
    # filters, a term the tokenizer splits into a phrase, a term whose postings cost more to
    # read than to rank here, a corpus below the index's size floor. Errors of the server are
    # raised (as StoreError, by ``database``), not answered with None: they end the
    # transaction on PostgreSQL, so going on without the leg is no option.

    def _bm25(self, corpus: str) -> Bm25:
        table, postings, column, _text = _corpus(corpus)
        columns = ("text",) if corpus == "chunks" else ("key", "value")
        return Bm25(
            self._conn,
            self._user,
            table=table,
            postings=postings,
            column=column,
            text_columns=columns,
        )

    def chunk_matches(
        self,
        terms: list[str],
        limit: int,
        *,
        exclude_session: int | None = None,
        since: str | None = None,
        until: str | None = None,
    ) -> list[tuple[int, float]] | None:
        where, params = _chunk_filter(exclude_session, since, until)
        return self._bm25("chunks").top(
            terms, limit, totals_key=TERM_TOTALS_KEYS["chunks"], where=where, params=params
        )

    def chunk_term_counts(
        self,
        terms: list[str],
        limit: int,
        *,
        exclude_session: int | None = None,
        since: str | None = None,
        until: str | None = None,
    ) -> list[tuple[int, float]] | None:
        where, params = _chunk_filter(exclude_session, since, until)
        sql = (
            "SELECT r.id, r.text FROM chunks r WHERE r.user_id = %(user)s AND r.id > %(after)s"
            f"{where} ORDER BY r.id LIMIT %(page)s"
        )
        return term_counts(pages(self._conn, sql, {**params, "user": self._user}), terms, limit)

    def fact_matches(
        self,
        terms: list[str],
        limit: int,
        *,
        live_only: bool = True,
        since: str | None = None,
        until: str | None = None,
    ) -> list[tuple[int, float]] | None:
        where, params = _fact_filter(live_only, since, until)
        return self._bm25("facts").top(
            terms, limit, totals_key=TERM_TOTALS_KEYS["facts"], where=where, params=params
        )

    def fact_term_counts(
        self,
        terms: list[str],
        limit: int,
        *,
        live_only: bool = True,
        since: str | None = None,
        until: str | None = None,
    ) -> list[tuple[int, float]] | None:
        where, params = _fact_filter(live_only, since, until)
        # Keys are snake_case: '_' reads as a space, so "favorite color" finds favorite_color.
        sql = (
            "SELECT r.id, replace(r.key, '_', ' ') || ' ' || r.value FROM facts r "
            f"WHERE r.user_id = %(user)s AND r.id > %(after)s{where} ORDER BY r.id "
            "LIMIT %(page)s"
        )
        return term_counts(pages(self._conn, sql, {**params, "user": self._user}), terms, limit)


def _chunk_filter(
    exclude_session: int | None, since: str | None, until: str | None
) -> tuple[str, dict[str, object]]:
    """SQL (over the chunk ``r``) and parameters of the chunk searches' filters."""
    where = ""
    params: dict[str, object] = {}
    if exclude_session is not None:
        where += " AND r.session_id <> %(exclude_session)s"
        params["exclude_session"] = exclude_session
    if since is not None:
        where += " AND r.created_at >= %(since)s"
        params["since"] = since
    if until is not None:
        where += " AND r.created_at < %(until)s"
        params["until"] = until
    return where, params


def _fact_filter(
    live_only: bool, since: str | None, until: str | None
) -> tuple[str, dict[str, object]]:
    """SQL (over the fact ``r``) and parameters of the fact searches' filters: as on SQLite,
    the time window applies to live versions only."""
    if not live_only:
        return "", {}
    where = " AND r.invalidated_at IS NULL AND r.archived = 0"
    params: dict[str, object] = {}
    if since is not None:
        where += " AND r.valid_from >= %(since)s"
        params["since"] = since
    if until is not None:
        where += " AND r.valid_from < %(until)s"
        params["until"] = until
    return where, params


if TYPE_CHECKING:  # mypy proves the class implements the interface

    def _implements(conn: Any) -> PostingRows:
        return PostgresPostingRows(conn, "user")
