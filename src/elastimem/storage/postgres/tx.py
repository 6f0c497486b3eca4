"""``storage.tx.Tx`` on PostgreSQL: one pooled connection inside one transaction, scoped to
one user.

The ``meta`` family is implemented; the other families raise ``NotImplementedError`` until
their methods, being moved behind the seam now, are written for PostgreSQL (issue #18).
"""

from __future__ import annotations

from functools import cached_property
from typing import Any, NoReturn

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
from .meta import PostgresMetaRows

# The families written for PostgreSQL so far; the others raise NotImplementedError.
IMPLEMENTED_FAMILIES = frozenset({"meta"})


def _not_yet(family: str) -> NoReturn:
    raise NotImplementedError(
        f"the {family} family is not implemented on PostgreSQL yet (issue #18); only meta is"
    )


class PostgresTx:
    """The families of one PostgreSQL transaction for ``user_id``.

    ``conn`` (a psycopg connection) is for code inside ``storage.postgres`` only.
    """

    def __init__(self, conn: Any, user_id: str) -> None:
        self.conn = conn
        self.user_id = user_id

    @cached_property
    def meta(self) -> PostgresMetaRows:
        return PostgresMetaRows(self.conn, self.user_id)

    @property
    def transcript(self) -> TranscriptRows:
        _not_yet("transcript")

    @property
    def facts(self) -> FactRows:
        _not_yet("facts")

    @property
    def fact_vectors(self) -> FactVectorRows:
        _not_yet("fact_vectors")

    @property
    def lessons(self) -> LessonRows:
        _not_yet("lessons")

    @property
    def jobs(self) -> JobRows:
        _not_yet("jobs")

    @property
    def graph(self) -> GraphRows:
        _not_yet("graph")

    @property
    def vectors(self) -> VectorRows:
        _not_yet("vectors")

    @property
    def postings(self) -> PostingRows:
        _not_yet("postings")

    @property
    def admin(self) -> AdminRows:
        _not_yet("admin")

    @property
    def stats(self) -> StatsRows:
        _not_yet("stats")

    # TRANSITIONAL (``storage.tx.Tx``): raw SQL written for SQLite has no meaning here.
    def execute(self, sql: str, parameters: Any = (), /) -> Any:
        raise NotImplementedError(
            "raw SQL above the storage seam is SQLite-only; move the statement into a family "
            "(issue #16) to run it on PostgreSQL"
        )

    def executemany(self, sql: str, parameters: Any, /) -> Any:
        self.execute(sql, parameters)
