"""SQLite implementation of ``storage.jobs.JobRows``: the durable job queue."""

from __future__ import annotations

import sqlite3


class SqliteJobRows:
    """``JobRows`` on one SQLite connection (inside the caller's transaction)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    # -- for the facade (session end) -------------------------------------------------------

    def count_unfinished(self, job_ids: list[int]) -> int:
        if not job_ids:
            return 0
        marks = ",".join("?" * len(job_ids))
        row = self._conn.execute(
            f"SELECT count(*) FROM jobs WHERE id IN ({marks}) AND state IN ('queued', 'running')",
            job_ids,
        ).fetchone()
        return int(row[0])
