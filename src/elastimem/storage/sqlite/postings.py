"""SQLite implementation of ``storage.postings.PostingRows``: keyword postings read for exact BM25
(FTS5 vocabularies on SQLite)."""

from __future__ import annotations

import logging
import sqlite3

from ...text import em_fold, fts_match_expression

logger = logging.getLogger("elastimem")


class SqlitePostingRows:
    """``PostingRows`` on one SQLite connection (inside the caller's transaction)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    # -- h15: keyword search without cached postings (the query path's fallback) ---------

    def chunk_matches(
        self,
        terms: list[str],
        limit: int,
        *,
        exclude_session: int | None = None,
        since: str | None = None,
        until: str | None = None,
    ) -> list[tuple[int, float]] | None:
        match = fts_match_expression(terms)
        if since is None and until is None:
            # FTS5 computes bm25 for every match before the LIMIT, so the per-match work
            # decides the cost on large stores. Without time filters the query stays on the
            # FTS table: the excluded session is a ``rowid NOT IN`` set built once instead
            # of a join that reads the ``chunks`` row of every match (measured at 100k
            # chunks on a busy 2-core machine: 5.6 ms p50 / 15.6 ms p95, against 9.6 / 58 ms
            # for the join).
            sql = "SELECT rowid, -bm25(chunks_fts) AS s FROM chunks_fts WHERE chunks_fts MATCH ?"
            params: list[object] = [match]
            if exclude_session is not None:
                sql += " AND rowid NOT IN (SELECT id FROM chunks WHERE session_id = ?)"
                params.append(exclude_session)
            sql += " ORDER BY s DESC, rowid DESC LIMIT ?"
        else:
            where, extra = _chunk_filter(exclude_session, since, until)
            sql = (
                "SELECT c.id, -bm25(chunks_fts) AS s FROM chunks_fts "
                "JOIN chunks c ON c.id = chunks_fts.rowid "
                f"WHERE chunks_fts MATCH ?{where} ORDER BY s DESC, c.id DESC LIMIT ?"
            )
            params = [match, *extra]
        return self._scores(sql, [*params, limit], "chunk FTS")

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
        matched, like_params = _like_clause("em_fold(c.text)", terms)
        return self._scores(
            f"SELECT id, m FROM (SELECT c.id AS id, ({matched}) AS m FROM chunks c "
            f"WHERE 1 = 1{where}) WHERE m > 0 ORDER BY m DESC, id DESC LIMIT ?",
            [*like_params, *params, limit],
            "chunk LIKE",
        )

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
        return self._scores(
            "SELECT f.id, -bm25(facts_fts) AS s FROM facts_fts "
            "JOIN facts f ON f.id = facts_fts.rowid "
            f"WHERE facts_fts MATCH ?{where} ORDER BY s DESC, f.id DESC LIMIT ?",
            [fts_match_expression(terms), *params, limit],
            "fact FTS",
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
        # Keys are snake_case: fold '_' to a space so "favorite color" finds favorite_color.
        matched, like_params = _like_clause(
            "em_fold(replace(f.key, '_', ' ') || ' ' || f.value)", terms
        )
        return self._scores(
            f"SELECT id, m FROM (SELECT f.id AS id, ({matched}) AS m FROM facts f "
            f"WHERE 1 = 1{where}) WHERE m > 0 ORDER BY m DESC, id DESC LIMIT ?",
            [*like_params, *params, limit],
            "fact LIKE",
        )

    def _scores(self, sql: str, params: list[object], what: str) -> list[tuple[int, float]] | None:
        try:
            rows = self._conn.execute(sql, params).fetchall()
        except sqlite3.Error as exc:  # a MATCH FTS5 refuses, a closed connection
            logger.debug("%s search failed: %s", what, exc)
            return None
        return [(int(r[0]), float(r[1])) for r in rows]


# The LIKE fallback counts at most this many terms (each is one instr() per row).
LIKE_TERMS = 8


def _like_clause(expr: str, terms: list[str]) -> tuple[str, list[object]]:
    """SQL counting the folded terms an expression contains. A one-character ASCII term
    ("room 5") counts only as a word of its own: as a substring, "5" is in "59" and
    "2025", and would match nearly every row."""
    folded = [em_fold(t) for t in terms[:LIKE_TERMS]]
    parts: list[str] = []
    params: list[object] = []
    for term in folded:
        if len(term) == 1 and term.isascii() and term.isalnum():
            parts.append(f"((' ' || {expr} || ' ') GLOB ?)")
            params.append(f"*[^0-9a-z]{term}[^0-9a-z]*")
        else:
            parts.append(f"(instr({expr}, ?) > 0)")
            params.append(term)
    return " + ".join(parts), params


def _chunk_filter(
    exclude_session: int | None, since: str | None, until: str | None
) -> tuple[str, list[object]]:
    clauses: list[str] = []
    params: list[object] = []
    if exclude_session is not None:
        clauses.append("c.session_id <> ?")
        params.append(exclude_session)
    if since is not None:
        clauses.append("c.created_at >= ?")
        params.append(since)
    if until is not None:
        clauses.append("c.created_at < ?")
        params.append(until)
    return "".join(f" AND {c}" for c in clauses), params


def _fact_filter(live_only: bool, since: str | None, until: str | None) -> tuple[str, list[object]]:
    if not live_only:
        return "", []
    sql = " AND f.invalidated_at IS NULL AND f.archived = 0"
    params: list[object] = []
    if since is not None:
        sql += " AND f.valid_from >= ?"
        params.append(since)
    if until is not None:
        sql += " AND f.valid_from < ?"
        params.append(until)
    return sql, params
