"""The durable job queue (SPEC §4.2 ``jobs``, §5.11, §6).

Background work lives in the ``jobs`` table, not in memory, so it survives a crash: a job is
``queued`` (ready), ``held`` (an extract waiting for its batch or session end), ``running``
(claimed under a 10-minute lease) or ``failed`` (after 3 attempts). A finished job is deleted.
Each job has an owner process; at open, jobs of dead or silent owners are adopted and expired
leases return to ``queued``.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from ..clock import now_ts, ts_minus, ts_plus
from ..memory.episodic import ORPHAN_HEARTBEAT_SECONDS, Owner, owner_is_gone
from ..storage.tx import Tx

PRIORITY = {
    "embed": 1,
    "link": 1,
    "extract": 2,
    "rolling_summary": 2,
    "session_summary": 3,
    "consolidate": 4,
}
LLM_KINDS = frozenset({"extract", "rolling_summary", "session_summary", "consolidate"})
LEASE_SECONDS = 600.0
RETRY_DELAYS_SECONDS = (10.0, 60.0)
MAX_ATTEMPTS = 3
FAILED_KEPT = 200
ERROR_TEXT_LIMIT = 500


class JobDeferred(Exception):
    """Put the job back to ``queued`` without counting an attempt (foreground, closing)."""


class ReportedFailure(Exception):
    """A failed attempt whose cause the user was already told about (the host embedder's
    give-up warning): it counts an attempt like any failure, and the worker logs it at debug
    level instead of warning once more per attempt. Raised ``from`` the cause."""


class JobHeld(Exception):
    """Put an extract job back to ``held`` (LITE with the session-end opt-in)."""


@dataclass(frozen=True)
class Job:
    id: int
    kind: str
    phase: str
    session_id: int | None
    attempts: int
    payload: dict[str, Any] = field(default_factory=dict)


def _load_payload(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def enqueue(
    conn: Tx,
    kind: str,
    owner: Owner,
    *,
    state: str = "queued",
    phase: str = "turn",
    session_id: int | None = None,
    payload: dict[str, Any] | None = None,
) -> int:
    now = now_ts()
    cur = conn.execute(
        "INSERT INTO jobs (kind, state, phase, session_id, payload, priority, owner_pid, "
        "owner_host, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            kind,
            state,
            phase,
            session_id,
            json.dumps(payload or {}),
            PRIORITY[kind],
            owner.pid,
            owner.host,
            now,
            now,
        ),
    )
    return int(cur.lastrowid or 0)


def has_pending(conn: Tx, kind: str, owner: Owner) -> bool:
    row = conn.execute(
        "SELECT 1 FROM jobs WHERE kind = ? AND state IN ('queued', 'running') "
        "AND owner_pid = ? AND owner_host = ? LIMIT 1",
        (kind, owner.pid, owner.host),
    ).fetchone()
    return row is not None


def claim(conn: Tx, owner: Owner, skip_kinds: frozenset[str]) -> Job | None:
    """Take the next runnable job for this process (call inside ``atomic()``)."""
    now = now_ts()
    skip = sorted(skip_kinds)
    skip_sql = f"AND kind NOT IN ({','.join('?' * len(skip))})" if skip else ""
    row = conn.execute(
        "SELECT id, kind, phase, session_id, attempts, payload FROM jobs "
        "WHERE state = 'queued' AND (not_before IS NULL OR not_before <= ?) "
        "AND ((owner_pid = ? AND owner_host = ?) OR (owner_pid IS NULL AND owner_host IS NULL)) "
        f"{skip_sql} ORDER BY priority, id LIMIT 1",
        (now, owner.pid, owner.host, *skip),
    ).fetchone()
    if row is None:
        return None
    conn.execute(
        "UPDATE jobs SET state = 'running', owner_pid = ?, owner_host = ?, lease_until = ?, "
        "updated_at = ? WHERE id = ?",
        (owner.pid, owner.host, ts_plus(LEASE_SECONDS), now, row[0]),
    )
    return Job(int(row[0]), str(row[1]), str(row[2]), row[3], int(row[4]), _load_payload(row[5]))


def complete(conn: Tx, job_id: int) -> None:
    conn.execute("DELETE FROM jobs WHERE id = ?", (job_id,))


def set_state(conn: Tx, job_id: int, state: str) -> None:
    conn.execute(
        "UPDATE jobs SET state = ?, lease_until = NULL, updated_at = ? WHERE id = ?",
        (state, now_ts(), job_id),
    )


def fail(conn: Tx, job_id: int, error: str) -> bool:
    """Count a failed attempt: retry after 10 s, then 60 s, then mark failed. True if failed."""
    row = conn.execute("SELECT attempts FROM jobs WHERE id = ?", (job_id,)).fetchone()
    if row is None:
        return False
    attempts = int(row[0]) + 1
    now = now_ts()
    if attempts >= MAX_ATTEMPTS:
        conn.execute(
            "UPDATE jobs SET state = 'failed', attempts = ?, last_error = ?, lease_until = NULL, "
            "updated_at = ? WHERE id = ?",
            (attempts, error[:ERROR_TEXT_LIMIT], now, job_id),
        )
        conn.execute(
            "DELETE FROM jobs WHERE state = 'failed' AND id NOT IN ("
            "SELECT id FROM jobs WHERE state = 'failed' ORDER BY id DESC LIMIT ?)",
            (FAILED_KEPT,),
        )
        return True
    delay = RETRY_DELAYS_SECONDS[min(attempts, len(RETRY_DELAYS_SECONDS)) - 1]
    conn.execute(
        "UPDATE jobs SET state = 'queued', attempts = ?, last_error = ?, not_before = ?, "
        "lease_until = NULL, updated_at = ? WHERE id = ?",
        (attempts, error[:ERROR_TEXT_LIMIT], ts_plus(delay), now, job_id),
    )
    return False


def release_held_extracts(conn: Tx, session_id: int, owner: Owner, phase: str) -> int | None:
    """Merge a session's held extract jobs into one queued job listing their turns in order."""
    rows = conn.execute(
        "SELECT id, payload FROM jobs WHERE kind = 'extract' AND state = 'held' "
        "AND session_id = ? ORDER BY id",
        (session_id,),
    ).fetchall()
    if not rows:
        return None
    turns: list[int] = []
    for _, payload in rows:
        for turn in _load_payload(payload).get("turns", []):
            if isinstance(turn, int) and turn not in turns:
                turns.append(turn)
    conn.execute(
        f"DELETE FROM jobs WHERE id IN ({','.join('?' * len(rows))})", [r[0] for r in rows]
    )
    return enqueue(
        conn, "extract", owner, phase=phase, session_id=session_id, payload={"turns": turns}
    )


