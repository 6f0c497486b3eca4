"""The keyword terms of rows written to PostgreSQL (``schema.KEYWORD_DOC``).

BM25 must rank alike on both backends, so a row's terms are those SQLite's FTS5 makes with
the store's tokenizer (``storage.sqlite.fts.FTS_TOKENIZER``): the text is run through a
private in-memory FTS5 table and its ``fts5vocab`` instances counted, as ``index.keyword``
tokenises appended chunks. The families that insert chunks and facts write these postings
(``chunk_terms`` / ``fact_terms``) and the row's ``term_count`` in the same transaction.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Sequence

from ...errors import StoreError
from ..sqlite.fts import FTS_TOKENIZER

# (term -> frequency, length in tokens) of one text.
Terms = tuple[dict[str, int], int]

_lock = threading.Lock()
_conn: sqlite3.Connection | None = None


def _forget_after_fork() -> None:
    # A forked child may inherit the lock held by another thread of its parent: it makes
    # its own lock and tokenizer.
    global _lock, _conn
    _lock = threading.Lock()
    _conn = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


def _tokenizer() -> sqlite3.Connection:
    global _conn
    if _conn is None:
        conn = sqlite3.connect(":memory:", check_same_thread=False)
        try:
            conn.execute(
                f"CREATE VIRTUAL TABLE tok USING fts5(text, content='', tokenize='{FTS_TOKENIZER}')"
            )
            conn.execute("CREATE VIRTUAL TABLE tok_vocab USING fts5vocab(tok, instance)")
        except sqlite3.Error as exc:
            conn.close()
            raise StoreError(
                "PostgreSQL stores tokenise keyword terms with SQLite's FTS5, which this "
                f"Python's sqlite3 lacks ({exc}); use a Python whose SQLite has FTS5"
            ) from exc
        _conn = conn
    return _conn


def terms_of(texts: Sequence[str]) -> list[Terms]:
    """(term -> frequency, length in tokens) of each text, in order."""
    if not texts:
        return []
    with _lock:
        conn = _tokenizer()
        conn.executemany(
            "INSERT INTO tok(rowid, text) VALUES (?, ?)",
            [(n, text) for n, text in enumerate(texts, start=1)],
        )
        counts: list[dict[str, int]] = [{} for _ in texts]
        try:
            for term, doc, n in conn.execute(
                "SELECT term, doc, count(*) FROM tok_vocab GROUP BY term, doc"
            ):
                counts[int(doc) - 1][str(term)] = int(n)
        finally:
            conn.execute("INSERT INTO tok(tok) VALUES ('delete-all')")
    return [(found, sum(found.values())) for found in counts]


def token_lists(texts: Sequence[str]) -> list[list[str]]:
    """The tokens of each text in order (what an FTS5 phrase query matches against)."""
    if not texts:
        return []
    with _lock:
        conn = _tokenizer()
        conn.executemany(
            "INSERT INTO tok(rowid, text) VALUES (?, ?)",
            [(n, text) for n, text in enumerate(texts, start=1)],
        )
        out: list[list[str]] = [[] for _ in texts]
        try:
            for term, doc in conn.execute("SELECT term, doc FROM tok_vocab ORDER BY doc, offset"):
                out[int(doc) - 1].append(str(term))
        finally:
            conn.execute("INSERT INTO tok(tok) VALUES ('delete-all')")
    return out


def holds_phrase(tokens: Sequence[str], phrase: Sequence[str]) -> bool:
    """Whether ``phrase`` occurs in ``tokens`` as consecutive tokens."""
    width = len(phrase)
    if not width:
        return False
    first = phrase[0]
    return any(
        tokens[i] == first and list(tokens[i : i + width]) == list(phrase)
        for i in range(len(tokens) - width + 1)
    )


def fact_text(key: str, value: str) -> str:
    """A fact's keyword text: key and value counted together, as FTS5 counts a row of the
    two columns (its tokenizer splits on the space)."""
    return f"{key} {value}"


def posting_rows(
    ids: Sequence[int], terms: Sequence[Terms]
) -> tuple[list[str], list[int], list[int]]:
    """The postings of rows ``ids`` with ``terms`` as three parallel lists (term, row id,
    frequency), for one ``unnest`` insert."""
    words: list[str] = []
    rows: list[int] = []
    freqs: list[int] = []
    for row_id, (found, _length) in zip(ids, terms, strict=True):
        for word, tf in found.items():
            words.append(word)
            rows.append(int(row_id))
            freqs.append(tf)
    return words, rows, freqs
