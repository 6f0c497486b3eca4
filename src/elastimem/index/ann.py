"""The optional HNSW index (extra ``vec``, SPEC §4.4): a rebuildable cache over the vectors.

The exact scan of ``vectors.py`` (int8 codes, ``quantized.py``) answers exactly; past a few
hundred thousand rows a query costs tens of milliseconds, so very large stores can use an
approximate index instead. :class:`AnnIndex` wraps a usearch HNSW graph over the chunk
vectors of one ``(label, dim)``. It is never a source of truth: it only proposes candidates,
which ``vectors.VectorIndex`` looks up in its resident rows (in sync with ``chunks`` through
the ``vectors.gen``/``seq`` counters, so an erased chunk cannot come back) and re-scores
exactly.

The graph is persisted inside the store file, in ``ann_index(label, dim, seq, gen, data,
built_at)``: ``gen`` and ``seq`` are the ``vectors.gen`` / ``vectors.seq`` counters the
snapshot covers. A snapshot whose ``gen`` still matches is loaded and topped up with the rows
of a higher ``embed_seq``; any other is rebuilt. ``erase`` deletes the row in the same
transaction as its ``gen`` bump, and :func:`save_snapshot` writes only while ``gen`` is
unchanged, so no erased vector survives in the file.

usearch is imported on first use only; :func:`usearch_available` tells whether it imports.
"""

from __future__ import annotations

import importlib.util
import logging
import math
import sys
import threading
from typing import Any

import numpy as np

from ..storage.database import Database
from ..storage.tx import Tx

logger = logging.getLogger("elastimem")

# HNSW parameters, measured on 100k chunks of benchmarks/latency.py (384-dim vectors from
# its deterministic embedder, 4-word queries, mean pairwise cosine ~0.3 like MiniLM's) on a
# busy 2-core machine; recall@10 of the vector leg's top 50 against numpy exact:
#   connectivity 16, expansion_add 128: build 113 s; width 200 -> 0.878, 400 -> 0.963,
#     800 -> 0.991; expansion_add 400 barely helped (0.969 at 400) and cost 2x the build.
#   connectivity 32, expansion_add 128: build 231 s; width 200 -> 0.978, 400 -> 0.998.
#   connectivity 32, expansion_add 256: build 330 s; width 200 -> 0.983, 400 -> 1.000.
# Re-measured (same corpus, 100k, load 5-6, i8), width 200 / 300 / 400 / 600:
#   connectivity 16, expansion_add 64: build 163 s; 0.855 / 0.922 / 0.952 / 0.978.
#   connectivity 32, expansion_add 64: build 165 s; 0.933 / 0.970 / 0.986 / 0.996.
# So the graph's degree matters more than its build effort, and the build time is set by
# expansion_add, not by the degree.
# At 1M rows (benchmarks/latency.py --sizes 1000000 --hnsw-ef ..., load 2-4), a 32 / 64
# graph (built in 2,319 s on 2 cores at load 3-8; 1,016 MB resident, 660 MB snapshot)
# gave, for the vector leg alone: width 200 -> 0.756 at p50 7.9 ms, 300 -> 0.835 at 11.1,
# 400 -> 0.880 at 13.9, 600 -> 0.930 at 19.7, 800 -> 0.956 at 25.3 ms (numpy exact:
# 211 ms). That misses the 0.98-at-10-ms target: recall falls with N at a fixed width far
# faster than from 10k to 100k. expansion_add is back at 128 (0.998 vs 0.986 at 100k,
# width 400) since the graph is built once, on the worker, and kept in the file; a 1M
# build at 128 (~1.4x the time) was not measured yet.
# usearch searches max(expansion_search, count) wide, so EXPANSION_SEARCH is the width up
# to WIDTH_REFERENCE_ROWS; past it the width grows with the square root of the size. On
# the same 1M graph: width 1200 -> 0.988 at p50 38 ms, 1600 -> 0.992 at 47 ms, 2400 ->
# 0.999 at 66 ms (load 4; numpy exact 211 ms). 400 × sqrt(10) ≈ 1265 at 1M keeps recall@10
# near its 100k value instead of letting it fall to 0.88: the graph is there to answer
# like numpy, only sooner.
CONNECTIVITY = 32
EXPANSION_ADD = 128
EXPANSION_SEARCH = 400
WIDTH_REFERENCE_ROWS = 100_000
# Stored as int8 inside the graph: candidates are re-scored exactly from the float32 BLOBs,
# and recall@10 after re-scoring was identical for i8, f16 and f32 (0.9735 at 100k in a
# first probe), while i8 builds 2x faster than f32 and keeps a 1M-row snapshot (~660 MB at
# connectivity 32) under SQLite's 1 GB BLOB limit; f32 would not fit.
ANN_DTYPE = "i8"
# SQLite refuses BLOBs over SQLITE_MAX_LENGTH (1e9 by default); stay clear of it.
MAX_SNAPSHOT_BYTES = 900_000_000
BUILD_BLOCK_ROWS = 8192

