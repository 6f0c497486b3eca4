"""The durable job queue (SPEC §4.2 ``jobs``, §5.11, §6).

Background work lives in the ``jobs`` table, not in memory, so it survives a crash: a job is
``queued`` (ready), ``held`` (an extract waiting for its batch or session end), ``running``
(claimed under a 10-minute lease) or ``failed`` (after 3 attempts). A finished job is deleted.
Each job has an owner process; at open, jobs of dead or silent owners are adopted and expired
leases return to ``queued``.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from ..clock import now_ts, ts_minus, ts_plus
from ..memory.episodic import ORPHAN_HEARTBEAT_SECONDS, Owner, owner_is_gone
from ..storage.jobs import Job
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
    return conn.jobs.add(
        kind,
        owner,
        state=state,
        phase=phase,
        session_id=session_id,
        payload=payload or {},
        priority=PRIORITY[kind],
        now=now_ts(),
    )


def has_pending(conn: Tx, kind: str, owner: Owner) -> bool:
    return conn.jobs.has_pending(kind, owner)


def claim(conn: Tx, owner: Owner, skip_kinds: frozenset[str]) -> Job | None:
    """Take the next runnable job for this process (call inside ``atomic()``)."""
    return conn.jobs.claim(owner, skip_kinds, now=now_ts(), lease_until=ts_plus(LEASE_SECONDS))


def complete(conn: Tx, job_id: int) -> None:
    conn.jobs.delete(job_id)


def set_state(conn: Tx, job_id: int, state: str) -> None:
    conn.jobs.set_state(job_id, state, now=now_ts())


def fail(conn: Tx, job_id: int, error: str) -> bool:
    """Count a failed attempt: retry after 10 s, then 60 s, then mark failed. True if failed."""
    before = conn.jobs.attempts(job_id)
    if before is None:
        return False
    attempts = before + 1
    now = now_ts()
    if attempts >= MAX_ATTEMPTS:
        conn.jobs.mark_failed(
            job_id, attempts, error[:ERROR_TEXT_LIMIT], now=now, failed_kept=FAILED_KEPT
        )
        return True
    delay = RETRY_DELAYS_SECONDS[min(attempts, len(RETRY_DELAYS_SECONDS)) - 1]
    conn.jobs.retry_later(
        job_id, attempts, error[:ERROR_TEXT_LIMIT], not_before=ts_plus(delay), now=now
    )
    return False


def release_held_extracts(conn: Tx, session_id: int, owner: Owner, phase: str) -> int | None:
    """Merge a session's held extract jobs into one queued job listing their turns in order."""
    held = conn.jobs.held_extracts(session_id)
    if not held:
        return None
    turns: list[int] = []
    for _, payload in held:
        for turn in payload.get("turns", []):
            if isinstance(turn, int) and turn not in turns:
                turns.append(turn)
    conn.jobs.delete_many([job_id for job_id, _ in held])
    return enqueue(
        conn, "extract", owner, phase=phase, session_id=session_id, payload={"turns": turns}
    )


def set_payload(conn: Tx, job_id: int, payload: dict[str, Any]) -> None:
    """Set a job's payload (a handler recording what is left when it stops early)."""
    conn.jobs.set_payload(job_id, payload, now=now_ts())


def count_held_extracts(conn: Tx, session_id: int) -> int:
    return conn.jobs.count_held_extracts(session_id)


def sessions_with_held_extracts(conn: Tx, owner: Owner) -> list[int]:
    return conn.jobs.sessions_with_held_extracts(owner)


def recover(conn: Tx, me: Owner, running_here: Collection[int] = ()) -> tuple[int, int]:
    """Requeue expired leases and adopt jobs of dead or silent owners (§6). Returns counts.

    A job ``running`` under this very process that no thread here runs (``running_here``)
    is requeued too: its worker outlived a close() inside a host call and could not record
    the outcome, and the live pid would otherwise keep it until its lease ran out.
    """
    now = now_ts()
    conn.jobs.requeue_running(me, running_here, now=now)
    requeued = conn.jobs.requeue_expired(now=now)
    adopted = 0
    for job_id, pid, host, updated_at in conn.jobs.unfinished_owners():
        if pid == me.pid and host == me.host:
            continue
        if owner_is_gone(pid, host, updated_at, me):
            conn.jobs.adopt(job_id, me, now=now)
            adopted += 1
    return requeued, adopted


def refresh_ownership(conn: Tx, me: Owner) -> None:
    """Keep this process's jobs from looking abandoned (``updated_at`` older than 900 s)."""
    conn.jobs.touch_owned(me, now=now_ts(), older_than=ts_minus(ORPHAN_HEARTBEAT_SECONDS / 3))


def clear_owner(conn: Tx, me: Owner, still_running: Collection[int] = ()) -> None:
    """At close: unfinished jobs lose their owner so the next open adopts them at once.

    ``still_running`` are jobs a worker thread of this process is still executing (a host
    call that outlived the close): they keep their owner and lease, or another process
    would run them a second time meanwhile.
    """
    conn.jobs.release_owner(me, still_running)


def count_for_owner(conn: Tx, me: Owner, states: tuple[str, ...]) -> int:
    return conn.jobs.count_owned(me, states)


def count_runnable(conn: Tx, me: Owner) -> int:
    """Running jobs, and queued jobs not waiting out a retry delay, owned by this process."""
    return conn.jobs.count_runnable(me, now=now_ts())
