"""The vector side of recall: which embedder is active, and the in-memory index (SPEC §4.4).

``EmbeddingSource`` hides whether vectors come from the host's ``embedder`` (label ``host``)
or the built-in model (label ``elastimem:…``), validates every result, records the active
dimension, caches query vectors and marks a host embedder failed after 3 straight failures.

``VectorIndex`` is the numpy backend: a float32 matrix of the L2-normalised vectors whose
label *and* dimension match the active embedder, with parallel arrays of chunk id, session id
and creation time. It stays in sync with the table through two meta counters: every vector
write bumps ``vectors.seq`` and stamps ``chunks.embed_seq``; every delete or re-embed bumps
``vectors.gen``. Before each query a changed ``gen`` means a full reload and a higher ``seq``
means loading only the newer rows. At LITE the matrix is freed and the same search streams
4096-row blocks from SQLite, with identical results.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .config import ElastimemConfig
from .db import Database, get_meta, get_meta_int
from .embedders import HOST_LABEL, BuiltinEmbedder, QueryVectorCache, to_unit_matrix, to_unit_vector
from .retrieval import Filters

logger = logging.getLogger("elastimem")

STREAM_BLOCK_ROWS = 4096
# Grow the matrix by 1/8 at a time: appends stay amortised O(1) while the buffer never
# holds more than ~1.125 × the live rows (the 1.2 × N × dim × 4 bytes memory target).
GROWTH_FACTOR = 1.125
MIN_GROWTH_ROWS = 1024
HOST_FAILURES_BEFORE_GIVING_UP = 3
_TS_DTYPE = "S27"  # the fixed-width canonical timestamp, compared as bytes


class EmbeddingSource:
    """The active embedder, host or built-in, behind one validated interface."""

    def __init__(
        self,
        host_embed: Callable[[list[str]], Any] | None,
        host_query: Callable[[str], Any] | None,
        builtin: BuiltinEmbedder | None,
    ) -> None:
        self.host_embed = host_embed
        self.host_query = host_query
        self.builtin = builtin
        self._host_failures = 0
        self._host_failed = False
        self._warned = False
        self.dims: dict[str, int] = {}
        self.query_cache = QueryVectorCache()

    @property
    def is_host(self) -> bool:
        return self.host_embed is not None or (self.host_query is not None and self.builtin is None)

    @property
    def configured(self) -> bool:
        return self.host_embed is not None or self.host_query is not None or self.builtin is not None

    def state(self) -> str:
        """``none | not_loaded | loading | ready | failed`` for ``stats()``."""
        if self.host_embed is not None:
            return "failed" if self._host_failed else "ready"
        if self.builtin is not None:
            return self.builtin.state
        return "none"

    @property
    def label(self) -> str | None:
        if self.host_embed is not None:
            return HOST_LABEL
        if self.builtin is not None:
            return self.builtin.label
        return None

    @property
    def failed(self) -> bool:
        return self.state() == "failed"

    def resident(self) -> bool:
        """An embedder that can answer now without loading anything."""
        return self.state() == "ready"

    def can_embed_passages(self) -> bool:
        """Worth queueing embed jobs: a usable host embedder, or a built-in not yet failed."""
        if self.host_embed is not None:
            return not self._host_failed
        return self.builtin is not None and self.builtin.state != "failed"

    # -- passages ----------------------------------------------------------------------------

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        """Unit float32 rows for ``texts``; raises on any invalid output (call off-lock)."""
        if self.host_embed is not None:
            try:
                matrix = to_unit_matrix(self.host_embed(list(texts)), len(texts))
            except Exception:
                self._host_failures += 1
                if self._host_failures >= HOST_FAILURES_BEFORE_GIVING_UP and not self._host_failed:
                    self._host_failed = True
                    logger.warning(
                        "the host embedder failed %d times in a row; semantic recall is off "
                        "for this instance and its chunks stay unembedded until a reopen",
                        self._host_failures,
                    )
                raise
            self._host_failures = 0
        elif self.builtin is not None and self.builtin.state == "ready":
            matrix = self.builtin.embed(texts)
        else:
            raise RuntimeError("no embedder is ready")
        return matrix

    def record_dim(self, label: str, dim: int) -> None:
        self.dims[label] = dim

    # -- queries -----------------------------------------------------------------------------

    def query_vector(self, text: str, dim: int | None) -> np.ndarray | None:
        """The query's unit vector, or None when it cannot be had now (§5.13)."""
        label = self.label
        if label is None or not self.resident():
            return None
        cached = self.query_cache.get(label, dim, text)
        if cached is not None:
            return cached
        raw: Any
        if self.host_query is not None:
            raw = self.host_query(text)
        elif self.host_embed is not None:
            raw = self.host_embed([text])
        elif self.builtin is not None:
            raw = self.builtin.embed_query(text)
        else:
            return None
        vector = to_unit_vector(raw, dim=dim)
        if vector is not None:
            self.query_cache.put(label, dim, text, vector)
        return vector


