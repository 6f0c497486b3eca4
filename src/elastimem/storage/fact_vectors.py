"""The fact vectors family's interface: one vector per fact version, on file.

Code above ``storage`` calls these methods on ``tx.fact_vectors``; each backend implements them
(``storage.sqlite.fact_vectors.SqliteFactVectorRows``). Methods take and return plain values
(ints, strings, tuples, dataclasses from ``elastimem.values``), never a driver's rows or
cursors.

Data model: ``fact_vectors(fact_id → facts, model label, dimension, embedding)``, one
L2-normalised little-endian float32 vector per fact version, deleted with its fact. "Live"
below means a current (not invalidated), unarchived fact version.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np


class FactVectorRows(Protocol):
    """One vector per fact version, on file."""

    def pending(self, label: str, dim: int | None, limit: int) -> list[tuple[int, str, str]]:
        """``(id, key, value)`` of up to ``limit`` live facts without a vector of
        ``label``/``dim`` (None: without one of ``label`` at all), oldest first."""
        ...

    def any_without_vector(self) -> bool:
        """Whether a live fact has no vector of any model."""
        ...

    def all_live(self) -> list[tuple[int, str, str]]:
        """``(id, key, value)`` of every live fact, oldest first."""
        ...

    def put(self, fact_id: int, key: str, value: str, label: str, vector: np.ndarray) -> bool:
        """Store (or replace) the vector of ``label`` of one fact version; False, writing
        nothing, when that fact is gone or its key or value is no longer ``key``/``value``
        (its id was handed out again)."""
        ...

    def stamps(self) -> tuple[str | None, str | None]:
        """The change stamps ``(any fact change, any fact-vector change)``: equal stamps
        mean the live facts and their vectors are as they were."""
        ...

    def live_vectors(self, label: str, dim: int) -> list[tuple[int, str, bytes]]:
        """``(id, valid_from, embedding)`` of every live fact with a vector of
        ``label``/``dim``, by id (the embedding as stored: float32 little-endian bytes)."""
        ...

    def waiting(self, label: str, dim: int, limit: int) -> list[tuple[int, str, str, str]]:
        """``(id, key, value, valid_from)`` of up to ``limit`` live facts without a vector of
        ``label``/``dim``, newest first."""
        ...
