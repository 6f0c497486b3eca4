"""The transaction handle every layer above ``storage`` works with.

``database.atomic()`` (a write transaction) and ``database.read()`` (one consistent snapshot)
yield a ``Tx``. Its attributes are the table families; their methods run inside that
transaction. Nothing above the seam sees a driver's connection or writes SQL, so a second
backend (PostgreSQL) implements ``Tx`` and the families and the layers above do not change.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Protocol

from .admin import AdminRows
from .fact_vectors import FactVectorRows
from .facts import FactRows
from .graph import GraphRows
from .jobs import JobRows
from .lessons import LessonRows
from .meta import MetaRows
from .postings import PostingRows
from .stats import StatsRows
from .transcript import TranscriptRows
from .vectors import VectorRows


class Tx(Protocol):
    """One transaction or read snapshot on one store, with its table families."""

    @property
    def transcript(self) -> TranscriptRows: ...
    @property
    def facts(self) -> FactRows: ...
    @property
    def fact_vectors(self) -> FactVectorRows: ...
    @property
    def lessons(self) -> LessonRows: ...
    @property
    def jobs(self) -> JobRows: ...
    @property
    def graph(self) -> GraphRows: ...
    @property
    def meta(self) -> MetaRows: ...
    @property
    def vectors(self) -> VectorRows: ...
    @property
    def postings(self) -> PostingRows: ...
    @property
    def admin(self) -> AdminRows: ...
    @property
    def stats(self) -> StatsRows: ...

    def guarded(self) -> AbstractContextManager[None]:
        """A block of reads that may fail on its own (a leg the caller ranks without when it
        raises): after its exception, the transaction still serves the reads that follow.
        On PostgreSQL a failed statement aborts the whole transaction, so the block is a
        SAVEPOINT rolled back on failure; an SQLite transaction survives a failed
        statement. Not for writes: on SQLite a failed block's earlier writes stay."""
        ...