class VectorIndex:
    """Exact top-k over the active label's vectors, in memory or streamed at LITE."""

    def __init__(self, db: Database, config: ElastimemConfig) -> None:
        self._db = db
        self._config = config
        self._lock = threading.Lock()
        self._streaming = False
        self._reset(None, None)

    def set_config(self, config: ElastimemConfig) -> None:
        self._config = config

    def set_streaming(self, streaming: bool) -> None:
        with self._lock:
            if streaming and not self._streaming:
                self._reset(None, None)  # free the matrix
            self._streaming = streaming

    def _reset(self, label: str | None, dim: int | None) -> None:
        self._label = label
        self._dim = dim
        self._gen = -1
        self._seq = -1
        self._count = 0
        self._matrix = np.zeros((0, dim or 0), dtype=np.float32)
        self._ids = np.zeros(0, dtype=np.int64)
        self._sessions = np.zeros(0, dtype=np.int64)
        self._created = np.zeros(0, dtype=_TS_DTYPE)
        self._row_of: dict[int, int] = {}

    def backend_name(self) -> str:
        """``numpy`` (resident matrix) or ``numpy-stream`` (LITE: streamed blocks)."""
        return "numpy-stream" if self._streaming else "numpy"

    @property
    def resident_rows(self) -> int:
        return self._count

    @property
    def resident_bytes(self) -> int:
        return int(self._matrix.nbytes + self._ids.nbytes + self._sessions.nbytes
                   + self._created.nbytes)  # fmt: skip

    # -- sync --------------------------------------------------------------------------------

    def _sync(self, conn: sqlite3.Connection, label: str, dim: int) -> None:
        gen = get_meta_int(conn, "vectors.gen")
        seq = get_meta_int(conn, "vectors.seq")
        if label != self._label or dim != self._dim or gen != self._gen:
            self._reset(label, dim)
            self._load_rows(conn, label, dim, after_seq=None)
            self._gen, self._seq = gen, seq
        elif seq > self._seq:
            self._load_rows(conn, label, dim, after_seq=self._seq)
            self._seq = seq

    def _load_rows(
        self, conn: sqlite3.Connection, label: str, dim: int, after_seq: int | None
    ) -> None:
        sql = (
            "SELECT id, session_id, created_at, embedding FROM chunks "
            "WHERE embedding_model = ? AND embedding_dim = ? AND embedding IS NOT NULL"
        )
        params: list[object] = [label, dim]
        if after_seq is not None:
            sql += " AND embed_seq > ?"
            params.append(after_seq)
        cursor = conn.execute(sql + " ORDER BY id", params)
        while True:
            rows = cursor.fetchmany(STREAM_BLOCK_ROWS)
            if not rows:
                break
            self._upsert(rows, dim)

    def _upsert(self, rows: Sequence[tuple[Any, ...]], dim: int) -> None:
        vectors = _blobs_to_matrix([r[3] for r in rows], dim)
        for i, row in enumerate(rows):
            chunk_id = int(row[0])
            position = self._row_of.get(chunk_id)
            if position is None:
                position = self._append_slot()
                self._row_of[chunk_id] = position
                self._ids[position] = chunk_id
            self._matrix[position] = vectors[i]
            self._sessions[position] = int(row[1])
            self._created[position] = str(row[2]).encode("ascii", "replace")[:27]

    def _append_slot(self) -> int:
        if self._count == self._matrix.shape[0]:
            capacity = max(self._count + MIN_GROWTH_ROWS, int(self._count * GROWTH_FACTOR))
            self._matrix = _grow(self._matrix, capacity)
            self._ids = _grow(self._ids, capacity)
            self._sessions = _grow(self._sessions, capacity)
            self._created = _grow(self._created, capacity)
        self._count += 1
        return self._count - 1

    # -- search ------------------------------------------------------------------------------

    def search(
        self,
        conn: sqlite3.Connection,
        query: np.ndarray,
        label: str,
        filters: Filters,
        n: int,
    ) -> list[tuple[int, float]]:
        """Top ``n`` chunks by cosine among rows passing ``filters``, ordered (−score, id)."""
        dim = int(query.shape[0])
        with self._lock:
            if self._streaming:
                return self._search_streaming(conn, query, label, dim, filters, n)
            self._sync(conn, label, dim)
            count = self._count
            if count == 0:
                return []
            scores = self._matrix[:count] @ query
            mask = _filter_mask(self._sessions[:count], self._created[:count], filters)
            return _top_n(scores, self._ids[:count], mask, n)

    def _search_streaming(
        self,
        conn: sqlite3.Connection,
        query: np.ndarray,
        label: str,
        dim: int,
        filters: Filters,
        n: int,
    ) -> list[tuple[int, float]]:
        best_ids = np.zeros(0, dtype=np.int64)
        best_scores = np.zeros(0, dtype=np.float32)
        cursor = conn.execute(
            "SELECT id, session_id, created_at, embedding FROM chunks "
            "WHERE embedding_model = ? AND embedding_dim = ? AND embedding IS NOT NULL "
            "ORDER BY id",
            (label, dim),
        )
        while True:
            rows = cursor.fetchmany(STREAM_BLOCK_ROWS)
            if not rows:
                break
            ids = np.fromiter((int(r[0]) for r in rows), dtype=np.int64, count=len(rows))
            sessions = np.fromiter((int(r[1]) for r in rows), dtype=np.int64, count=len(rows))
            created = np.array([str(r[2]).encode("ascii", "replace")[:27] for r in rows],
                               dtype=_TS_DTYPE)  # fmt: skip
            scores = _blobs_to_matrix([r[3] for r in rows], dim) @ query
            mask = _filter_mask(sessions, created, filters)
            block = _top_n(scores, ids, mask, n)
            if block:
                best_ids = np.concatenate([best_ids, [b[0] for b in block]])
                best_scores = np.concatenate(
                    [best_scores, np.array([b[1] for b in block], dtype=np.float32)]
                )
                keep = _top_n(best_scores, best_ids, np.ones(len(best_ids), bool), n)
                best_ids = np.array([b[0] for b in keep], dtype=np.int64)
                best_scores = np.array([b[1] for b in keep], dtype=np.float32)
        return [(int(i), float(s)) for i, s in zip(best_ids, best_scores)]


