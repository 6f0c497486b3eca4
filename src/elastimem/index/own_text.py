"""Each chunk's own-text vector, kept in memory for a small store's queries (issue 26).

A chunk's stored vector embeds its text with the turn before it as context
(``vector_writes.passage_texts``): on a store of hundreds of exchanges that is what finds
the answer (LoCoMo), but on a person's first dozen turns it lets an exchange ride on the
one before it. A small pool is therefore re-scored by the cosine of each chunk's OWN text
(``retrieval.own_text``); these are the vectors it uses.

Keyed by ``(label, dim, text)``: a vector is a function of the model and the text only, so
an erased chunk, a reused id or a new model needs no invalidation; an LRU bounds memory
(``OWN_TEXT_CACHE_SIZE`` × 1.5 KB at 384 dimensions).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

from .vector_hits import VectorHits

# A few small stores' worth (a small pool is under 50 chunks, each with its text and a few
# clauses of its user's words): 6 MB at 384 dimensions.
OWN_TEXT_CACHE_SIZE = 4096


class OwnTextVectors:
    """An LRU of own-text vectors by ``(label, dim, text)``; thread-safe."""

    def __init__(self, size: int = OWN_TEXT_CACHE_SIZE) -> None:
        self._lock = threading.Lock()
        self._size = size
        self._vectors: OrderedDict[tuple[str, int, str], np.ndarray] = OrderedDict()

    def get(self, label: str, dim: int, text: str) -> np.ndarray | None:
        key = (label, dim, text)
        with self._lock:
            vector = self._vectors.get(key)
            if vector is not None:
                self._vectors.move_to_end(key)
            return vector

    def keep(self, label: str, dim: int, text: str, vector: np.ndarray) -> None:
        key = (label, dim, text)
        with self._lock:
            self._vectors[key] = vector
            self._vectors.move_to_end(key)
            while len(self._vectors) > self._size:
                self._vectors.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._vectors)


class OwnTextHits(VectorHits):
    """A vector leg's answer re-scored on the chunks' own texts: ``[(chunk_id, cosine)]``
    with ``vectors_of`` handing over the own-text vectors (the feedback term reads like the
    cosines), and the original search's ``within`` (``retrieval/span_pool.py``)."""

    def __init__(
        self,
        hits: list[tuple[int, float]],
        vectors: dict[int, np.ndarray],
        dim: int,
        original: list[tuple[int, float]],
    ) -> None:
        within = original.within if isinstance(original, VectorHits) else None
        super().__init__(hits, self._vectors_of, within)
        self._vectors = vectors
        self._dim = dim

    def _vectors_of(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        held = np.fromiter((int(i) in self._vectors for i in ids), dtype=bool, count=ids.size)
        matrix = np.zeros((ids.size, self._dim), dtype=np.float32)
        for n, cid in enumerate(ids.tolist()):
            if held[n]:
                matrix[n] = self._vectors[cid]
        return held, matrix