_usearch_state: dict[str, Any] = {}
_import_lock = threading.Lock()


def _onnxruntime_first() -> None:
    """Import onnxruntime before usearch, when it is installed.

    usearch's extension carries its own C++ runtime, whose unique symbols then win over
    the system one: importing onnxruntime after it crashes the process (segmentation fault;
    usearch 2.26, onnxruntime 1.32). In the other order both work. The built-in embedder
    imports onnxruntime when it loads, which may come after a query found the store big
    enough for HNSW, so it is imported here first (~0.1 s, only on stores that use HNSW).
    """
    if "onnxruntime" in sys.modules:
        return
    try:
        if importlib.util.find_spec("onnxruntime") is not None:
            import onnxruntime  # noqa: F401
    except Exception as exc:  # a broken install: the built-in embedder will say so
        logger.debug("importing onnxruntime before usearch failed: %s", exc)


def usearch_available() -> bool:
    """True when ``usearch.index`` imports (checked once per process)."""
    with _import_lock:
        if "ok" not in _usearch_state:
            try:
                _onnxruntime_first()
                from usearch.index import Index

                _usearch_state["Index"] = Index
                _usearch_state["ok"] = True
            except Exception as exc:  # ImportError, or a broken binary wheel
                _usearch_state["ok"] = False
                _usearch_state["error"] = f"{type(exc).__name__}: {exc}"
        return bool(_usearch_state["ok"])


def usearch_error() -> str:
    return str(_usearch_state.get("error", ""))


def _index_class() -> Any:
    if not usearch_available():
        raise RuntimeError(f"usearch is not importable ({usearch_error()})")
    return _usearch_state["Index"]


class AnnIndex:
    """An HNSW graph over the vectors of one ``(label, dim)``, as of ``(gen, seq)``."""

    def __init__(self, label: str, dim: int, gen: int, seq: int, index: Any = None) -> None:
        self.label = label
        self.dim = dim
        self.gen = gen
        self.seq = seq
        self.saved_size = 0
        # A fixed search width (benchmarks); None follows search_width(size).
        self.width: int | None = None
        if index is None:
            index = _index_class()(
                ndim=dim,
                metric="ip",
                dtype=ANN_DTYPE,
                connectivity=CONNECTIVITY,
                expansion_add=EXPANSION_ADD,
                expansion_search=EXPANSION_SEARCH,
            )
        self._index = index

    @property
    def size(self) -> int:
        return int(len(self._index))

    @property
    def memory_bytes(self) -> int:
        return int(self._index.memory_usage)

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> int:
        """Add rows not yet present (a key is never added twice); returns how many."""
        if ids.size == 0:
            return 0
        keys = ids.astype(np.uint64)
        present = np.asarray(self._index.contains(keys), dtype=bool).reshape(-1)
        if present.any():
            keys, vectors = keys[~present], vectors[~present]
        if keys.size == 0:
            return 0
        self._index.add(keys, np.ascontiguousarray(vectors, dtype=np.float32))
        return int(keys.size)

    def search(self, query: np.ndarray, count: int) -> np.ndarray:
        """Up to ``count`` candidate chunk ids, roughly best first."""
        count = min(count, self.size)
        if count <= 0:
            return np.zeros(0, dtype=np.int64)
        width = self.width or search_width(self.size)
        if int(self._index.expansion_search) != width:
            self._index.expansion_search = width
        # One vector: a single thread. The default (all cores) hands the query to a pool:
        # p50 1.89 vs 1.42 ms on 20k rows of a busy 2-core machine (load 7).
        matches = self._index.search(np.asarray(query, dtype=np.float32), count, threads=1)
        return np.asarray(matches.keys, dtype=np.int64).reshape(-1)

    def serialized_length(self) -> int:
        return int(self._index.serialized_length)

    def to_bytes(self) -> bytes:
        return bytes(self._index.save())

    @classmethod
    def from_bytes(cls, label: str, dim: int, gen: int, seq: int, data: bytes) -> AnnIndex:
        index = _index_class().restore(data)
        if index is None or int(index.ndim) != dim:
            raise ValueError(f"the ann_index snapshot for {label}/{dim} is not a {dim}-dim index")
        index.expansion_search = EXPANSION_SEARCH
        ann = cls(label, dim, gen, seq, index)
        ann.saved_size = ann.size
        return ann


