"""``storage.tx.Tx`` on PostgreSQL: one pooled connection inside one transaction, scoped to
one user.

Every family of ``storage.tx.Tx`` is implemented (``IMPLEMENTED_FAMILIES``, which the test
suite reads to skip a family still to come).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, suppress
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

    def __init__(
        self, conn: Any, user_id: str, *, writable: bool = True, pgvector: bool = False
    ) -> None:
        self.conn = conn
        self.user_id = user_id
        self.writable = writable
        self.pgvector = pgvector  # chunks has the pgvector copy (schema.PGVECTOR_DOC)

    @contextmanager
    def guarded(self) -> Iterator[None]:
        """``Tx.guarded``: a SAVEPOINT, rolled back when the block raises, so the statement
        that failed in it does not leave the transaction aborted for the reads after it.
        Nested blocks reuse the name: PostgreSQL releases and rolls back to the newest.
        When the savepoint cannot be set (the transaction already failed) the block still
        runs, unguarded: it may have to release what it holds (a started vector search),
        and its own reads then report the failure."""
        try:
            self.conn.execute("SAVEPOINT em_guard")
        except Exception:
            yield
            return
        try:
            yield
        except BaseException:
            with suppress(Exception):  # a lost connection: the block's own error says more
                self.conn.execute("ROLLBACK TO SAVEPOINT em_guard")
                self.conn.execute("RELEASE SAVEPOINT em_guard")
            raise
        self.conn.execute("RELEASE SAVEPOINT em_guard")

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
        return PostgresVectorRows(self.conn, self.user_id, pgvector=self.pgvector)

    @cached_property
    def postings(self) -> PostingRows:
        return PostgresPostingRows(self.conn, self.user_id)

    @cached_property
    def admin(self) -> AdminRows:
        return PostgresAdminRows(self.conn, self.user_id)

    @cached_property
    def stats(self) -> StatsRows:
        return PostgresStatsRows(self.conn, self.user_id)