def _grow(array: np.ndarray, capacity: int) -> np.ndarray:
    shape = (capacity, *array.shape[1:])
    grown = np.zeros(shape, dtype=array.dtype)
    grown[: array.shape[0]] = array
    return grown


def _blobs_to_matrix(blobs: Sequence[bytes], dim: int) -> np.ndarray:
    joined = b"".join(bytes(b) for b in blobs)
    return np.frombuffer(joined, dtype="<f4").reshape(len(blobs), dim).astype(np.float32)


def _filter_mask(sessions: np.ndarray, created: np.ndarray, filters: Filters) -> np.ndarray:
    mask = np.ones(sessions.shape[0], dtype=bool)
    if filters.exclude_session is not None:
        mask &= sessions != filters.exclude_session
    if filters.since is not None:
        mask &= created >= filters.since.encode("ascii")
    if filters.until is not None:
        mask &= created < filters.until.encode("ascii")
    return mask


def _top_n(
    scores: np.ndarray, ids: np.ndarray, mask: np.ndarray, n: int
) -> list[tuple[int, float]]:
    """The best ``n`` (id, score) among masked rows, ordered by (−score, id)."""
    valid = np.flatnonzero(mask)
    if valid.size == 0 or n <= 0:
        return []
    candidate_scores = scores[valid]
    if valid.size > n:
        # Take a few extra past the cut so that ties at the boundary are decided by id.
        part = np.argpartition(-candidate_scores, n - 1)[:n]
        threshold = candidate_scores[part].min()
        part = np.flatnonzero(candidate_scores >= threshold)
        valid, candidate_scores = valid[part], candidate_scores[part]
    order = np.lexsort((ids[valid], -candidate_scores))[:n]
    return [(int(ids[valid[i]]), float(candidate_scores[i])) for i in order]


def write_vectors(
    conn: sqlite3.Connection, chunk_ids: list[int], matrix: np.ndarray, label: str
) -> int:
    """Store unit vectors for chunks (inside ``atomic()``); bumps ``vectors.seq``/``gen``."""
    from .db import bump_meta, set_meta

    dim = int(matrix.shape[1])
    seq = get_meta_int(conn, "vectors.seq")
    replaced = False
    written = 0
    for chunk_id, vector in zip(chunk_ids, matrix):
        row = conn.execute(
            "SELECT embedding IS NOT NULL FROM chunks WHERE id = ?", (chunk_id,)
        ).fetchone()
        if row is None:
            continue  # erased meanwhile
        replaced = replaced or bool(row[0])
        seq += 1
        conn.execute(
            "UPDATE chunks SET embedding = ?, embedding_model = ?, embedding_dim = ?, "
            "embed_seq = ? WHERE id = ?",
            (np.asarray(vector, dtype="<f4").tobytes(), label, dim, seq, chunk_id),
        )
        written += 1
    set_meta(conn, "vectors.seq", seq)
    if get_meta(conn, f"embedder.{label}.dim") != str(dim):
        set_meta(conn, f"embedder.{label}.dim", dim)
    if replaced:
        bump_meta(conn, "vectors.gen")
    return written
