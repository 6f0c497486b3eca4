"""What every vector search shares: its answer (``VectorHits``), its filters, the exact score
and the order of the cut (``(-score, -id)``: a tie goes to the higher, newer id, as in every leg
of §5.6)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import numpy as np

from . import quantized

if TYPE_CHECKING:
    from ..storage.tx import Tx

# An approximate search (HNSW, in process or pgvector's) over-fetches max(4k, 64) candidates
# and re-scores them exactly (§4.4).
ANN_OVERFETCH = 4
ANN_MIN_FETCH = 64


class Filters(Protocol):
    """What a vector search filters on (``retrieval.Filters`` is one)."""

    @property
    def exclude_session(self) -> int | None: ...

    @property
    def since(self) -> str | None: ...

    @property
    def until(self) -> str | None: ...


class VectorHits(list[tuple[int, float]]):
    """A vector leg's answer, ``[(chunk_id, cosine)]``, that can also hand over chunks' unit
    vectors: ``vectors_of(ids)`` returns ``(held, matrix)``, ``matrix[i]`` the vector of
    ``ids[i]`` where ``held[i]`` (zeros elsewhere). The vector index decodes them from the
    codes it holds anyway (``quantized.decode_coarse``: within ~0.01 of the stored vectors,
    and the same on every backend), so the feedback term costs a gather and a product over
    the ~100 candidates rather than a read of their BLOBs."""

    def __init__(
        self,
        hits: list[tuple[int, float]],
        vectors_of: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]],
        within: Callable[[Filters, int], list[tuple[int, float]]] | None = None,
    ) -> None:
        super().__init__(hits)
        self.vectors_of = vectors_of
        # The search again under other filters, from the decoded codes of the rows passing
        # them (no scan of the rest, no BLOB read): retrieval/span_pool.py. None where the
        # rows are not resident (the LITE stream).
        self.within = within


def exact_scores(rows: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Cosines in float64, each row summed on its own: the same value wherever a row sits.

    BLAS's float32 product may round a row differently depending on its position and the
    number of rows (its kernels work on groups of rows), which would let two backends
    disagree on near-ties. A per-row float64 reduction does not.
    """
    if rows.shape[0] == 0:
        return np.zeros(0, dtype=np.float64)
    products = np.asarray(rows, dtype=np.float64) * np.asarray(query, dtype=np.float64)
    return np.add.reduce(products, axis=1)


def best(ids: np.ndarray, scores: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``n`` by ``(-score, -id)``."""
    order = np.lexsort((-ids, -scores))[:n]
    return ids[order], scores[order]


def read_decoded(conn: Tx, label: str, dim: int, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``VectorHits.vectors_of`` without resident rows (LITE): the stored vectors of
    ``ids``, coded and decoded as the resident index holds them, so that LITE ranks as the
    resident index does."""
    found, vectors = conn.vectors.read(label, dim, ids.tolist())
    position = {cid: n for n, cid in enumerate(found.tolist())}
    rows = np.asarray([position.get(cid, -1) for cid in ids.tolist()], dtype=np.int64)
    held = rows >= 0
    out = np.zeros((ids.size, dim), dtype=np.float32)
    out[held] = quantized.decode_coarse(quantized.encode(vectors), rows[held])
    return held, out
