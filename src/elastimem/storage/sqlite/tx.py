"""``storage.tx.Tx`` on SQLite: one connection inside one transaction or read snapshot."""

from __future__ import annotations

import sqlite3
from contextlib import AbstractContextManager, nullcontext
from functools import cached_property

from .admin import SqliteAdminRows
from .fact_vectors import SqliteFactVectorRows
from .facts import SqliteFactRows
from .graph import SqliteGraphRows
from .jobs import SqliteJobRows
from .lessons import SqliteLessonRows
from .meta import SqliteMetaRows
from .postings import SqlitePostingRows
from .stats import SqliteStatsRows
from .transcript import SqliteTranscriptRows
from .vectors import SqliteVectorRows


class SqliteTx:
    """The families of one SQLite transaction, made on first use (a read that touches one
    family builds one small object).

    ``conn`` is for code inside ``storage.sqlite`` only.
    """

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def guarded(self) -> AbstractContextManager[None]:
        """``Tx.guarded``: nothing to do, a failed statement leaves the transaction usable."""
        return nullcontext()

    @cached_property
    def transcript(self) -> SqliteTranscriptRows:
        return SqliteTranscriptRows(self.conn)

    @cached_property
    def facts(self) -> SqliteFactRows:
        return SqliteFactRows(self.conn)

    @cached_property
    def fact_vectors(self) -> SqliteFactVectorRows:
        return SqliteFactVectorRows(self.conn)

    @cached_property
    def lessons(self) -> SqliteLessonRows:
        return SqliteLessonRows(self.conn)

    @cached_property
    def jobs(self) -> SqliteJobRows:
        return SqliteJobRows(self.conn)

    @cached_property
    def graph(self) -> SqliteGraphRows:
        return SqliteGraphRows(self.conn)

    @cached_property
    def meta(self) -> SqliteMetaRows:
        return SqliteMetaRows(self.conn)

    @cached_property
    def vectors(self) -> SqliteVectorRows:
        return SqliteVectorRows(self.conn)

    @cached_property
    def postings(self) -> SqlitePostingRows:
        return SqlitePostingRows(self.conn)

    @cached_property
    def admin(self) -> SqliteAdminRows:
        return SqliteAdminRows(self.conn)

    @cached_property
    def stats(self) -> SqliteStatsRows:
        return SqliteStatsRows(self.conn)
