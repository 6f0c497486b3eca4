"""The vectors family's interface: the chunks' vectors on file (float32 BLOBs, one model label
and dimension beside each) and the persisted HNSW snapshots.

Data model: each chunk row may carry one unit vector, the label of the model that made it,
its dimension and an ``embed_seq`` (the ``vectors.seq`` counter when it was written). The
meta counters ``vectors.seq`` (raised by every vector write) and ``vectors.gen`` (raised by
every delete or re-embed) tell an in-memory index what changed. ``ann_index`` keeps one
serialised HNSW graph per ``(label, dim)``, stamped with the counters it covers.

Code above ``storage`` calls these methods on ``tx.vectors``; each backend implements them
(``storage.sqlite.vectors.SqliteVectorRows``). Methods take and return plain values (ints,
strings, tuples, numpy arrays), never a driver's rows or cursors.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

# The canonical timestamp as fixed-width ASCII bytes: compared as bytes by the index.
CREATED_DTYPE = "S27"


@dataclass(frozen=True)
class VectorBlock:
    """Consecutive stored vectors with what the index filters on, row for row."""

    ids: np.ndarray  # int64 chunk ids
    sessions: np.ndarray  # int64 session ids
    created: np.ndarray  # CREATED_DTYPE creation times
    vectors: np.ndarray  # float32, (rows, dim)


class VectorRows(Protocol):
    """The chunks' vectors on file (float32, with model label and dimension) and the HNSW
    snapshots."""

    def counters(self) -> tuple[int, int]:
        """``(vectors.gen, vectors.seq)``: 0 where never set."""
        ...

    def count(self, label: str, dim: int, *, after_seq: int | None = None) -> int:
        """How many chunks hold a vector of ``(label, dim)`` (written after ``after_seq``)."""
        ...

    def other_model(self, label: str, dim: int) -> tuple[str, int | None] | None:
        """The ``(label, dim)`` of some stored vector of another model or size, or None."""
        ...

    def blocks(
        self, label: str, dim: int, *, after_seq: int | None = None, size: int
    ) -> Iterator[VectorBlock]:
        """Every vector of ``(label, dim)`` (written after ``after_seq``), ascending id, in
        blocks of up to ``size`` rows. Raises ValueError for a vector of the wrong length."""
        ...

    def filtered_blocks(
        self,
        label: str,
        dim: int,
        *,
        exclude_session: int | None,
        since: str | None,
        until: str | None,
        size: int,
    ) -> Iterator[VectorBlock]:
        """The vectors of ``(label, dim)`` of chunks outside ``exclude_session`` created in
        ``[since, until)`` (None: unbounded), in blocks of up to ``size``, in no set order."""
        ...

    def after_id(
        self, label: str, dim: int, after_id: int, limit: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(ids, float32 matrix)`` of the first ``limit`` vectors of ``(label, dim)`` with
        an id above ``after_id``, ascending."""
        ...

    def read(self, label: str, dim: int, ids: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """``(ids, float32 matrix)`` of those of ``ids`` that hold a ``(label, dim)`` vector,
        in no set order."""
        ...

    def previous_texts(self, chunk_ids: Sequence[int]) -> dict[int, str]:
        """The text of the chunk before each one in its session, for those that have one."""
        ...

    def target(self, chunk_id: int) -> tuple[bool, str] | None:
        """``(holds a vector already, text)`` of a chunk, or None when it does not exist."""
        ...

    def store(self, chunk_id: int, vector: np.ndarray, label: str, seq: int) -> None:
        """Set a chunk's vector (stored as float32), its model label and dimension and its
        ``embed_seq``."""
        ...

    def targets(self, chunk_ids: Sequence[int]) -> dict[int, tuple[bool, str]]:
        """``target`` of many chunks at once: those that exist, by id."""
        ...

    def store_many(self, label: str, rows: Sequence[tuple[int, np.ndarray, int]]) -> None:
        """``store`` of many ``(chunk id, vector, embed_seq)`` at once (distinct ids)."""
        ...

    # -- in-database search (PostgreSQL with pgvector) ---------------------------------------

    def searches_in_database(self) -> bool:
        """Whether ``nearest`` is offered: the database can order the vectors by cosine
        itself (PostgreSQL with pgvector). False on SQLite."""
        ...

    def hnsw_dims(self) -> frozenset[int]:
        """The dimensions whose vectors have an HNSW index in the database (empty where
        ``searches_in_database`` is False)."""
        ...

    def nearest(
        self,
        label: str,
        dim: int,
        query: np.ndarray,
        limit: int,
        *,
        exclude_session: int | None,
        since: str | None,
        until: str | None,
        ef_search: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(ids, distances, float32 matrix)`` of up to ``limit`` vectors of ``(label, dim)``
        of chunks outside ``exclude_session`` created in ``[since, until)``, by ascending
        cosine distance to ``query`` as the database computes it (float32 sums: within a
        few float32 roundings of the exact value), with each one's stored vector.
        ``ef_search`` None scans every such row; otherwise the HNSW index of ``dim`` is
        walked with that candidate list (approximate: rows may be missing). Only where
        ``searches_in_database``; NotImplementedError otherwise."""
        ...

    def snapshot(self, label: str, dim: int) -> tuple[int, int, bytes] | None:
        """The stored HNSW graph of ``(label, dim)`` as ``(seq, gen, data)``, or None."""
        ...

    def save_snapshot(self, label: str, dim: int, seq: int, gen: int, data: bytes) -> None:
        """Keep ``data`` as the HNSW graph of ``(label, dim)``, replacing any earlier one."""
        ...

    # -- for the command line ---------------------------------------------------------------

    def has_vectors_labelled(self, prefix: str) -> bool:
        """Whether a chunk or a fact has a vector whose model label starts with ``prefix``."""
        ...
