"""The vector leg searched by the database (PostgreSQL with pgvector): exact by pgvector's
distance, or through the operator's HNSW index; either way the rows fetched are re-scored
exactly from their stored bytes, so ids and scores are those of the in-process search.
``VectorIndex`` decides when (``vector_backend``, see index/vectors.py)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import numpy as np

from .vector_hits import (
    ANN_MIN_FETCH,
    ANN_OVERFETCH,
    Filters,
    VectorHits,
    best,
    exact_scores,
    read_decoded,
)

if TYPE_CHECKING:
    from ..storage.tx import Tx

# In the database (PostgreSQL with pgvector, see nearest_exact): rows fetched beyond the n
# needed, so that the server's float32 distances rarely leave the cut in doubt.
IN_DATABASE_EXTRA_ROWS = 16
# pgvector's HNSW walk: its candidate list (hnsw.ef_search), at least the over-fetch of the
# HNSW query above and at most pgvector's limit 1000. Tuned on benchmarks/pgvector.py (one
# user of 100k synthetic 384-dim exchanges among 110k rows, pgvector 0.6.2, m=16,
# ef_construction=64): recall@10 against the exact top 10 was 0.904 at 200, 0.972 at 400 and
# 0.999 at 1000 (143 ms p50 against 221 ms for the exact scan): only 1000 meets the 0.98 goal
# of §4.4.
PGVECTOR_MIN_EF_SEARCH = 1000
PGVECTOR_MAX_EF_SEARCH = 1000


def _pgvector_margin(dim: int) -> float:
    """A bound on how far pgvector's cosine (float32 sums of the product and both norms,
    divided in float64) may stray from :func:`exact_scores` for unit float32 vectors: about
    dim·2⁻²⁴ for the product, as much again for each norm's effect, doubled for safety."""
    return 8.0 * dim * 2.0**-24 + 1e-7


def _in_database_hits(
    conn: Tx, label: str, dim: int, ids: np.ndarray, scores: np.ndarray
) -> list[tuple[int, float]]:
    hits = [(int(i), float(s)) for i, s in zip(ids, scores)]
    return VectorHits(hits, functools.partial(read_decoded, conn, label, dim))


def nearest_exact(
    conn: Tx, query: np.ndarray, label: str, dim: int, filters: Filters, n: int
) -> list[tuple[int, float]]:
    """The exact top ``n`` from the database's ordering: the nearest ``n`` + a few by its
    distance, re-scored from their stored vectors as every backend scores. Every row not
    fetched lies at least as far as the last one fetched, so its exact score is at most
    ``1 - that distance + margin``; while that could still reach the n-th score, fetch more.
    Results are those of the resident search, ids and scores."""
    limit = n + IN_DATABASE_EXTRA_ROWS
    margin = _pgvector_margin(dim)
    # pgvector divides by the query's length, the exact score does not (a unit query: 1).
    length = float(np.sqrt(np.add.reduce(np.asarray(query, dtype=np.float64) ** 2)))
    while True:
        ids, distances, vectors = conn.vectors.nearest(
            label,
            dim,
            query,
            limit,
            exclude_session=filters.exclude_session,
            since=filters.since,
            until=filters.until,
        )
        best_ids, best_scores = best(ids, exact_scores(vectors, query), n)
        if ids.size < limit:
            break  # every row passing the filters was fetched
        bound = length * (1.0 - float(distances[-1]) + margin)  # of any row not fetched
        if best_scores.size == n and bound < best_scores[-1]:
            break
        limit *= 4
    return _in_database_hits(conn, label, dim, best_ids, best_scores)


def nearest_hnsw(
    conn: Tx, query: np.ndarray, label: str, dim: int, filters: Filters, n: int
) -> list[tuple[int, float]] | None:
    """The top ``n`` of the candidates pgvector's HNSW index finds (over-fetched as the
    in-process HNSW query does), re-scored exactly; None when it finds fewer than ``n``
    (pgvector before 0.8 filters the user's rows after its walk, so a user holding a small
    share of the index, or strict filters, leave too few): then the exact search answers."""
    fetch = max(ANN_OVERFETCH * n, ANN_MIN_FETCH)
    ef_search = min(max(fetch, PGVECTOR_MIN_EF_SEARCH), PGVECTOR_MAX_EF_SEARCH)
    ids, _distances, vectors = conn.vectors.nearest(
        label,
        dim,
        query,
        fetch,
        exclude_session=filters.exclude_session,
        since=filters.since,
        until=filters.until,
        ef_search=ef_search,
    )
    if ids.size < n:
        return None
    best_ids, best_scores = best(ids, exact_scores(vectors, query), n)
    return _in_database_hits(conn, label, dim, best_ids, best_scores)
