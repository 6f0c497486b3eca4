"""The float32 vectors of the rows the vector index re-scored last, kept by chunk id.

Every search ends by re-scoring its ~50 best rows exactly from their float32 BLOBs in
SQLite (see quantized.py). Reading them is ~8 µs a row, most of it a page fetch of the
chunk row, ~0.4 ms of a 10k-store recall. Successive queries keep meeting the same rows:
some vectors are near many queries (embedding spaces have hubs), and an agent's questions
come back to the same topics. So the index keeps the last rows it read in a small LRU and
reads only the others.

A kept vector is always the stored one: a chunk's vector changes only by a re-embed or a
delete, and the vector index drops the whole cache when it reloads (every delete or
re-embed that bumps ``vectors.gen``) and drops a row when it replaces that row in place.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

# At most this many rows, and at most this many bytes of vectors (1,024 rows of 384 dims
# are 1.5 MB). On the latency benchmark's 10k store, 1,024 rows answered 92% of the reads
# (4,096: 97%): its synthetic vectors share a strong common direction, so the same rows
# recur more than they may in real use; the bound keeps a cold cache cheap either way.
MAX_ROWS = 1024
MAX_BYTES = 4 << 20


class ExactVectorCache:
    """An LRU of float32 vectors by chunk id, for one model's vectors of one dimension."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.capacity = max(1, min(MAX_ROWS, MAX_BYTES // max(1, dim * 4)))
        self._rows: OrderedDict[int, np.ndarray] = OrderedDict()

    def __len__(self) -> int:
        return len(self._rows)

    @property
    def nbytes(self) -> int:
        return len(self._rows) * self.dim * 4

    def split(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(kept ids, their vectors, ids not kept)``; the kept ones become the most
        recently used."""
        kept_ids: list[int] = []
        kept: list[np.ndarray] = []
        missing: list[int] = []
        for value in ids.tolist():
            vector = self._rows.get(value)
            if vector is None:
                missing.append(value)
            else:
                self._rows.move_to_end(value)
                kept_ids.append(value)
                kept.append(vector)
        matrix = np.stack(kept) if kept else np.zeros((0, self.dim), dtype=np.float32)
        return (
            np.asarray(kept_ids, dtype=np.int64),
            matrix,
            np.asarray(missing, dtype=np.int64),
        )

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        """Keep these rows (copies), dropping the least recently used beyond capacity."""
        for value, vector in zip(ids.tolist(), vectors):
            row = np.array(vector, dtype=np.float32, copy=True)
            row.setflags(write=False)
            self._rows[value] = row
            self._rows.move_to_end(value)
        while len(self._rows) > self.capacity:
            self._rows.popitem(last=False)

    def drop(self, ids: np.ndarray) -> None:
        """Forget these rows (their stored vectors were replaced)."""
        for value in ids.tolist():
            self._rows.pop(value, None)