def set_payload(conn: Tx, job_id: int, payload: dict[str, Any]) -> None:
    """Replace a job's payload (a handler recording what is left when it stops early)."""
    conn.execute(
        "UPDATE jobs SET payload = ?, updated_at = ? WHERE id = ?",
        (json.dumps(payload), now_ts(), job_id),
    )


def count_held_extracts(conn: Tx, session_id: int) -> int:
    row = conn.execute(
        "SELECT count(*) FROM jobs WHERE kind = 'extract' AND state = 'held' AND session_id = ?",
        (session_id,),
    ).fetchone()
    return int(row[0])


def sessions_with_held_extracts(conn: Tx, owner: Owner) -> list[int]:
    rows = conn.execute(
        "SELECT DISTINCT session_id FROM jobs WHERE kind = 'extract' AND state = 'held' "
        "AND session_id IS NOT NULL AND owner_pid = ? AND owner_host = ?",
        (owner.pid, owner.host),
    ).fetchall()
    return [int(r[0]) for r in rows]


def recover(conn: Tx, me: Owner, running_here: Collection[int] = ()) -> tuple[int, int]:
    """Requeue expired leases and adopt jobs of dead or silent owners (§6). Returns counts.

    A job ``running`` under this very process that no thread here runs (``running_here``)
    is requeued too: its worker outlived a close() inside a host call and could not record
    the outcome, and the live pid would otherwise keep it until its lease ran out.
    """
    now = now_ts()
    busy = sorted(running_here)
    conn.execute(
        "UPDATE jobs SET state = 'queued', lease_until = NULL, updated_at = ? "
        "WHERE state = 'running' AND owner_pid = ? AND owner_host = ? "
        f"AND id NOT IN ({','.join('?' * len(busy))})",
        (now, me.pid, me.host, *busy),
    )
    requeued = conn.execute(
        "UPDATE jobs SET state = 'queued', lease_until = NULL, updated_at = ? "
        "WHERE state = 'running' AND (lease_until IS NULL OR lease_until < ?)",
        (now, now),
    ).rowcount
    adopted = 0
    rows = conn.execute(
        "SELECT id, owner_pid, owner_host, updated_at FROM jobs "
        "WHERE state IN ('queued', 'held', 'running')"
    ).fetchall()
    for job_id, pid, host, updated_at in rows:
        if pid == me.pid and host == me.host:
            continue
        if owner_is_gone(pid, host, updated_at, me):
            conn.execute(
                "UPDATE jobs SET owner_pid = ?, owner_host = ?, updated_at = ?, "
                "state = CASE state WHEN 'running' THEN 'queued' ELSE state END, "
                "lease_until = NULL WHERE id = ?",
                (me.pid, me.host, now, job_id),
            )
            adopted += 1
    return int(requeued), adopted


