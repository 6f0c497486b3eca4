"""Keyword search over one user's postings without a cache: the PostgreSQL side of
``PostingRows.chunk_matches`` / ``fact_matches`` (BM25) and ``chunk_term_counts`` /
``fact_term_counts`` (folded substring counts), scored as SQLite scores them.

BM25 is FTS5's ``bm25()`` for the MATCH expression ``"t1" OR "t2" …`` SQLite's postings run:
each query term is one phrase (the tokens FTS5's tokenizer makes of it, ``terms``); for each
phrase ``idf · (f·(k1+1)) / (f + k1·(1 − b + b·D/avgdl))`` with k1 1.2, b 0.75,
``idf = ln((N − n + 0.5)/(n + 0.5))`` (1e-6 where that is ≤ 0), n the documents holding the
phrase anywhere in the user's corpus, f its occurrences in the document, D the document's
tokens and N, avgdl from the trigger-kept totals (``postings.state``, read by the ranking
statement itself: one round trip). The phrases' terms
are summed in phrase order, the arithmetic is float8 in FTS5's own association, so scores
equal SQLite's to the last bit where the server's ``ln`` is the C library's. A one-token
phrase is read from the postings on the server (``*_terms``, one index range per term); a
phrase of several tokens, rare in queries, is counted here from the texts of the documents
holding all its tokens (token by token within one column, as FTS5 matches phrases, so a
fact's key and value are separate columns). A term making no token matches nothing.

The substring counts are SQLite's ``em_fold``/``instr``/``GLOB`` expressions
(``storage.sqlite.postings._like_clause``) in Python over the user's rows, a page at a time:
as on SQLite, every row of the corpus is read (this is the search of a store without a
full-text index, which a PostgreSQL store never is: it only serves callers asking for it).
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterator, Sequence
from typing import Any

from ...text import em_fold
from ..sqlite.postings import LIKE_TERMS
from .sql import limit as _limit
from .terms import token_lists

# FTS5's bm25() defaults.
K1 = 1.2
B = 0.75
_PAGE = 2_000
_BEFORE_ANY_ID = -(2**63)


def _phrase_hits(tokens: Sequence[str], phrase: Sequence[str]) -> int:
    """How many times ``phrase`` starts in ``tokens`` (overlaps counted, as FTS5 does)."""
    width = len(phrase)
    return sum(
        1 for i in range(len(tokens) - width + 1) if list(tokens[i : i + width]) == list(phrase)
    )


class Bm25:
    """BM25 of one corpus of one user (see the module doc)."""

    def __init__(
        self,
        conn: Any,
        user_id: str,
        *,
        table: str,
        postings: str,
        column: str,
        text_columns: tuple[str, ...],
    ) -> None:
        self._conn = conn
        self._user = user_id
        self._table = table
        self._postings = postings
        self._column = column
        self._text_columns = text_columns

    def top(
        self,
        terms: list[str],
        limit: int,
        *,
        totals_key: str,
        where: str,
        params: dict[str, object],
    ) -> list[tuple[int, float]]:
        """``(id, score)`` best first (ties: higher id first) of the documents passing
        ``where`` (SQL over the corpus's row ``r``, with ``params``); ``totals_key`` is the
        ``meta`` key of the corpus's totals ("<rows> <tokens> <stamp>")."""
        if limit == 0:
            return []
        single_terms: list[str] = []
        single_phrases: list[int] = []
        hit_phrases: list[int] = []
        hit_ids: list[int] = []
        hit_freqs: list[int] = []
        for number, phrase in enumerate(token_lists(terms)):
            if len(phrase) == 1:
                single_terms.append(phrase[0])
                single_phrases.append(number)
            elif phrase:
                for doc_id, freq in self._phrase_postings(phrase):
                    hit_phrases.append(number)
                    hit_ids.append(doc_id)
                    hit_freqs.append(freq)
        if not single_terms and not hit_ids:
            return []
        found = self._conn.execute(
            "WITH tot(n, avgdl) AS (SELECT n, split_part(value, ' ', 2)::float8 / n FROM "
            "(SELECT value, split_part(value, ' ', 1)::float8 AS n FROM meta "
            "WHERE user_id = %(user)s AND key = %(totals_key)s) m WHERE n > 0), "
            "q(term, phrase) AS (SELECT * FROM unnest(%(terms)s::text[], "
            "%(phrases)s::int[])), "
            "hits(phrase, id, tf) AS ("
            f"SELECT q.phrase, p.{self._column}, p.tf FROM q JOIN {self._postings} p "
            "ON p.user_id = %(user)s AND p.term = q.term "
            "UNION ALL SELECT * FROM unnest(%(hit_phrases)s::int[], %(hit_ids)s::bigint[], "
            "%(hit_freqs)s::int[])), "
            "idf(phrase, w) AS (SELECT phrase, CASE WHEN x <= 0 THEN 1e-6::float8 ELSE x END "
            "FROM (SELECT phrase, ln((tot.n - count(*)::float8 + 0.5::float8) "
            "/ (count(*)::float8 + 0.5::float8)) AS x FROM hits, tot GROUP BY phrase, tot.n) d) "
            "SELECT r.id, sum(idf.w * ((h.tf::float8 * %(k1_plus)s::float8) / (h.tf::float8 "
            "+ %(k1)s::float8 * (1.0::float8 - %(b)s::float8 + %(b)s::float8 "
            "* r.term_count::float8 / tot.avgdl))) ORDER BY h.phrase) AS s "
            f"FROM tot, hits h JOIN idf ON idf.phrase = h.phrase JOIN {self._table} r "
            f"ON r.user_id = %(user)s AND r.id = h.id WHERE r.term_count IS NOT NULL{where} "
            "GROUP BY r.id ORDER BY s DESC, r.id DESC LIMIT %(limit)s",
            {
                **params,
                "user": self._user,
                "terms": single_terms,
                "phrases": single_phrases,
                "hit_phrases": hit_phrases,
                "hit_ids": hit_ids,
                "hit_freqs": hit_freqs,
                "totals_key": totals_key,
                "k1_plus": K1 + 1.0,
                "k1": K1,
                "b": B,
                "limit": _limit(limit),
            },
        ).fetchall()
        return [(int(r[0]), float(r[1])) for r in found]

    def _phrase_postings(self, phrase: list[str]) -> list[tuple[int, int]]:
        """``(id, occurrences)`` of every document of the corpus holding ``phrase``."""
        columns = ", ".join(f"r.{c}" for c in self._text_columns)
        docs = self._conn.execute(
            f"SELECT r.id, {columns} FROM {self._table} r WHERE r.user_id = %(user)s "
            f"AND r.id IN (SELECT {self._column} FROM {self._postings} WHERE user_id = %(user)s "
            f"AND term = ANY(%(tokens)s::text[]) GROUP BY {self._column} "
            "HAVING count(*) = %(distinct)s) ORDER BY r.id",
            {"user": self._user, "tokens": sorted(set(phrase)), "distinct": len(set(phrase))},
        ).fetchall()
        width = len(self._text_columns)
        texts = [str(value or "") for doc in docs for value in doc[1:]]
        tokenised = token_lists(texts)
        found: list[tuple[int, int]] = []
        for n, doc in enumerate(docs):
            freq = sum(
                _phrase_hits(tokens, phrase) for tokens in tokenised[n * width : (n + 1) * width]
            )
            if freq:
                found.append((int(doc[0]), freq))
        return found


def _matcher(terms: list[str]) -> list[tuple[bool, str | re.Pattern[str]]]:
    """Per folded term (the first ``LIKE_TERMS``): whether it is a one-character ASCII word,
    matched only as a word of its own, with what to look for."""
    made: list[tuple[bool, str | re.Pattern[str]]] = []
    for term in (em_fold(t) for t in terms[:LIKE_TERMS]):
        if len(term) == 1 and term.isascii() and term.isalnum():
            made.append((True, re.compile(f"[^0-9a-z]{re.escape(term)}[^0-9a-z]")))
        else:
            made.append((False, term))
    return made


def _count(folded: str, matcher: list[tuple[bool, str | re.Pattern[str]]]) -> int:
    padded = f" {folded} "
    total = 0
    for word, needle in matcher:
        if word:
            assert isinstance(needle, re.Pattern)
            total += needle.search(padded) is not None
        else:
            assert isinstance(needle, str)
            total += needle in folded
    return total


def term_counts(
    pages: Iterator[list[tuple[int, str]]], terms: list[str], limit: int
) -> list[tuple[int, float]]:
    """``(id, terms contained)`` of the rows of ``pages`` (``(id, text)``) containing at least
    one folded term, most first (ties: higher id first), at most ``limit`` (negative: all)."""
    matcher = _matcher(terms)
    if not matcher:
        return []
    counted = (
        (count, doc_id)
        for page in pages
        for doc_id, text in page
        if (count := _count(em_fold(text), matcher)) > 0
    )
    best = sorted(counted, reverse=True) if limit < 0 else heapq.nlargest(limit, counted)
    return [(doc_id, float(count)) for count, doc_id in best]


def pages(conn: Any, sql: str, params: dict[str, object]) -> Iterator[list[tuple[int, str]]]:
    """``(id, text)`` pages of ``sql`` (which reads ``id`` and ``text`` of rows with an id
    above ``%(after)s``, ascending, up to ``%(page)s``), keyset-paged."""
    after = _BEFORE_ANY_ID
    while True:
        rows = conn.execute(sql, {**params, "after": after, "page": _PAGE}).fetchall()
        if not rows:
            return
        yield [(int(r[0]), str(r[1] or "")) for r in rows]
        if len(rows) < _PAGE:
            return
        after = int(rows[-1][0])
