"""``storage.tx.Tx`` on PostgreSQL: one pooled connection inside one transaction, scoped to
one user.

Every family of ``storage.tx.Tx`` is implemented (``IMPLEMENTED_FAMILIES``, which the test
suite reads to skip a family still to come).
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from ..admin import AdminRows
from ..fact_vectors import FactVectorRows
from ..facts import FactRows
from ..graph import GraphRows
from ..jobs import JobRows
from ..lessons import LessonRows
from ..postings import PostingRows
from ..stats import StatsRows
from ..transcript import TranscriptRows
from ..vectors import VectorRows
from .admin import PostgresAdminRows
from .fact_vectors import PostgresFactVectorRows
from .facts import PostgresFactRows
from .graph import PostgresGraphRows
from .jobs import PostgresJobRows
from .lessons import PostgresLessonRows
from .meta import PostgresMetaRows
from .postings import PostgresPostingRows
from .stats import PostgresStatsRows
from .transcript import PostgresTranscriptRows
from .vectors import PostgresVectorRows

# The families written for PostgreSQL: all of them.
IMPLEMENTED_FAMILIES = frozenset(
    {
        "meta",
        "transcript",
        "facts",
        "fact_vectors",
        "lessons",
        "jobs",
        "graph",
        "vectors",
        "postings",
        "admin",
        "stats",
    }
)


class PostgresTx:
    """The families of one PostgreSQL transaction for ``user_id``.

    ``conn`` (a psycopg connection) is for code inside ``storage.postgres`` only.
    ``writable`` is False in a read-only snapshot (``database.read()`` outside a write),
    where families take no row locks.
    """

    def __init__(self, conn: Any, user_id: str, *, writable: bool = True) -> None:
        self.conn = conn
        self.user_id = user_id
        self.writable = writable

    @cached_property
    def meta(self) -> PostgresMetaRows:
        return PostgresMetaRows(self.conn, self.user_id)

    @cached_property
    def transcript(self) -> TranscriptRows:
        return PostgresTranscriptRows(self.conn, self.user_id)

    @cached_property
    def facts(self) -> FactRows:
        return PostgresFactRows(self.conn, self.user_id, writable=self.writable)

    @cached_property
    def fact_vectors(self) -> FactVectorRows:
        return PostgresFactVectorRows(self.conn, self.user_id)

    @cached_property
    def lessons(self) -> LessonRows:
        return PostgresLessonRows(self.conn, self.user_id)

    @cached_property
    def jobs(self) -> JobRows:
        return PostgresJobRows(self.conn, self.user_id)

    @cached_property
    def graph(self) -> GraphRows:
        return PostgresGraphRows(self.conn, self.user_id)

    @cached_property
    def vectors(self) -> VectorRows:
        return PostgresVectorRows(self.conn, self.user_id)

    @cached_property
    def postings(self) -> PostingRows:
        return PostgresPostingRows(self.conn, self.user_id)

    @cached_property
    def admin(self) -> AdminRows:
        return PostgresAdminRows(self.conn, self.user_id)

    @cached_property
    def stats(self) -> StatsRows:
        return PostgresStatsRows(self.conn, self.user_id)