def refresh_ownership(conn: Tx, me: Owner) -> None:
    """Keep this process's jobs from looking abandoned (``updated_at`` older than 900 s)."""
    conn.execute(
        "UPDATE jobs SET updated_at = ? WHERE owner_pid = ? AND owner_host = ? AND updated_at < ?",
        (now_ts(), me.pid, me.host, ts_minus(ORPHAN_HEARTBEAT_SECONDS / 3)),
    )


def clear_owner(conn: Tx, me: Owner, still_running: Collection[int] = ()) -> None:
    """At close: unfinished jobs lose their owner so the next open adopts them at once.

    ``still_running`` are jobs a worker thread of this process is still executing (a host
    call that outlived the close): they keep their owner and lease, or another process
    would run them a second time meanwhile.
    """
    busy = sorted(still_running)
    conn.execute(
        "UPDATE jobs SET owner_pid = NULL, owner_host = NULL, "
        "state = CASE state WHEN 'running' THEN 'queued' ELSE state END, lease_until = NULL "
        "WHERE owner_pid = ? AND owner_host = ? AND state IN ('queued', 'held', 'running') "
        f"AND id NOT IN ({','.join('?' * len(busy))})",
        (me.pid, me.host, *busy),
    )


def count_for_owner(conn: Tx, me: Owner, states: tuple[str, ...]) -> int:
    marks = ",".join("?" * len(states))
    row = conn.execute(
        f"SELECT count(*) FROM jobs WHERE owner_pid = ? AND owner_host = ? AND state IN ({marks})",
        (me.pid, me.host, *states),
    ).fetchone()
    return int(row[0])


def count_runnable(conn: Tx, me: Owner) -> int:
    """Running jobs, and queued jobs not waiting out a retry delay, owned by this process."""
    row = conn.execute(
        "SELECT count(*) FROM jobs WHERE owner_pid = ? AND owner_host = ? AND (state = 'running' "
        "OR (state = 'queued' AND (not_before IS NULL OR not_before <= ?)))",
        (me.pid, me.host, now_ts()),
    ).fetchone()
    return int(row[0])
