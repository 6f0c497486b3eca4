"""SQLite implementation of ``storage.jobs.JobRows``: the durable job queue.

``claim`` reads and updates in the caller's write transaction: SQLite lets one writer in at
a time, so no other process can take the same row meanwhile.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection
from typing import Any

from ..jobs import Job, JobOwner, load_payload


def _marks(values: Collection[object]) -> str:
    return ",".join("?" * len(values))


class SqliteJobRows:
    """``JobRows`` on one SQLite connection (inside the caller's transaction)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def add(
        self,
        kind: str,
        owner: JobOwner,
        *,
        state: str,
        phase: str,
        session_id: int | None,
        payload: dict[str, Any],
        priority: int,
        now: str,
    ) -> int:
        cur = self._conn.execute(
            "INSERT INTO jobs (kind, state, phase, session_id, payload, priority, owner_pid, "
            "owner_host, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                kind,
                state,
                phase,
                session_id,
                json.dumps(payload),
                priority,
                owner.pid,
                owner.host,
                now,
                now,
            ),
        )
        return int(cur.lastrowid or 0)

    def has_pending(self, kind: str, owner: JobOwner) -> bool:
        row = self._conn.execute(
            "SELECT 1 FROM jobs WHERE kind = ? AND state IN ('queued', 'running') "
            "AND owner_pid = ? AND owner_host = ? LIMIT 1",
            (kind, owner.pid, owner.host),
        ).fetchone()
        return row is not None

    def has_queued(self, kind: str, owner: JobOwner) -> bool:
        row = self._conn.execute(
            "SELECT 1 FROM jobs WHERE kind = ? AND state = 'queued' AND owner_pid = ? "
            "AND owner_host = ? LIMIT 1",
            (kind, owner.pid, owner.host),
        ).fetchone()
        return row is not None

    def claim(
        self, owner: JobOwner, skip_kinds: Collection[str], *, now: str, lease_until: str
    ) -> Job | None:
        skip = sorted(skip_kinds)
        skip_sql = f"AND kind NOT IN ({_marks(skip)})" if skip else ""
        row = self._conn.execute(
            "SELECT id, kind, phase, session_id, attempts, payload FROM jobs "
            "WHERE state = 'queued' AND (not_before IS NULL OR not_before <= ?) "
            "AND ((owner_pid = ? AND owner_host = ?) "
            "OR (owner_pid IS NULL AND owner_host IS NULL)) "
            f"{skip_sql} ORDER BY priority, id LIMIT 1",
            (now, owner.pid, owner.host, *skip),
        ).fetchone()
        if row is None:
            return None
        self._conn.execute(
            "UPDATE jobs SET state = 'running', owner_pid = ?, owner_host = ?, lease_until = ?, "
            "updated_at = ? WHERE id = ?",
            (owner.pid, owner.host, lease_until, now, row[0]),
        )
        return Job(int(row[0]), str(row[1]), str(row[2]), row[3], int(row[4]), load_payload(row[5]))

    def delete(self, job_id: int) -> None:
        self._conn.execute("DELETE FROM jobs WHERE id = ?", (job_id,))

    def set_state(self, job_id: int, state: str, *, now: str) -> None:
        self._conn.execute(
            "UPDATE jobs SET state = ?, lease_until = NULL, updated_at = ? WHERE id = ?",
            (state, now, job_id),
        )

    def attempts(self, job_id: int) -> int | None:
        row = self._conn.execute("SELECT attempts FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return None if row is None else int(row[0])

    def mark_failed(
        self, job_id: int, attempts: int, error: str, *, now: str, failed_kept: int
    ) -> None:
        self._conn.execute(
            "UPDATE jobs SET state = 'failed', attempts = ?, last_error = ?, lease_until = NULL, "
            "updated_at = ? WHERE id = ?",
            (attempts, error, now, job_id),
        )
        self._conn.execute(
            "DELETE FROM jobs WHERE state = 'failed' AND id NOT IN ("
            "SELECT id FROM jobs WHERE state = 'failed' ORDER BY id DESC LIMIT ?)",
            (failed_kept,),
        )

    def retry_later(
        self, job_id: int, attempts: int, error: str, *, not_before: str, now: str
    ) -> None:
        self._conn.execute(
            "UPDATE jobs SET state = 'queued', attempts = ?, last_error = ?, not_before = ?, "
            "lease_until = NULL, updated_at = ? WHERE id = ?",
            (attempts, error, not_before, now, job_id),
        )

    def held_extracts(self, session_id: int) -> list[tuple[int, dict[str, Any]]]:
        rows = self._conn.execute(
            "SELECT id, payload FROM jobs WHERE kind = 'extract' AND state = 'held' "
            "AND session_id = ? ORDER BY id",
            (session_id,),
        ).fetchall()
        return [(int(r[0]), load_payload(r[1])) for r in rows]

    def delete_many(self, job_ids: Collection[int]) -> None:
        ids = list(job_ids)
        if ids:
            self._conn.execute(f"DELETE FROM jobs WHERE id IN ({_marks(ids)})", ids)

    def count_held_extracts(self, session_id: int) -> int:
        row = self._conn.execute(
            "SELECT count(*) FROM jobs WHERE kind = 'extract' AND state = 'held' "
            "AND session_id = ?",
            (session_id,),
        ).fetchone()
        return int(row[0])

    def sessions_with_held_extracts(self, owner: JobOwner) -> list[int]:
        rows = self._conn.execute(
            "SELECT DISTINCT session_id FROM jobs WHERE kind = 'extract' AND state = 'held' "
            "AND session_id IS NOT NULL AND owner_pid = ? AND owner_host = ?",
            (owner.pid, owner.host),
        ).fetchall()
        return [int(r[0]) for r in rows]

    def set_payload(self, job_id: int, payload: dict[str, Any], *, now: str) -> None:
        self._conn.execute(
            "UPDATE jobs SET payload = ?, updated_at = ? WHERE id = ?",
            (json.dumps(payload), now, job_id),
        )

    def latest_queued(self, kind: str, session_id: int) -> tuple[int, dict[str, Any]] | None:
        row = self._conn.execute(
            "SELECT id, payload FROM jobs WHERE kind = ? AND state = 'queued' "
            "AND session_id = ? ORDER BY id DESC LIMIT 1",
            (kind, session_id),
        ).fetchone()
        return None if row is None else (int(row[0]), load_payload(row[1]))

    def requeue_running(self, owner: JobOwner, keep: Collection[int], *, now: str) -> None:
        busy = sorted(keep)
        self._conn.execute(
            "UPDATE jobs SET state = 'queued', lease_until = NULL, updated_at = ? "
            "WHERE state = 'running' AND owner_pid = ? AND owner_host = ? "
            f"AND id NOT IN ({_marks(busy)})",
            (now, owner.pid, owner.host, *busy),
        )

    def requeue_expired(self, *, now: str) -> int:
        return int(
            self._conn.execute(
                "UPDATE jobs SET state = 'queued', lease_until = NULL, updated_at = ? "
                "WHERE state = 'running' AND (lease_until IS NULL OR lease_until < ?)",
                (now, now),
            ).rowcount
        )

    def unfinished_owners(self) -> list[tuple[int, int | None, str | None, str | None]]:
        rows = self._conn.execute(
            "SELECT id, owner_pid, owner_host, updated_at FROM jobs "
            "WHERE state IN ('queued', 'held', 'running')"
        ).fetchall()
        return [(int(r[0]), r[1], r[2], r[3]) for r in rows]

    def adopt(self, job_id: int, owner: JobOwner, *, now: str) -> None:
        self._conn.execute(
            "UPDATE jobs SET owner_pid = ?, owner_host = ?, updated_at = ?, "
            "state = CASE state WHEN 'running' THEN 'queued' ELSE state END, "
            "lease_until = NULL WHERE id = ?",
            (owner.pid, owner.host, now, job_id),
        )

    def touch_owned(self, owner: JobOwner, *, now: str, older_than: str) -> None:
        self._conn.execute(
            "UPDATE jobs SET updated_at = ? WHERE owner_pid = ? AND owner_host = ? "
            "AND updated_at < ?",
            (now, owner.pid, owner.host, older_than),
        )

    def release_owner(self, owner: JobOwner, keep: Collection[int]) -> None:
        busy = sorted(keep)
        self._conn.execute(
            "UPDATE jobs SET owner_pid = NULL, owner_host = NULL, "
            "state = CASE state WHEN 'running' THEN 'queued' ELSE state END, lease_until = NULL "
            "WHERE owner_pid = ? AND owner_host = ? AND state IN ('queued', 'held', 'running') "
            f"AND id NOT IN ({_marks(busy)})",
            (owner.pid, owner.host, *busy),
        )

    def count_owned(self, owner: JobOwner, states: Collection[str]) -> int:
        wanted = list(states)
        row = self._conn.execute(
            "SELECT count(*) FROM jobs WHERE owner_pid = ? AND owner_host = ? "
            f"AND state IN ({_marks(wanted)})",
            (owner.pid, owner.host, *wanted),
        ).fetchone()
        return int(row[0])

    def count_runnable(self, owner: JobOwner, *, now: str) -> int:
        row = self._conn.execute(
            "SELECT count(*) FROM jobs WHERE owner_pid = ? AND owner_host = ? AND (state = "
            "'running' OR (state = 'queued' AND (not_before IS NULL OR not_before <= ?)))",
            (owner.pid, owner.host, now),
        ).fetchone()
        return int(row[0])

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
