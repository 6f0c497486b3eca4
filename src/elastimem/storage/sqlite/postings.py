"""SQLite implementation of ``storage.postings.PostingRows``: the keyword postings read from the
FTS5 indexes ``chunks_fts`` and ``facts_fts``.

FTS5 is the index of record. Its ``_data`` shadow table holds the averages record (row 1:
varint row count, then a varint token total per column) and the structure record (row 10,
which changes with every write to the index, as it carries FTS5's count of segments
written); its ``_docsize`` table holds each row's length per column. A term's postings are
read through ``fts5vocab`` tables, created per connection in ``temp`` (never in the file).
The tokenizer is FTS5's own, run in a private in-memory FTS5 table.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from ...errors import StoreError
from ...text import em_fold
from ..postings import ERASE_GEN_KEY, PostingRows, PostingsState
from . import connection
from .fts import FTS_TOKENIZER, fts_match_expression

_T = TypeVar("_T")

logger = logging.getLogger("elastimem")

# Rows of an FTS5 table's ``_data`` shadow table: the averages record and the structure
# record (fixed ids in FTS5's file format).
_AVERAGES_ID = 1
_STRUCTURE_ID = 10
_ERASE_GEN_ID = -1  # the erase count's place in state()'s result (no _data id is < 1)

# Per corpus: its FTS5 table, and how to read its documents' text after an id (the columns
# joined by a space, which the tokenizer splits anyway, so the counts are the columns').
_FTS_TABLES = {"chunks": "chunks_fts", "facts": "facts_fts"}
_DOCS_AFTER = {
    "chunks": "SELECT id, text FROM chunks WHERE id > ? ORDER BY id LIMIT ?",
    "facts": "SELECT id, key || ' ' || value FROM facts WHERE id > ? ORDER BY id LIMIT ?",
}


def _fts_table(corpus: str) -> str:
    try:
        return _FTS_TABLES[corpus]
    except KeyError:
        raise ValueError(
            f"no keyword corpus {corpus!r}; use one of {sorted(_FTS_TABLES)}"
        ) from None


def _guarded(action: str, call: Callable[[], _T]) -> _T:
    try:
        return call()
    except connection.ERRORS as exc:
        raise StoreError(f"could not {action}: {exc}") from exc


class SqlitePostingRows:
    """``PostingRows`` on one SQLite connection (inside the caller's read snapshot)."""

    __slots__ = ("_conn", "_vocabs")

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._vocabs: set[str] = set()  # fts5vocab tables known to exist on this connection

    def state(self, corpus: str) -> PostingsState:
        table = _fts_table(corpus)

        def read() -> PostingsState:
            # One statement, two rowid lookups and the erase count.
            blocks = dict(
                self._conn.execute(
                    f"SELECT id, block FROM {table}_data WHERE id IN "
                    f"({_AVERAGES_ID}, {_STRUCTURE_ID}) UNION ALL "
                    f"SELECT {_ERASE_GEN_ID}, value FROM meta WHERE key = '{ERASE_GEN_KEY}'"
                ).fetchall()
            )
            averages, structure, erase_gen = (
                b"" if blocks.get(i) is None else _as_bytes(blocks[i])
                for i in (_AVERAGES_ID, _STRUCTURE_ID, _ERASE_GEN_ID)
            )
            rows, tokens = _decode_averages(averages)
            return PostingsState(rows, tokens, (averages, structure), erase_gen)

        return _guarded("read the keyword index's state", read)

    def doc_lengths(self, corpus: str) -> tuple[np.ndarray, np.ndarray]:
        table = _fts_table(corpus)

        def read() -> tuple[np.ndarray, np.ndarray]:
            ids: list[int] = []
            lengths: list[int] = []
            for doc_id, size in self._conn.execute(
                f"SELECT id, sz FROM {table}_docsize ORDER BY id"
            ):
                ids.append(int(doc_id))
                lengths.append(_varint_sum(bytes(size)) if size else 0)
            return np.array(ids, dtype=np.int64), np.array(lengths, dtype=np.int64)

        return _guarded("read the keyword index's document lengths", read)

    def docs_after(self, corpus: str, after_id: int, limit: int) -> list[tuple[int, str]]:
        _fts_table(corpus)
        sql = _DOCS_AFTER[corpus]
        return _guarded(
            "read new rows for the keyword index",
            lambda: [(int(i), str(t or "")) for i, t in self._conn.execute(sql, (after_id, limit))],
        )

    def term_size(self, corpus: str, term: str) -> tuple[int, int] | None:
        def read() -> tuple[int, int] | None:
            vocab = self._vocab(corpus, "row")
            counts = self._conn.execute(
                f"SELECT doc, cnt FROM {vocab} WHERE term = ?", (term,)
            ).fetchone()
            return None if counts is None else (int(counts[0]), int(counts[1]))

        return _guarded("read a term's size from the keyword index", read)

    def term_postings(self, corpus: str, term: str) -> tuple[np.ndarray, np.ndarray]:
        def read() -> tuple[np.ndarray, np.ndarray]:
            vocab = self._vocab(corpus, "instance")
            # Rows for one term come in doc order, so SQLite groups them without sorting (an
            # IN over several terms sorted every instance: 3 s -> 8 s on a 10 MB message).
            rows = self._conn.execute(
                f"SELECT doc, count(*) FROM {vocab} WHERE term = ? GROUP BY doc", (term,)
            ).fetchall()
            data = np.array(rows, dtype=np.int64).reshape(-1, 2)
            return data[:, 0].copy(), data[:, 1].astype(np.float64)

        return _guarded("read a term's postings from the keyword index", read)

    def all_postings(
        self, corpus: str, block: int
    ) -> Iterator[tuple[Sequence[str], np.ndarray, np.ndarray]]:
        _fts_table(corpus)
        try:
            vocab = self._vocab(corpus, "instance")
            cursor = self._conn.execute(
                f"SELECT term, doc, count(*) FROM {vocab} GROUP BY term, doc"
            )
            while True:
                rows = cursor.fetchmany(block)
                if not rows:
                    return
                terms, docs, counts = zip(*rows)
                yield terms, np.array(docs, dtype=np.int64), np.array(counts, dtype=np.int32)
        except connection.ERRORS as exc:
            raise StoreError(f"could not read the keyword index's postings: {exc}") from exc

    def tokenizer(self) -> SqliteTokenizer:
        return _guarded("start the keyword tokenizer", SqliteTokenizer)

    def _vocab(self, corpus: str, kind: str) -> str:
        """This connection's fts5vocab table of ``kind`` over the corpus's FTS5 table."""
        table = _fts_table(corpus)
        vocab = f"temp.elastimem_{table}_{'rows' if kind == 'row' else 'vocab'}"
        if vocab not in self._vocabs:
            _ensure_vocab(self._conn, vocab, table, kind)
            self._vocabs.add(vocab)
        return vocab

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
        except connection.ERRORS as exc:  # a MATCH FTS5 refuses, a closed connection
            logger.debug("%s search failed: %s", what, exc)
            return None
        return [(int(r[0]), float(r[1])) for r in rows]


class SqliteTokenizer:
    """FTS5's tokenizer of the corpora, run on text in a private in-memory FTS5 table."""

    def __init__(self) -> None:
        self._conn = sqlite3.connect(":memory:", check_same_thread=False)
        self._conn.execute(
            f"CREATE VIRTUAL TABLE tok USING fts5(text, content='', tokenize='{FTS_TOKENIZER}')"
        )
        self._conn.execute("CREATE VIRTUAL TABLE tok_vocab USING fts5vocab(tok, instance)")

    def documents(self, rows: list[tuple[int, str]]) -> list[tuple[int, dict[str, int], int]]:
        def run() -> list[tuple[int, dict[str, int], int]]:
            self._conn.executemany("INSERT INTO tok(rowid, text) VALUES (?, ?)", rows)
            counts: dict[int, dict[str, int]] = {doc_id: {} for doc_id, _ in rows}
            for term, doc, n in self._conn.execute(
                "SELECT term, doc, count(*) FROM tok_vocab GROUP BY term, doc"
            ):
                counts[int(doc)][str(term)] = int(n)
            self._conn.execute("INSERT INTO tok(tok) VALUES ('delete-all')")
            return [(doc_id, counts[doc_id], sum(counts[doc_id].values())) for doc_id, _ in rows]

        return _guarded("tokenize text for the keyword index", run)

    def tokens(self, texts: list[str]) -> list[list[str]]:
        def run() -> list[list[str]]:
            self._conn.executemany(
                "INSERT INTO tok(rowid, text) VALUES (?, ?)", list(enumerate(texts, start=1))
            )
            out: list[list[str]] = [[] for _ in texts]
            for term, doc in self._conn.execute(
                "SELECT term, doc FROM tok_vocab ORDER BY doc, offset"
            ):
                out[int(doc) - 1].append(str(term))
            self._conn.execute("INSERT INTO tok(tok) VALUES ('delete-all')")
            return out

        return _guarded("tokenize query terms", run)

    def close(self) -> None:
        self._conn.close()


def _ensure_vocab(conn: sqlite3.Connection, vocab: str, table: str, kind: str) -> None:
    """Create this connection's fts5vocab table over ``table`` (temp: never in the file)."""
    try:
        conn.execute(f"SELECT 1 FROM {vocab} LIMIT 0")
        return
    except connection.ERRORS:  # no such table yet (an encrypted store's driver has its own)
        pass
    query_only = bool(conn.execute("PRAGMA query_only").fetchone()[0])
    if query_only:  # a reader: a temp table is no write to the store
        conn.execute("PRAGMA query_only = OFF")
    try:
        conn.execute(
            f"CREATE VIRTUAL TABLE IF NOT EXISTS {vocab} USING fts5vocab(main, {table}, {kind})"
        )
    finally:
        if query_only:
            conn.execute("PRAGMA query_only = ON")


def _as_bytes(value: Any) -> bytes:
    return (
        bytes(value) if isinstance(value, (bytes, bytearray, memoryview)) else str(value).encode()
    )


def _decode_averages(block: bytes) -> tuple[int, int]:
    """FTS5's averages record: varint row count, then varint token total per column (summed:
    bm25 measures a row over all its columns)."""
    if not block:
        return 0, 0
    rows, at = _varint(block, 0)
    return rows, _varint_sum(block, at)


def _varint_sum(block: bytes, at: int = 0) -> int:
    """The sum of the varints from ``at`` on (a docsize record: one per column)."""
    if len(block) == 1 and at == 0 and block[0] < 0x80:
        return block[0]  # one short column: nearly every chunk
    total = 0
    while at < len(block):
        value, at = _varint(block, at)
        total += value
    return total


def _varint(block: bytes, at: int) -> tuple[int, int]:
    """SQLite's varint: 7 bits a byte, high bit set to continue; the 9th byte has 8 bits."""
    value = 0
    for i in range(9):
        byte = block[at + i]
        if i == 8:
            return (value << 8) | byte, at + 9
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            return value, at + i + 1
    raise ValueError("bad varint")


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


if TYPE_CHECKING:  # mypy proves the class implements the interface

    def _implements(conn: sqlite3.Connection) -> PostingRows:
        return SqlitePostingRows(conn)
