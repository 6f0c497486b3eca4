"""Contract: ``tx.jobs`` (storage.jobs.JobRows) on every backend."""

from __future__ import annotations

from typing import Any

from tests.storage.contract.seed import ME, OTHER, session

T0 = "2025-01-01T00:00:00.000000Z"
T1 = "2025-01-01T00:05:00.000000Z"
T2 = "2025-01-01T00:10:00.000000Z"
FAR = "2999-01-01T00:00:00.000000Z"


def add(tx: Any, kind: str = "embed", owner: Any = ME, **kw: Any) -> int:
    values: dict[str, Any] = {
        "state": "queued",
        "phase": "turn",
        "session_id": None,
        "payload": {},
        "priority": 1,
        "now": T0,
    }
    values.update(kw)
    return int(tx.jobs.add(kind, owner, **values))


def test_add_then_claim_in_priority_then_id_order(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        late = add(tx, "consolidate", priority=4, payload={"n": 1})
        first = add(tx, "embed", priority=1, payload={"chunk_ids": [1, 2]})
        second = add(tx, "link", priority=1)
        assert len({late, first, second}) == 3
        claimed = tx.jobs.claim(ME, (), now=T1, lease_until=FAR)
        assert claimed is not None
        assert (claimed.id, claimed.kind, claimed.phase, claimed.session_id) == (
            first,
            "embed",
            "turn",
            None,
        )
        assert (claimed.attempts, claimed.payload) == (0, {"chunk_ids": [1, 2]})
        assert tx.jobs.claim(ME, {"link"}, now=T1, lease_until=FAR).id == late
        assert tx.jobs.claim(ME, (), now=T1, lease_until=FAR).id == second
        assert tx.jobs.claim(ME, (), now=T1, lease_until=FAR) is None  # all running


def test_claim_takes_only_own_or_ownerless_jobs(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        foreign = add(tx, owner=OTHER)
        assert tx.jobs.claim(ME, (), now=T1, lease_until=FAR) is None
        tx.jobs.release_owner(OTHER, ())
        taken = tx.jobs.claim(ME, (), now=T1, lease_until=FAR)
        assert taken is not None and taken.id == foreign
        assert tx.jobs.count_owned(ME, ("running",)) == 1


def test_pending_and_queued(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        assert not tx.jobs.has_pending("embed", ME) and not tx.jobs.has_queued("embed", ME)
        job = add(tx)
        assert tx.jobs.has_pending("embed", ME) and tx.jobs.has_queued("embed", ME)
        assert not tx.jobs.has_pending("embed", OTHER) and not tx.jobs.has_pending("link", ME)
        tx.jobs.claim(ME, (), now=T1, lease_until=FAR)
        assert tx.jobs.has_pending("embed", ME) and not tx.jobs.has_queued("embed", ME)
        tx.jobs.set_state(job, "held", now=T1)
        assert not tx.jobs.has_pending("embed", ME)
        tx.jobs.delete(job)
        assert tx.jobs.attempts(job) is None and tx.jobs.count_owned(ME, ("held",)) == 0


def test_attempts_retry_and_failure(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        job = add(tx)
        assert tx.jobs.attempts(job) == 0
        tx.jobs.claim(ME, (), now=T0, lease_until=FAR)
        tx.jobs.retry_later(job, 1, "boom", not_before=T2, now=T0)
        assert tx.jobs.attempts(job) == 1
        assert tx.jobs.claim(ME, (), now=T1, lease_until=FAR) is None  # not before T2
        assert tx.jobs.count_runnable(ME, now=T1) == 0
        assert tx.jobs.count_runnable(ME, now=T2) == 1
        again = tx.jobs.claim(ME, (), now=T2, lease_until=FAR)
        assert again is not None and again.attempts == 1
        tx.jobs.mark_failed(job, 3, "boom again", now=T2, failed_kept=10)
        assert tx.jobs.attempts(job) == 3
        assert tx.jobs.count_owned(ME, ("failed",)) == 1
        assert tx.jobs.count_runnable(ME, now=T2) == 0


def test_mark_failed_keeps_only_the_newest_failures(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        jobs = [add(tx) for _ in range(3)]
        for job in jobs:
            tx.jobs.mark_failed(job, 3, "x", now=T1, failed_kept=2)
        assert tx.jobs.attempts(jobs[0]) is None
        assert tx.jobs.attempts(jobs[1]) == tx.jobs.attempts(jobs[2]) == 3


def test_held_extracts_by_session(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        one, two = session(tx), session(tx)
        a = add(tx, "extract", state="held", session_id=one, payload={"turns": [1]})
        b = add(tx, "extract", state="held", session_id=one, payload={"turns": [2]})
        add(tx, "extract", state="held", session_id=two, owner=OTHER)
        add(tx, "extract", state="queued", session_id=one)
        assert tx.jobs.count_held_extracts(one) == 2
        assert tx.jobs.held_extracts(one) == [(a, {"turns": [1]}), (b, {"turns": [2]})]
        assert sorted(tx.jobs.sessions_with_held_extracts(ME)) == [one]
        assert tx.jobs.sessions_with_held_extracts(OTHER) == [two]
        tx.jobs.delete_many([a, b])
        tx.jobs.delete_many([])
        assert tx.jobs.count_held_extracts(one) == 0


def test_payload_and_latest_queued(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        sid = session(tx)
        assert tx.jobs.latest_queued("rolling_summary", sid) is None
        older = add(tx, "rolling_summary", session_id=sid, payload={"evicted": [["a", "b"]]})
        newer = add(tx, "rolling_summary", session_id=sid, payload={"evicted": []})
        assert tx.jobs.latest_queued("rolling_summary", sid) == (newer, {"evicted": []})
        tx.jobs.set_payload(newer, {"evicted": [["c", "d"]]}, now=T1)
        assert tx.jobs.latest_queued("rolling_summary", sid) == (newer, {"evicted": [["c", "d"]]})
        tx.jobs.set_state(newer, "held", now=T1)
        assert tx.jobs.latest_queued("rolling_summary", sid) == (older, {"evicted": [["a", "b"]]})


def test_recovery_requeues_and_adopts(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        kept, lost = add(tx), add(tx)
        expired = add(tx, owner=OTHER)
        for _ in range(2):
            tx.jobs.claim(ME, (), now=T0, lease_until=FAR)
        tx.jobs.claim(OTHER, (), now=T0, lease_until=T1)
        tx.jobs.requeue_running(ME, [kept], now=T1)
        assert tx.jobs.count_owned(ME, ("running",)) == 1
        assert tx.jobs.count_owned(ME, ("queued",)) == 1
        assert tx.jobs.requeue_expired(now=T2) == 1  # OTHER's lease ended at T1
        assert tx.jobs.count_owned(OTHER, ("queued",)) == 1
        owners = {job: (pid, host) for job, pid, host, _at in tx.jobs.unfinished_owners()}
        assert owners == {
            kept: (ME.pid, ME.host),
            lost: (ME.pid, ME.host),
            expired: (OTHER.pid, OTHER.host),
        }
        tx.jobs.adopt(expired, ME, now=T2)
        assert tx.jobs.count_owned(OTHER, ("queued", "running")) == 0
        assert tx.jobs.count_owned(ME, ("queued", "running")) == 3


def test_adopt_puts_a_running_job_back_in_the_queue(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        job = add(tx, owner=OTHER)
        tx.jobs.claim(OTHER, (), now=T0, lease_until=FAR)
        tx.jobs.adopt(job, ME, now=T1)
        assert tx.jobs.count_owned(ME, ("queued",)) == 1


def test_touch_owned_refreshes_only_old_stamps(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        job = add(tx, now=T0)
        add(tx, owner=OTHER, now=T0)
        tx.jobs.touch_owned(ME, now=T2, older_than=T1)
        stamps = {j: at for j, _pid, _host, at in tx.jobs.unfinished_owners()}
        assert stamps[job] == T2 and sorted(stamps.values()) == [T0, T2]
        tx.jobs.touch_owned(ME, now=FAR, older_than=T1)  # T2 is not older than T1
        assert {j: at for j, _p, _h, at in tx.jobs.unfinished_owners()}[job] == T2


def test_release_owner_keeps_the_jobs_still_running(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        busy, idle, held = add(tx), add(tx), add(tx, state="held")
        tx.jobs.claim(ME, (), now=T0, lease_until=FAR)
        tx.jobs.claim(ME, (), now=T0, lease_until=FAR)
        tx.jobs.release_owner(ME, [busy])
        owners = {job: pid for job, pid, _host, _at in tx.jobs.unfinished_owners()}
        assert owners == {busy: ME.pid, idle: None, held: None}
        assert tx.jobs.count_owned(ME, ("running",)) == 1
        taken = tx.jobs.claim(ME, (), now=T1, lease_until=FAR)  # idle is queued again
        assert taken is not None and taken.id == idle


def test_count_owned_and_runnable(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        add(tx, state="held")
        add(tx)
        add(tx, owner=OTHER)
        assert tx.jobs.count_owned(ME, ("queued", "held")) == 2
        assert tx.jobs.count_owned(ME, ("failed",)) == 0
        assert tx.jobs.count_runnable(ME, now=T0) == 1
        assert tx.jobs.count_runnable(OTHER, now=T0) == 1