def search_width(size: int) -> int:
    """How wide to search a graph of ``size`` rows (see EXPANSION_SEARCH)."""
    if size <= WIDTH_REFERENCE_ROWS:
        return EXPANSION_SEARCH
    return int(round(EXPANSION_SEARCH * math.sqrt(size / WIDTH_REFERENCE_ROWS)))


def build(database: Database, label: str, dim: int) -> AnnIndex:
    """Build an index over every current vector, one short read per block (worker thread).

    ``gen`` and ``seq`` are read first: rows written during the build carry a higher
    ``embed_seq`` and are added again later by the caller (``add`` skips the duplicates);
    a ``gen`` that moves during the build makes the result stale, and the caller drops it.
    """
    with database.read() as conn:
        gen = conn.meta.get_int("vectors.gen")
        seq = conn.meta.get_int("vectors.seq")
    ann = AnnIndex(label, dim, gen, seq)
    last_id = 0
    while True:
        # One short read per block, by id range (see ``tx.vectors.after_id``).
        with database.read() as conn:
            ids, matrix = conn.vectors.after_id(label, dim, last_id, BUILD_BLOCK_ROWS)
        if ids.size == 0:
            break
        ann.add(ids, matrix)
        last_id = int(ids[-1])
    return ann


def load_snapshot(conn: Tx, label: str, dim: int) -> AnnIndex | None:
    """The persisted index for ``(label, dim)`` if its ``gen`` is current, else None."""
    stored = conn.vectors.snapshot(label, dim)
    if stored is None:
        return None
    seq, gen, data = stored
    if gen != conn.meta.get_int("vectors.gen"):
        return None
    try:
        return AnnIndex.from_bytes(label, dim, gen, seq, data)
    except Exception as exc:  # a damaged or foreign snapshot is only a cache: rebuild it
        logger.warning(
            "the stored HNSW index for %s could not be read (%s); rebuilding it", label, exc
        )
        return None


def save_snapshot(
    database: Database, label: str, dim: int, gen: int, seq: int, data: bytes
) -> bool:
    """Persist a serialised index (``to_bytes()``) unless ``vectors.gen`` moved past ``gen``."""
    if len(data) > MAX_SNAPSHOT_BYTES:
        logger.info(
            "the HNSW index for %s is %d bytes, over the %d-byte snapshot limit; it "
            "stays in memory only",
            label,
            len(data),
            MAX_SNAPSHOT_BYTES,
        )
        return False
    with database.atomic() as conn:
        if conn.meta.get_int("vectors.gen") != gen:
            return False  # an erase or re-embed happened meanwhile: never resurrect it
        conn.vectors.save_snapshot(label, dim, seq, gen, data)
    return True
