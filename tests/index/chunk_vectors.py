"""Shared by the vector index's tests: a store file bulk-loaded with known vectors through
the test's own connection (``tests.rows``), the brute-force reference, and a bare
``VectorIndex`` over a storage database opened directly."""

from __future__ import annotations

import sqlite3
from typing import Any

import numpy as np
import pytest

from elastimem.config import ElastimemConfig
from elastimem.index import ann as ann_module
from elastimem.index.vectors import VectorIndex
from elastimem.retrieval.rank import Filters
from elastimem.storage.sqlite import database as db_module
from tests import rows as raw

LABEL = "host"
NO_FILTERS = Filters()


# -- a bulk-loaded store ----------------------------------------------------------------------


def unit_rows(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    rows = rng.standard_normal((n, dim)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def add_chunks(
    database: db_module.Database,
    vectors: np.ndarray,
    *,
    sessions: int = 4,
    label: str = LABEL,
    start_day: int = 1,
) -> list[int]:
    """Insert one chunk per vector (spread over ``sessions`` sessions, one day apart)."""
    dim = int(vectors.shape[1])
    ids: list[int] = []
    with raw.connect(database) as conn:
        session_ids = []
        for s in range(sessions):
            at = f"2025-01-{start_day + s:02d}T10:00:00.000000Z"
            sid = conn.execute("INSERT INTO sessions (started_at) VALUES (?)", (at,)).lastrowid
            conn.execute(
                "INSERT INTO messages (session_id, turn, role, content, created_at) "
                "VALUES (?, 1, 'user', 'x', ?)",
                (sid, at),
            )
            session_ids.append(int(sid or 0))
        seq = meta_int(conn, "vectors.seq")
        for i, vector in enumerate(vectors):
            sid = session_ids[i % sessions]
            msg = conn.execute(
                "SELECT min(id) FROM messages WHERE session_id = ?", (sid,)
            ).fetchone()[0]
            created = (
                f"2025-01-{start_day + i % sessions:02d}T10:{i // 60 % 60:02d}:{i % 60:02d}.000000Z"
            )
            seq += 1
            cur = conn.execute(
                "INSERT INTO chunks (session_id, first_msg_id, last_msg_id, text, created_at, "
                "embedding, embedding_model, embedding_dim, embed_seq) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    sid,
                    msg,
                    msg,
                    f"chunk {i}",
                    created,
                    np.asarray(vector, "<f4").tobytes(),
                    label,
                    dim,
                    seq,
                ),
            )
            ids.append(int(cur.lastrowid or 0))
        set_meta(conn, "vectors.seq", seq)
        set_meta(conn, f"embedder.{label}.dim", dim)
    return ids


def chunk_where(filters: Filters) -> tuple[str, list[object]]:
    """The session and time filters as SQL, for the reference scan."""
    clauses: list[str] = []
    params: list[object] = []
    if filters.exclude_session is not None:
        clauses.append("c.session_id <> ?")
        params.append(filters.exclude_session)
    if filters.since is not None:
        clauses.append("c.created_at >= ?")
        params.append(filters.since)
    if filters.until is not None:
        clauses.append("c.created_at < ?")
        params.append(filters.until)
    return "".join(f" AND {c}" for c in clauses), params


def reference(
    database: db_module.Database,
    query: np.ndarray,
    n: int,
    filters: Filters = NO_FILTERS,
    label: str = LABEL,
) -> list[tuple[int, float]]:
    """Brute force: every current row, filters in SQL, float64 scores, (-score, -id)."""
    where, params = chunk_where(filters)
    rows = raw.rows(
        database,
        "SELECT c.id, c.embedding FROM chunks c WHERE c.embedding_model = ? "
        f"AND c.embedding_dim = ?{where}",
        (label, int(query.shape[0]), *params),
    )
    scored = []
    for cid, blob in rows:
        vector = np.frombuffer(blob, "<f4").astype(np.float64)
        scored.append((int(cid), float(np.add.reduce(vector * query.astype(np.float64)))))
    scored.sort(key=lambda item: (-item[1], -item[0]))
    return scored[:n]


def index_for(database: db_module.Database, **config: Any) -> VectorIndex:
    return VectorIndex(database, ElastimemConfig(**config))


def search(
    index: VectorIndex,
    database: db_module.Database,
    query: np.ndarray,
    n: int,
    filters: Filters = NO_FILTERS,
    label: str = LABEL,
) -> list[tuple[int, float]]:
    with database.read() as conn:
        return index.search(conn, query, label, filters, n)


needs_usearch = pytest.mark.skipif(
    not ann_module.usearch_available(), reason="the vec extra (usearch) is not installed"
)


# -- the meta counters, on the test's own connection -----------------------------------------


def meta_int(conn: sqlite3.Connection, key: str) -> int:
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return int(row[0]) if row else 0


def set_meta(conn: sqlite3.Connection, key: str, value: object) -> None:
    # On PostgreSQL (tests.rows' connection) meta's key is per user.
    unique = "key" if isinstance(conn, sqlite3.Connection) else "user_id, key"
    conn.execute(
        "INSERT INTO meta (key, value) VALUES (?, ?) "
        f"ON CONFLICT({unique}) DO UPDATE SET value = excluded.value",
        (key, str(value)),
    )


def bump(conn: sqlite3.Connection, key: str) -> None:
    """What a delete or re-embed does to ``vectors.gen`` (in the same transaction)."""
    set_meta(conn, key, meta_int(conn, key) + 1)
