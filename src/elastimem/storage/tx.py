"""The transaction handle every layer above ``storage`` works with.

``database.atomic()`` (a write transaction) and ``database.read()`` (one consistent snapshot)
yield a ``Tx``. Its attributes are the table families; their methods run inside that
transaction. Nothing above the seam sees a driver's connection or writes SQL, so a second
backend (PostgreSQL) implements ``Tx`` and the families and the layers above do not change.
"""

from __future__ import annotations

from typing import Any, Protocol

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

    transcript: TranscriptRows
    facts: FactRows
    fact_vectors: FactVectorRows
    lessons: LessonRows
    jobs: JobRows
    graph: GraphRows
    meta: MetaRows
    vectors: VectorRows
    postings: PostingRows
    admin: AdminRows
    stats: StatsRows

    # TRANSITIONAL (layered redesign in progress): the raw statements of code not yet moved
    # behind the families. Removed, with ``SqliteTx.__getattr__``, once no SQL is left above
    # the seam.
    def execute(self, sql: str, parameters: Any = ..., /) -> Any: ...

    def executemany(self, sql: str, parameters: Any, /) -> Any: ...
