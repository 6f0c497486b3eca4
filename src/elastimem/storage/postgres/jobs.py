"""PostgreSQL implementation of ``storage.jobs.JobRows``: one user's durable job queue.

``claim`` takes the next job with ``SELECT … FOR UPDATE SKIP LOCKED`` (priority, then id),
then marks it ``running`` under its owner with a lease, in the caller's transaction: a row
another transaction is claiming is passed over, never waited for, so two processes never
take one job, whichever machine they run on (writers of one user are serialised anyway by
the user's advisory lock, ``database``; the row lock is what makes ``claim`` safe on its
own). A process killed while it runs a job leaves it ``running`` until its lease ends;
``requeue_expired`` then puts it back, so it runs again and is never lost.

Ids come from a sequence all users share, so "the newest" is by id within the user's rows.
Every statement names the user as well as being confined to it by row-level security.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from ..jobs import Job, JobOwner, JobRows, load_payload
from .sql import limit as _limit


class PostgresJobRows:
    """``JobRows`` for one user on one psycopg connection (inside the caller's
    transaction)."""

    __slots__ = ("_conn", "_user")

    def __init__(self, conn: Any, user_id: str) -> None:
        self._conn = conn
        self._user = user_id

    def _count(self, sql: str, *params: object) -> int:
        return int(self._conn.execute(sql, (self._user, *params)).fetchone()[0])

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
        row = self._conn.execute(
            "INSERT INTO jobs (user_id, kind, state, phase, session_id, payload, priority, "
            "owner_pid, owner_host, created_at, updated_at) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id",
            (
                self._user,
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
        ).fetchone()
        return int(row[0])

    def has_pending(self, kind: str, owner: JobOwner) -> bool:
        row = self._conn.execute(
            "SELECT 1 FROM jobs WHERE user_id = %s AND kind = %s "
            "AND state IN ('queued', 'running') AND owner_pid = %s AND owner_host = %s LIMIT 1",
            (self._user, kind, owner.pid, owner.host),
        ).fetchone()
        return row is not None

    def has_queued(self, kind: str, owner: JobOwner) -> bool:
        row = self._conn.execute(
            "SELECT 1 FROM jobs WHERE user_id = %s AND kind = %s AND state = 'queued' "
            "AND owner_pid = %s AND owner_host = %s LIMIT 1",
            (self._user, kind, owner.pid, owner.host),
        ).fetchone()
        return row is not None

    def claim(
        self, owner: JobOwner, skip_kinds: Collection[str], *, now: str, lease_until: str
    ) -> Job | None:
        row = self._conn.execute(
            "UPDATE jobs SET state = 'running', owner_pid = %s, owner_host = %s, "
            "lease_until = %s, updated_at = %s "
            "WHERE user_id = %s AND id = ("
            "SELECT id FROM jobs WHERE user_id = %s AND state = 'queued' "
            "AND (not_before IS NULL OR not_before <= %s) "
            "AND ((owner_pid = %s AND owner_host = %s) "
            "OR (owner_pid IS NULL AND owner_host IS NULL)) "
            "AND kind <> ALL(%s::text[]) "
            "ORDER BY priority, id LIMIT 1 FOR UPDATE SKIP LOCKED) "
            "RETURNING id, kind, phase, session_id, attempts, payload",
            (
                owner.pid,
                owner.host,
                lease_until,
                now,
                self._user,
                self._user,
                now,
                owner.pid,
                owner.host,
                sorted(skip_kinds),
            ),
        ).fetchone()
        if row is None:
            return None
        session_id = None if row[3] is None else int(row[3])
        return Job(
            int(row[0]), str(row[1]), str(row[2]), session_id, int(row[4]), load_payload(row[5])
        )

    def delete(self, job_id: int) -> None:
        self._conn.execute("DELETE FROM jobs WHERE user_id = %s AND id = %s", (self._user, job_id))

    def set_state(self, job_id: int, state: str, *, now: str) -> None:
        self._conn.execute(
            "UPDATE jobs SET state = %s, lease_until = NULL, updated_at = %s "
            "WHERE user_id = %s AND id = %s",
            (state, now, self._user, job_id),
        )

    def attempts(self, job_id: int) -> int | None:
        row = self._conn.execute(
            "SELECT attempts FROM jobs WHERE user_id = %s AND id = %s", (self._user, job_id)
        ).fetchone()
        return None if row is None else int(row[0])

    def mark_failed(
        self, job_id: int, attempts: int, error: str, *, now: str, failed_kept: int
    ) -> None:
        self._conn.execute(
            "UPDATE jobs SET state = 'failed', attempts = %s, last_error = %s, "
            "lease_until = NULL, updated_at = %s WHERE user_id = %s AND id = %s",
            (attempts, error, now, self._user, job_id),
        )
        self._conn.execute(
            "DELETE FROM jobs WHERE user_id = %s AND state = 'failed' AND id NOT IN ("
            "SELECT id FROM jobs WHERE user_id = %s AND state = 'failed' "
            "ORDER BY id DESC LIMIT %s)",
            (self._user, self._user, _limit(failed_kept)),
        )

    def retry_later(
        self, job_id: int, attempts: int, error: str, *, not_before: str, now: str
    ) -> None:
        self._conn.execute(
            "UPDATE jobs SET state = 'queued', attempts = %s, last_error = %s, not_before = %s, "
            "lease_until = NULL, updated_at = %s WHERE user_id = %s AND id = %s",
            (attempts, error, not_before, now, self._user, job_id),
        )

    def held_extracts(self, session_id: int) -> list[tuple[int, dict[str, Any]]]:
        rows = self._conn.execute(
            "SELECT id, payload FROM jobs WHERE user_id = %s AND kind = 'extract' "
            "AND state = 'held' AND session_id = %s ORDER BY id",
            (self._user, session_id),
        ).fetchall()
        return [(int(r[0]), load_payload(r[1])) for r in rows]

    def delete_many(self, job_ids: Collection[int]) -> None:
        ids = [int(i) for i in job_ids]
        if ids:
            self._conn.execute(
                "DELETE FROM jobs WHERE user_id = %s AND id = ANY(%s::bigint[])", (self._user, ids)
            )

    def count_held_extracts(self, session_id: int) -> int:
        return self._count(
            "SELECT count(*) FROM jobs WHERE user_id = %s AND kind = 'extract' "
            "AND state = 'held' AND session_id = %s",
            session_id,
        )

    def sessions_with_held_extracts(self, owner: JobOwner) -> list[int]:
        rows = self._conn.execute(
            "SELECT DISTINCT session_id FROM jobs WHERE user_id = %s AND kind = 'extract' "
            "AND state = 'held' AND session_id IS NOT NULL AND owner_pid = %s "
            "AND owner_host = %s",
            (self._user, owner.pid, owner.host),
        ).fetchall()
        return [int(r[0]) for r in rows]

    def set_payload(self, job_id: int, payload: dict[str, Any], *, now: str) -> None:
        self._conn.execute(
            "UPDATE jobs SET payload = %s, updated_at = %s WHERE user_id = %s AND id = %s",
            (json.dumps(payload), now, self._user, job_id),
        )

    def latest_queued(self, kind: str, session_id: int) -> tuple[int, dict[str, Any]] | None:
        row = self._conn.execute(
            "SELECT id, payload FROM jobs WHERE user_id = %s AND kind = %s AND state = 'queued' "
            "AND session_id = %s ORDER BY id DESC LIMIT 1",
            (self._user, kind, session_id),
        ).fetchone()
        return None if row is None else (int(row[0]), load_payload(row[1]))

    def requeue_running(self, owner: JobOwner, keep: Collection[int], *, now: str) -> None:
        self._conn.execute(
            "UPDATE jobs SET state = 'queued', lease_until = NULL, updated_at = %s "
            "WHERE user_id = %s AND state = 'running' AND owner_pid = %s AND owner_host = %s "
            "AND id <> ALL(%s::bigint[])",
            (now, self._user, owner.pid, owner.host, sorted(int(i) for i in keep)),
        )

    def requeue_expired(self, *, now: str) -> int:
        cur = self._conn.execute(
            "UPDATE jobs SET state = 'queued', lease_until = NULL, updated_at = %s "
            "WHERE user_id = %s AND state = 'running' "
            "AND (lease_until IS NULL OR lease_until < %s)",
            (now, self._user, now),
        )
        return int(cur.rowcount)

    def unfinished_owners(self) -> list[tuple[int, int | None, str | None, str | None]]:
        rows = self._conn.execute(
            "SELECT id, owner_pid, owner_host, updated_at FROM jobs WHERE user_id = %s "
            "AND state IN ('queued', 'held', 'running')",
            (self._user,),
        ).fetchall()
        return [(int(r[0]), None if r[1] is None else int(r[1]), r[2], r[3]) for r in rows]

    def adopt(self, job_id: int, owner: JobOwner, *, now: str) -> None:
        self._conn.execute(
            "UPDATE jobs SET owner_pid = %s, owner_host = %s, updated_at = %s, "
            "state = CASE state WHEN 'running' THEN 'queued' ELSE state END, "
            "lease_until = NULL WHERE user_id = %s AND id = %s",
            (owner.pid, owner.host, now, self._user, job_id),
        )

    def touch_owned(self, owner: JobOwner, *, now: str, older_than: str) -> None:
        self._conn.execute(
            "UPDATE jobs SET updated_at = %s WHERE user_id = %s AND owner_pid = %s "
            "AND owner_host = %s AND updated_at < %s",
            (now, self._user, owner.pid, owner.host, older_than),
        )

    def release_owner(self, owner: JobOwner, keep: Collection[int]) -> None:
        self._conn.execute(
            "UPDATE jobs SET owner_pid = NULL, owner_host = NULL, "
            "state = CASE state WHEN 'running' THEN 'queued' ELSE state END, lease_until = NULL "
            "WHERE user_id = %s AND owner_pid = %s AND owner_host = %s "
            "AND state IN ('queued', 'held', 'running') AND id <> ALL(%s::bigint[])",
            (self._user, owner.pid, owner.host, sorted(int(i) for i in keep)),
        )

    def count_owned(self, owner: JobOwner, states: Collection[str]) -> int:
        return self._count(
            "SELECT count(*) FROM jobs WHERE user_id = %s AND owner_pid = %s "
            "AND owner_host = %s AND state = ANY(%s::text[])",
            owner.pid,
            owner.host,
            list(states),
        )

    def count_runnable(self, owner: JobOwner, *, now: str) -> int:
        return self._count(
            "SELECT count(*) FROM jobs WHERE user_id = %s AND owner_pid = %s "
            "AND owner_host = %s AND (state = 'running' OR (state = 'queued' "
            "AND (not_before IS NULL OR not_before <= %s)))",
            owner.pid,
            owner.host,
            now,
        )

    # -- for the facade (session end) -------------------------------------------------------

    def count_unfinished(self, job_ids: list[int]) -> int:
        if not job_ids:
            return 0
        return self._count(
            "SELECT count(*) FROM jobs WHERE user_id = %s AND id = ANY(%s::bigint[]) "
            "AND state IN ('queued', 'running')",
            [int(i) for i in job_ids],
        )


if TYPE_CHECKING:  # mypy proves the class implements the interface

    def _implements(conn: Any) -> JobRows:
        return PostgresJobRows(conn, "user")
