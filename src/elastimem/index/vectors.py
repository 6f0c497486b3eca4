"""The vector index of recall (SPEC §4.4). The active embedder is ``embedding_source.py``;
what the embed job embeds and writes is ``vector_writes.py``; rows are read through
``tx.vectors``.

``VectorIndex`` answers "the top n chunks by cosine", considering only rows whose label
*and* dimension match the active embedder:

* **numpy** (the default and the reference): the L2-normalised vectors held as two-level
  int8 codes (``quantized.py``: about half the bytes of float32), with parallel arrays of
  chunk id, session id and creation time, loaded lazily. It stays in sync with the table
  through two meta counters: every vector write bumps ``vectors.seq`` and stamps
  ``chunks.embed_seq``; every delete or re-embed bumps ``vectors.gen``. Before each query a
  changed ``gen`` means a full reload and a higher ``seq`` means loading only the rows
  with a newer ``embed_seq``.
* **numpy-stream** (LITE): the matrix is freed and each query streams 4096-row blocks from
  SQLite instead, with identical results.
* **hnsw** (extra ``vec``, ``ann.py``): used when ``vector_backend="hnsw"``, or ``"auto"``
  with at least ``ann_min_rows`` current vectors. Candidates are over-fetched from the graph,
  looked up in the resident rows (kept in sync as above, so the graph never has the last
  word on what exists) and re-scored exactly; while the graph is (re)built on the worker,
  numpy answers alone. The graph is persisted in ``ann_index`` (see ``ann.py``).
* **pgvector** / **pgvector-hnsw** (PostgreSQL with the ``vector`` extension): the database
  searches and no rows are held here. ``vector_backend="pgvector"`` always; ``"auto"`` and
  ``"hnsw"`` where the operator's HNSW index of that size answers in place of the graph above.
  Candidates come by pgvector's distance and are re-scored exactly from the stored bytes.

Scores are exact and identical across backends: the codes' proven error bounds pick the
candidates (the LITE stream: a float32 product with a margin that covers its rounding),
then :func:`exact_scores` re-scores them from the stored float32 vectors in float64, row by
row, independently of where a row sits in memory. Results are ordered by ``(-score, -id)``:
a tie at the cut goes to the higher (newer) id, as in every leg of §5.6.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable

import numpy as np

from ..config import ElastimemConfig
from ..storage.database import Database
from ..storage.tx import Tx
from ..storage.vectors import CREATED_DTYPE
from . import ann as ann_module
from . import in_database, quantized
from .embedding_source import EmbeddingSource as EmbeddingSource  # callers import it here
from .exact_cache import ExactVectorCache
from .scan import RowScorer, candidates, row_scores
from .vector_hits import ANN_MIN_FETCH, ANN_OVERFETCH, best, read_decoded

# Callers import these here.
from .vector_hits import Filters as Filters
from .vector_hits import VectorHits as VectorHits
from .vector_hits import exact_scores as exact_scores
from .vector_writes import PASSAGE_CONTEXT_CHARS as PASSAGE_CONTEXT_CHARS
from .vector_writes import passage_texts as passage_texts
from .vector_writes import write_vectors as write_vectors

logger = logging.getLogger("elastimem")


STREAM_BLOCK_ROWS = 4096
# Grow the matrix by 1/8 at a time: appends stay amortised O(1) while the buffer never
# holds more than ~1.125 × the live rows (the 1.2 × N × dim × 4 bytes memory target); a
# full reload allocates the exact size.
GROWTH_FACTOR = 1.125
MIN_GROWTH_ROWS = 1024
_TS_DTYPE = CREATED_DTYPE  # the fixed-width canonical timestamp, compared as bytes

# HNSW query (§4.4): over-fetch max(4k, 64) candidates, doubling while the filters leave
# fewer than k; past this share of the index an exact filtered scan is cheaper.
ANN_MAX_FETCH_SHARE = 0.25
# Persist the in-memory graph again once this many rows were added since the snapshot
# (or 10% of it, if more): a reopen then has little to add.
ANN_RESAVE_MIN_ROWS = 10_000

# How long the list of the database's HNSW indexes is trusted (a catalog query otherwise
# on every search); an index an operator creates is used within this many seconds.
HNSW_DIMS_TTL_SECONDS = 60.0


def _margin(dim: int) -> float:
    """Twice the worst float32 rounding of a unit-vector dot product (γ_dim ≈ dim·2⁻²⁴)."""
    return 2.0 * dim * 2.0**-24 + 1e-9


class VectorIndex:
    """Top-k by cosine over the active label's vectors: numpy, streamed, or HNSW."""

    def __init__(self, db: Database, config: ElastimemConfig) -> None:
        self._db = db
        self._config = config
        self._lock = threading.Lock()
        self._streaming = False
        self._submit: Callable[[Callable[[], None]], None] | None = None
        self._warned_no_usearch = False
        self._count_key: tuple[str, int, int] | None = None  # (label, dim, gen) of the count
        self._count_seq = -1
        self._current_rows = 0
        self._ann: ann_module.AnnIndex | None = None
        self._ann_building = False
        self._ann_failed: set[tuple[str, int]] = set()
        self._snapshot_tried: set[tuple[str, int, int]] = set()
        self._stale_checked: set[tuple[str, int]] = set()
        self._scorer = RowScorer()
        self._in_database_path: str | None = None  # how the last in-database search ran
        self._hnsw_dims: tuple[float, frozenset[int]] | None = None  # (read at, dims)
        self._reset(None, None)

    def close(self) -> None:
        """End the scan's helper threads (a later search scans on the calling thread)."""
        self._scorer.close()

    def set_config(self, config: ElastimemConfig) -> None:
        self._config = config

    def attach_worker(self, submit: Callable[[Callable[[], None]], None] | None) -> None:
        """Where HNSW builds and snapshot writes run (the store's worker)."""
        self._submit = submit

    def drop(self) -> None:
        """Free the resident rows and the graph (the active model went away); the next
        search loads what it needs again."""
        with self._lock:
            self._reset(None, None)
            self._ann = None
            self._snapshot_tried.clear()

    def set_streaming(self, streaming: bool) -> None:
        with self._lock:
            if streaming and not self._streaming:
                self._reset(None, None)  # free the matrix
                self._ann = None  # and the graph: LITE means little memory
                self._snapshot_tried.clear()  # reload the stored graph when back
            self._streaming = streaming

    def _reset(self, label: str | None, dim: int | None) -> None:
        self._label = label
        self._dim = dim
        self._gen = -1
        self._seq = -1
        self._count = 0
        self._max_id = 0
        self._codes = quantized.empty_codes(dim or 0)
        self._largest_coarse_error = 0.0  # the coarse bound's worst row (see quantized.py)
        self._ids = np.zeros(0, dtype=np.int64)
        self._sessions = np.zeros(0, dtype=np.int64)
        self._created = np.zeros(0, dtype=_TS_DTYPE)
        # Row of each chunk id (-1: not held): lookups for re-embeds and HNSW candidates.
        self._pos = np.zeros(0, dtype=np.int32)
        # The float32 vectors of the rows re-scored last (dropped with everything else on
        # a reload, see exact_cache.py).
        self._exact = ExactVectorCache(dim or 0)

    def backend_name(self) -> str:
        """``numpy``, ``numpy-stream`` (LITE), ``hnsw`` (the graph is answering), or, on
        PostgreSQL with pgvector, ``pgvector`` (exact in the database) or ``pgvector-hnsw``
        (its HNSW index), as the last search ran."""
        if self._in_database_path is not None:
            return self._in_database_path
        if self._streaming:
            return "numpy-stream"
        if self._ann is not None:
            return "hnsw"
        return "numpy"

    @property
    def resident_rows(self) -> int:
        return self._count

    @property
    def resident_bytes(self) -> int:
        """Bytes held by the resident codes and their parallel arrays (0 when freed)."""
        return int(
            sum(array.nbytes for array in self._codes)
            + self._ids.nbytes
            + self._sessions.nbytes
            + self._created.nbytes
            + self._pos.nbytes
            + self._exact.nbytes
        )

    @property
    def ann_bytes(self) -> int:
        ann = self._ann
        return ann.memory_bytes if ann is not None else 0

    # -- numpy: sync -------------------------------------------------------------------------

    def _sync(self, conn: Tx, label: str, dim: int, gen: int, seq: int) -> None:
        if label != self._label or dim != self._dim or gen != self._gen:
            self._warn_if_other_models(conn, label, dim)
            self._reset(label, dim)
            # At worst it over-reserves a few rows.
            self._reserve(conn.vectors.count(label, dim))
            self._load_rows(conn, label, dim, after_seq=None)
            self._gen, self._seq = gen, seq
        elif seq > self._seq:
            self._load_rows(conn, label, dim, after_seq=self._seq)
            self._seq = seq

    def _warn_if_other_models(self, conn: Tx, label: str, dim: int) -> None:
        """Warn once per active ``(label, dim)`` when vectors of another model are stored.

        They are never mixed in (every query filters on label and dimension), so recall
        silently loses their chunks' vector leg until ``reindex()``: say so (a probe, not a
        scan, so it stays cheap at 1M rows).
        """
        if (label, dim) in self._stale_checked:
            return
        self._stale_checked.add((label, dim))
        other = conn.vectors.other_model(label, dim)
        if other is not None:
            logger.warning(
                "this store holds vectors of another embedding model (%s, dim %s); the "
                "vector leg uses only %s (dim %d) and ignores them: run reindex() to "
                "re-embed those chunks",
                other[0],
                other[1],
                label,
                dim,
            )

    def _reserve(self, rows: int) -> None:
        if rows <= self._ids.shape[0]:
            return
        self._codes = quantized.Codes(*(_grow(array, rows) for array in self._codes))
        self._ids = _grow(self._ids, rows)
        self._sessions = _grow(self._sessions, rows)
        self._created = _grow(self._created, rows)

    def _load_rows(self, conn: Tx, label: str, dim: int, after_seq: int | None) -> None:
        for block in conn.vectors.blocks(label, dim, after_seq=after_seq, size=STREAM_BLOCK_ROWS):
            self._upsert(
                block.ids, block.sessions, block.created, block.vectors, fresh=after_seq is None
            )

    def _upsert(
        self,
        ids: np.ndarray,
        sessions: np.ndarray,
        created: np.ndarray,
        vectors: np.ndarray,
        *,
        fresh: bool,
    ) -> None:
        """Append new rows; a row already held (a re-embed that kept ``gen``) is replaced."""
        if ids.size == 0:
            return
        top = int(ids.max())
        if top >= self._pos.shape[0]:
            grown = np.full(max(top + 1, int(self._pos.shape[0] * GROWTH_FACTOR)), -1, np.int32)
            grown[: self._pos.shape[0]] = self._pos
            self._pos = grown
        if not fresh and int(ids.min()) <= self._max_id:
            positions = self._pos[ids]
            known = positions >= 0
            if known.any():
                held = positions[known]
                self._exact.drop(ids[known])  # their stored vectors were replaced
                self._store_codes(held, quantized.encode(vectors[known]))
                self._sessions[held] = sessions[known]
                self._created[held] = created[known]
                keep = ~known
                ids, sessions, created, vectors = (
                    ids[keep],
                    sessions[keep],
                    created[keep],
                    vectors[keep],
                )
        count = ids.size
        if count == 0:
            return
        needed = self._count + count
        if needed > self._ids.shape[0]:
            self._reserve(
                max(needed, self._count + MIN_GROWTH_ROWS, int(self._count * GROWTH_FACTOR))
            )
        end = self._count + count
        self._store_codes(slice(self._count, end), quantized.encode(vectors))
        self._ids[self._count : end] = ids
        self._sessions[self._count : end] = sessions
        self._created[self._count : end] = created
        self._pos[ids] = np.arange(self._count, end, dtype=np.int32)
        self._count = end
        self._max_id = max(self._max_id, int(ids.max()))

    def _store_codes(self, where: np.ndarray | slice, codes: quantized.Codes) -> None:
        for array, new in zip(self._codes, codes):
            array[where] = new
        # Only ever raised: a replaced row's old error may stay the largest, which widens
        # the margin a little and never drops a row (a full reload starts afresh).
        largest = float(codes.coarse_error.max())
        self._largest_coarse_error = max(self._largest_coarse_error, largest)

    # -- search ------------------------------------------------------------------------------

    def search(
        self,
        conn: Tx,
        query: np.ndarray,
        label: str,
        filters: Filters,
        n: int,
    ) -> list[tuple[int, float]]:
        """Top ``n`` chunks by cosine among rows passing ``filters``, ordered (−score, −id)."""
        return self.start_search(conn, query, label, filters, n, beside=False)()

    def start_search(
        self,
        conn: Tx,
        query: np.ndarray,
        label: str,
        filters: Filters,
        n: int,
        *,
        beside: bool = True,
    ) -> Callable[[], list[tuple[int, float]]]:
        """:meth:`search` in two steps: this call starts the exact scan (``beside``: on the
        scan's helper threads when a core is spare) and returns what finishes it, to be
        called exactly once, in the same read snapshot (the caller works meanwhile: recall
        runs its keyword legs).

        The index stays locked from here until the finisher returns, so the rows scanned
        are the rows re-scored; the finisher unlocks it even when it raises.
        """
        query = np.ascontiguousarray(query, dtype=np.float32).reshape(-1)
        dim = int(query.shape[0])
        if n <= 0 or dim == 0:
            return list
        self._lock.acquire()
        try:
            ready = self._answer_now(conn, query, label, dim, filters, n)
            if ready is not None:
                self._lock.release()
                return functools.partial(_hand_over, ready)
            count = self._count
            mask = _filter_mask(self._sessions[:count], self._created[:count], filters)
            coded = quantized.encode_query(query)
            scanning = self._scan(coded, mask, n, beside=beside)
        except BaseException:
            self._lock.release()
            raise
        unlocked = False

        def finish() -> list[tuple[int, float]]:
            nonlocal unlocked
            if unlocked:
                raise RuntimeError("a vector search was finished twice")
            try:
                return self._exact_top(conn, scanning(), query, coded, label, n)
            finally:
                unlocked = True
                self._lock.release()

        return finish

    def _answer_now(
        self,
        conn: Tx,
        query: np.ndarray,
        label: str,
        dim: int,
        filters: Filters,
        n: int,
    ) -> list[tuple[int, float]] | None:
        """The answer when no resident scan is needed (in the database, the LITE stream,
        HNSW, no rows); otherwise None, with the resident rows synced to ``conn``'s
        snapshot."""
        if self._searches_in_database(conn, label, dim):
            return self._search_in_database(conn, query, label, dim, filters, n)
        self._in_database_path = None
        if self._streaming:
            self._warn_if_other_models(conn, label, dim)
            return _search_streaming(conn, query, label, dim, filters, n)
        gen, seq = conn.vectors.counters()
        if self._wants_ann(conn, label, dim, gen, seq):
            found = self._search_ann(conn, query, label, dim, gen, seq, filters, n)
            if found is not None:
                return found
        else:
            self._ann = None
        self._sync(conn, label, dim, gen, seq)
        return [] if self._count == 0 else None

    def _scan(
        self, coded: quantized.QueryCode, mask: np.ndarray | None, n: int, *, beside: bool = False
    ) -> Callable[[], np.ndarray]:
        """Rows the coarse bound cannot rule out of the top ``n`` (a superset of it), from
        the callable returned (see RowScorer.candidates for ``beside``)."""
        coarse, scale = self._codes.coarse, self._codes.coarse_scale

        def score(start: int, end: int) -> np.ndarray:
            return quantized.coarse_scores(coarse[start:end], scale[start:end], coded)

        margin = quantized.coarse_margin(self._largest_coarse_error, coded)
        return self._scorer.candidates(self._count, score, mask, n, margin, beside=beside)

    def _exact_top(
        self,
        conn: Tx,
        rows: np.ndarray,
        query: np.ndarray,
        coded: quantized.QueryCode,
        label: str,
        n: int,
    ) -> list[tuple[int, float]]:
        """The top ``n`` of ``rows`` by exact cosine, ordered ``(-score, -id)``.

        The fine bound narrows the rows to the few that can be in the top ``n``; those are
        re-scored from their float32 vectors: kept from an earlier search, or read from
        their BLOBs in the caller's snapshot (the one the resident rows were synced to, so
        the BLOBs are the vectors the codes came from).
        """
        if rows.size == 0:
            return []
        fine = quantized.fine_scores(self._codes, rows, coded)
        largest = float(self._codes.fine_error[rows].max())
        rows = rows[candidates(fine, None, n, quantized.fine_margin(largest, coded))]
        kept_ids, kept, missing = self._exact.split(self._ids[rows])
        ids, vectors = kept_ids, kept
        if missing.size:
            read_ids, read = conn.vectors.read(label, int(query.shape[0]), missing.tolist())
            self._exact.add(read_ids, read)
            ids, vectors = np.concatenate([kept_ids, read_ids]), np.concatenate([kept, read])
        best_ids, best_scores = best(ids, exact_scores(vectors, query), n)
        hits = [(int(i), float(s)) for i, s in zip(best_ids, best_scores)]
        dim = int(query.shape[0])
        return VectorHits(
            hits,
            functools.partial(self._decoded, label, dim),
            functools.partial(self._within, label, dim, query),
        )

    def _within(
        self, label: str, dim: int, query: np.ndarray, filters: Filters, n: int
    ) -> list[tuple[int, float]]:
        """``VectorHits.within``: the top ``n`` rows passing ``filters`` by cosine with the
        vectors decoded from the coarse codes (within ~0.01 of the exact ones)."""
        with self._lock:
            if (label, dim) != (self._label, self._dim) or n <= 0:
                return []
            count = self._count
            mask = _filter_mask(self._sessions[:count], self._created[:count], filters)
            rows = np.flatnonzero(mask) if mask is not None else np.arange(count)
            if rows.size == 0:
                return []
            # einsum, not @: BLAS would wake its spinning threads (see scan.py).
            scores = np.einsum("ij,j->i", quantized.decode_coarse(self._codes, rows), query)
            best_ids, best_scores = best(self._ids[rows], scores, n)
        return [(int(i), float(s)) for i, s in zip(best_ids, best_scores)]

    def _decoded(self, label: str, dim: int, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``VectorHits.vectors_of``: the vectors of ``ids`` decoded from the codes, as the
        index holds them now (a chunk it does not hold: not held, zeros)."""
        with self._lock:
            if (label, dim) != (self._label, self._dim):
                return np.zeros(ids.size, dtype=bool), np.zeros((ids.size, dim), dtype=np.float32)
            # Out-of-range ids clip to some row; the id check below turns them away.
            rows = self._pos.take(ids, mode="clip")
            held = (self._ids.take(rows, mode="clip") == ids) & (rows >= 0)
            if held.all():
                return held, quantized.decode_coarse(self._codes, rows)
            out = np.zeros((ids.size, dim), dtype=np.float32)
            out[held] = quantized.decode_coarse(self._codes, rows[held])
            return held, out

    # -- in the database (PostgreSQL with pgvector) ------------------------------------------

    def _searches_in_database(self, conn: Tx, label: str, dim: int) -> bool:
        """Whether the database searches (PostgreSQL with pgvector), holding no rows here.

        ``vector_backend="pgvector"``: always, so memory per process does not grow with
        users × vectors. ``"auto"`` and ``"hnsw"``: only where pgvector's HNSW index would
        answer (see ``_wants_pgvector_hnsw``), in place of an HNSW graph built in each
        process; below that, the resident exact search, about 4× faster per query than the
        database's exact scan (benchmarks/pgvector.py: 13.6 against 62.9 ms at 10k, 12.9
        against 221 ms at 100k). ``"numpy"``: never."""
        backend = self._config.vector_backend
        if backend == "numpy" or not conn.vectors.searches_in_database():
            return False
        if backend != "pgvector" and not self._wants_pgvector_hnsw(conn, label, dim):
            return False
        if self._count or self._ann is not None:  # held from before: free them
            self._reset(None, None)
            self._ann = None
        return True

    def _search_in_database(
        self,
        conn: Tx,
        query: np.ndarray,
        label: str,
        dim: int,
        filters: Filters,
        n: int,
    ) -> list[tuple[int, float]]:
        """The database's answer: through its HNSW index of ``dim`` when there is one and
        the user holds at least ``ann_min_rows`` such vectors (or ``vector_backend`` is
        ``"hnsw"``), else exact (``vector_backend="pgvector"``, or the walk found fewer than
        ``n``); scores exact either way (see ``in_database.nearest_exact``)."""
        self._warn_if_other_models(conn, label, dim)
        if self._wants_pgvector_hnsw(conn, label, dim):
            found = in_database.nearest_hnsw(conn, query, label, dim, filters, n)
            if found is not None:
                self._in_database_path = "pgvector-hnsw"
                return found
        self._in_database_path = "pgvector"
        return in_database.nearest_exact(conn, query, label, dim, filters, n)

    def _wants_pgvector_hnsw(self, conn: Tx, label: str, dim: int) -> bool:
        now = time.monotonic()
        if self._hnsw_dims is None or now - self._hnsw_dims[0] > HNSW_DIMS_TTL_SECONDS:
            self._hnsw_dims = (now, conn.vectors.hnsw_dims())
        if dim not in self._hnsw_dims[1]:
            return False
        if self._config.vector_backend == "hnsw":
            return True
        gen, seq = conn.vectors.counters()
        return self._current_count(conn, label, dim, gen, seq) >= self._config.ann_min_rows

    # -- HNSW --------------------------------------------------------------------------------

    def _wants_ann(self, conn: Tx, label: str, dim: int, gen: int, seq: int) -> bool:
        backend = self._config.vector_backend
        if backend == "numpy":
            return False
        if backend in ("auto", "pgvector") and self._current_count(conn, label, dim, gen, seq) < (
            self._config.ann_min_rows
        ):
            return False  # exact search; usearch is not even imported (~0.1 s at start)
        if not ann_module.usearch_available():
            if backend == "hnsw" and not self._warned_no_usearch:
                self._warned_no_usearch = True
                logger.warning(
                    "vector_backend='hnsw' needs usearch, which does not import here (%s); "
                    "using exact numpy search instead; pip install 'elastimem[vec]' to enable "
                    "it",
                    ann_module.usearch_error(),
                )
            return False
        if (label, dim) in self._ann_failed:
            return False
        if backend == "hnsw":
            return True
        return self._current_count(conn, label, dim, gen, seq) >= self._config.ann_min_rows

    def _current_count(self, conn: Tx, label: str, dim: int, gen: int, seq: int) -> int:
        """Rows with the active label/dim; recounted per gen, topped up per seq (cheap)."""
        key = (label, dim, gen)
        if self._count_key != key:
            self._current_rows = conn.vectors.count(label, dim)
            self._count_key, self._count_seq = key, seq
        elif seq > self._count_seq:
            self._current_rows += conn.vectors.count(label, dim, after_seq=self._count_seq)
            self._count_seq = seq
        return self._current_rows

    def _search_ann(
        self,
        conn: Tx,
        query: np.ndarray,
        label: str,
        dim: int,
        gen: int,
        seq: int,
        filters: Filters,
        n: int,
    ) -> list[tuple[int, float]] | None:
        """The HNSW answer, or None to let numpy answer (graph missing, stale or building)."""
        ann = self._ann
        if ann is not None and (ann.label, ann.dim, ann.gen) != (label, dim, gen):
            self._ann = ann = None  # a delete or re-embed: rebuild, numpy answers meanwhile
        if ann is None:
            key = (label, dim, gen)
            if key not in self._snapshot_tried:
                self._snapshot_tried.add(key)
                ann = ann_module.load_snapshot(conn, label, dim)
                if ann is not None:
                    self._ann = ann
            if ann is None:
                self._schedule_build(label, dim)
                return None
        if seq > ann.seq:
            self._ann_top_up(conn, ann, seq)
        # Candidates are looked up in the resident rows (which decide what exists and pass
        # the filters), narrowed with their codes and re-scored exactly.
        self._sync(conn, label, dim, gen, seq)
        return self._ann_query(conn, ann, query, label, filters, n)

    def _ann_query(
        self,
        conn: Tx,
        ann: ann_module.AnnIndex,
        query: np.ndarray,
        label: str,
        filters: Filters,
        n: int,
    ) -> list[tuple[int, float]]:
        """Over-fetch from the graph, keep rows held and passing the filters, re-score."""
        count = self._count
        coded = quantized.encode_query(query)
        fetch = max(ANN_OVERFETCH * n, ANN_MIN_FETCH)
        while True:
            keys = ann.search(query, fetch)
            keys = keys[(keys >= 0) & (keys < self._pos.shape[0])]
            rows = self._pos[keys]
            rows = rows[rows >= 0]  # a key the matrix no longer holds is never returned
            mask = _filter_mask(self._sessions[rows], self._created[rows], filters)
            if mask is not None:
                rows = rows[mask]
            if rows.size >= n or fetch >= ann.size:
                break
            if fetch * 2 > ANN_MAX_FETCH_SHARE * ann.size:
                # The filters reject most of the graph: an exact scan is cheaper.
                full_mask = _filter_mask(self._sessions[:count], self._created[:count], filters)
                rows = self._scan(coded, full_mask, n)()
                break
            fetch *= 2
        return self._exact_top(conn, rows.astype(np.int64), query, coded, label, n)

    def _ann_top_up(self, conn: Tx, ann: ann_module.AnnIndex, seq: int) -> None:
        for block in conn.vectors.blocks(
            ann.label, ann.dim, after_seq=ann.seq, size=STREAM_BLOCK_ROWS
        ):
            ann.add(block.ids, block.vectors)
        ann.seq = seq
        if ann.size - ann.saved_size >= max(ANN_RESAVE_MIN_ROWS, ann.saved_size // 10):
            ann.saved_size = ann.size  # do not schedule it twice
            self._run_background(lambda: self._save(ann))

    def _schedule_build(self, label: str, dim: int) -> None:
        if self._ann_building:
            return
        self._ann_building = True
        self._run_background(lambda: self._build(label, dim))

    def _run_background(self, task: Callable[[], None]) -> None:
        submit = self._submit
        if submit is None:
            # No worker (a bare index): do it now, outside the lock held by search().
            threading.Thread(target=task, name="elastimem-ann", daemon=True).start()
        else:
            submit(task)

    def _build(self, label: str, dim: int) -> None:
        """On the worker: build, persist, then install the graph if still current."""
        try:
            ann = ann_module.build(self._db, label, dim)
            ann.saved_size = ann.size
            ann_module.save_snapshot(self._db, label, dim, ann.gen, ann.seq, ann.to_bytes())
            with self._lock:
                # Not at LITE: the tier may have dropped while it was built (the snapshot
                # is saved; the graph comes back from it when the tier rises).
                if self._config.vector_backend != "numpy" and not self._streaming:
                    self._ann = ann
        except Exception as exc:
            if not self._db.closed:  # closing mid-build is not a failure
                self._ann_failed.add((label, dim))
                logger.warning(
                    "building the HNSW index failed (%s); exact numpy search is used until "
                    "the store is reopened",
                    exc,
                )
        finally:
            self._ann_building = False

    def _save(self, ann: ann_module.AnnIndex) -> None:
        """On the worker: persist the grown graph (serialised under the lock, written after)."""
        try:
            with self._lock:
                data = ann.to_bytes()
                gen, seq = ann.gen, ann.seq
            ann_module.save_snapshot(self._db, ann.label, ann.dim, gen, seq, data)
        except Exception as exc:
            logger.debug("saving the HNSW snapshot failed: %s", exc)

    def prime(self, label: str, dim: int) -> None:
        """Load what the next query will need (the matrix, a stored graph) ahead of it.

        Runs on the worker from ``warm_up``; a query arriving meanwhile waits for the lock
        as it would have waited for the load.
        """
        try:
            with self._db.read() as conn, self._lock:
                if self._streaming or self._searches_in_database(conn, label, dim):
                    return
                gen, seq = conn.vectors.counters()
                if self._wants_ann(conn, label, dim, gen, seq):
                    key = (label, dim, gen)
                    if self._ann is None and key not in self._snapshot_tried:
                        self._snapshot_tried.add(key)
                        self._ann = ann_module.load_snapshot(conn, label, dim)
                    if self._ann is None:
                        self._schedule_build(label, dim)
                self._sync(conn, label, dim, gen, seq)
        except Exception as exc:  # only a head start: the query path does it again
            logger.debug("priming the vector index failed: %s", exc)

    def build_ann_now(self, label: str, dim: int) -> bool:
        """Build (or load) the graph on this thread; for benchmarks and tests. True if ready."""
        with self._db.read() as conn:
            ann = ann_module.load_snapshot(conn, label, dim)
        if ann is None:
            ann = ann_module.build(self._db, label, dim)
            ann_module.save_snapshot(self._db, label, dim, ann.gen, ann.seq, ann.to_bytes())
            ann.saved_size = ann.size
        with self._lock:
            self._ann = ann
            self._snapshot_tried.add((label, dim, ann.gen))
        return True


def _search_streaming(
    conn: Tx, query: np.ndarray, label: str, dim: int, filters: Filters, n: int
) -> list[tuple[int, float]]:
    """Exact top ``n`` without a resident matrix: 4096-row blocks, filtered as read."""
    blocks = conn.vectors.filtered_blocks(
        label,
        dim,
        exclude_session=filters.exclude_session,
        since=filters.since,
        until=filters.until,
        size=STREAM_BLOCK_ROWS,
    )
    best_ids = np.zeros(0, dtype=np.int64)
    best_scores = np.zeros(0, dtype=np.float64)
    for block in blocks:
        matrix = block.vectors
        picked = candidates(row_scores(matrix, query), None, n, _margin(dim))
        best_ids = np.concatenate([best_ids, block.ids[picked]])
        best_scores = np.concatenate([best_scores, exact_scores(matrix[picked], query)])
        best_ids, best_scores = best(best_ids, best_scores, n)
    hits = [(int(i), float(s)) for i, s in zip(best_ids, best_scores)]
    return VectorHits(hits, functools.partial(read_decoded, conn, label, dim))


def _hand_over(found: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """A ready answer, as it is (a ``VectorHits`` keeps its vectors)."""
    return found


def _grow(array: np.ndarray, capacity: int) -> np.ndarray:
    shape = (capacity, *array.shape[1:])
    grown = np.zeros(shape, dtype=array.dtype)
    grown[: array.shape[0]] = array
    return grown


def _filter_mask(sessions: np.ndarray, created: np.ndarray, filters: Filters) -> np.ndarray | None:
    mask: np.ndarray | None = None
    if filters.exclude_session is not None:
        mask = sessions != filters.exclude_session
    if filters.since is not None:
        since = created >= filters.since.encode("ascii")
        mask = since if mask is None else mask & since
    if filters.until is not None:
        until = created < filters.until.encode("ascii")
        mask = until if mask is None else mask & until
    return mask
