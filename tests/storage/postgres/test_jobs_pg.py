"""The job queue on PostgreSQL between real processes: ``claim`` passes over a job another
transaction holds (``FOR UPDATE SKIP LOCKED``), processes draining one user's queue run
every job exactly once, and a job whose process was killed is run again once its lease
ends (requeued, then adopted from its dead owner as ``runtime.queue.recover`` does)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import pytest

from tests import pg_server

psycopg = pytest.importorskip("psycopg", reason=pg_server.NO_DRIVER)

T0 = "2026-01-01T00:00:00.000000Z"
LEASE_END = "2026-01-01T00:05:00.000000Z"
AFTER_LEASE = "2026-01-01T00:06:00.000000Z"
BEFORE_LEASE = "2026-01-01T00:04:00.000000Z"


@dataclass(frozen=True)
class Owner:
    pid: int
    host: str


QUEUER = Owner(1, "queuer")

# A worker process: claims jobs of the user (argv: address, user, pid, mode, now, lease
# end) until none is left, printing each id as it takes it. Mode "drain" runs each job
# (deletes it) in its own transaction after the claim; "hang" stops after its first claim,
# mid-job, until killed; "hang-in-claim" stops inside the claiming transaction.
WORKER = """
import sys, time
from dataclasses import dataclass
from elastimem.storage.postgres.database import open_database

@dataclass(frozen=True)
class Owner:
    pid: int
    host: str

url, user, pid, mode, now, lease = sys.argv[1:]
pid = int(pid)
owner = Owner(pid, "worker")
database = open_database(url, user, create=False)
while True:
    with database.atomic() as tx:
        job = tx.jobs.claim(owner, (), now=now, lease_until=lease)
        if job is not None and mode == "hang-in-claim":
            print(job.id, flush=True)
            time.sleep(600)
    if job is None:
        break
    print(job.id, flush=True)
    if mode == "hang":
        time.sleep(600)
    with database.atomic() as tx:
        tx.jobs.delete(job.id)
database.close()
"""


def _worker(url: str, user: str, pid: int, mode: str = "drain") -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, url, user, str(pid), mode, T0, LEASE_END],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _queue(database: Any, n: int, *, priority: int = 3) -> list[int]:
    """``n`` ownerless queued jobs; their ids."""
    with database.atomic() as tx:
        ids = [
            tx.jobs.add(
                "embed",
                QUEUER,
                state="queued",
                phase="turn",
                session_id=None,
                payload={"n": n},
                priority=priority,
                now=T0,
            )
            for n in range(n)
        ]
        tx.jobs.release_owner(QUEUER, ())
    return ids


def test_claim_passes_over_a_job_another_transaction_holds(open_pg: Any, postgres_url: str) -> None:
    database = open_pg()
    first, second = _queue(database, 2)
    with psycopg.connect(postgres_url) as other:  # a claim in progress elsewhere
        other.execute("SELECT set_config('elastimem.user_id', %s, true)", (database.user_id,))
        other.execute("SELECT id FROM jobs WHERE id = %s FOR UPDATE", (first,))
        with database.atomic() as tx:
            job = tx.jobs.claim(Owner(7, "w"), (), now=T0, lease_until=LEASE_END)
        assert job is not None and job.id == second  # not a wait for the held row
        other.rollback()
    with database.atomic() as tx:
        job = tx.jobs.claim(Owner(7, "w"), (), now=T0, lease_until=LEASE_END)
    assert job is not None and job.id == first


def test_processes_draining_one_users_queue_run_every_job_once(
    open_pg: Any, postgres_url: str
) -> None:
    database = open_pg()
    jobs = _queue(database, 60)
    workers = [_worker(postgres_url, database.user_id, 100 + n) for n in range(4)]
    claimed: list[int] = []
    for worker in workers:
        out, err = worker.communicate(timeout=300)
        assert worker.returncode == 0, err
        claimed += [int(line) for line in out.split()]
    assert sorted(claimed) == sorted(jobs)  # each exactly once: none twice, none lost
    with database.read() as tx:
        assert tx.stats.counts()["jobs_pending"] == 0


def _first_claim(worker: subprocess.Popen[str]) -> int:
    assert worker.stdout is not None
    line = worker.stdout.readline()
    assert line.strip(), worker.stderr.read() if worker.stderr else ""
    return int(line)


def _kill(worker: subprocess.Popen[str]) -> None:
    worker.kill()
    worker.communicate(timeout=60)


def test_a_killed_workers_job_runs_again_after_its_lease(open_pg: Any, postgres_url: str) -> None:
    database = open_pg()
    jobs = _queue(database, 3)
    hung = _worker(postgres_url, database.user_id, 200, "hang")
    try:
        taken = _first_claim(hung)
    finally:
        _kill(hung)
    assert taken == jobs[0]
    # While its lease lasts, the job is the dead worker's: the others run the rest.
    survivor = _worker(postgres_url, database.user_id, 201)
    out, err = survivor.communicate(timeout=300)
    assert survivor.returncode == 0, err
    assert [int(line) for line in out.split()] == jobs[1:]
    with database.atomic() as tx:
        assert tx.jobs.requeue_expired(now=BEFORE_LEASE) == 0
        assert tx.jobs.requeue_expired(now=AFTER_LEASE) == 1
        # The dead owner's job is adopted (runtime.queue.recover), then claimed.
        assert [row[:3] for row in tx.jobs.unfinished_owners()] == [(taken, 200, "worker")]
        tx.jobs.adopt(taken, Owner(202, "w"), now=AFTER_LEASE)
        again = tx.jobs.claim(Owner(202, "w"), (), now=AFTER_LEASE, lease_until=AFTER_LEASE)
    assert again is not None and again.id == taken and again.payload == {"n": 0}


def test_a_worker_killed_inside_its_claim_leaves_the_job_queued(
    open_pg: Any, postgres_url: str
) -> None:
    database = open_pg()
    (job,) = _queue(database, 1)
    hung = _worker(postgres_url, database.user_id, 300, "hang-in-claim")
    try:
        assert _first_claim(hung) == job
    finally:
        _kill(hung)
    # The server rolled the claim back with the dead connection: the job is queued again.
    with database.atomic() as tx:
        again = tx.jobs.claim(Owner(301, "w"), (), now=T0, lease_until=LEASE_END)
    assert again is not None and again.id == job


def test_a_users_queue_and_failure_cap_are_its_own(open_pg: Any) -> None:
    mine, theirs = open_pg(), open_pg()
    their_jobs = _queue(theirs, 3)
    with theirs.atomic() as tx:
        for job in their_jobs:
            tx.jobs.mark_failed(job, 3, "boom", now=T0, failed_kept=10)
    (job,) = _queue(mine, 1)
    with mine.atomic() as tx:
        tx.jobs.mark_failed(job, 3, "boom", now=T0, failed_kept=1)
        assert tx.jobs.claim(Owner(9, "w"), (), now=T0, lease_until=LEASE_END) is None
        assert tx.jobs.unfinished_owners() == []
        tx.jobs.delete_many(their_jobs)  # not this user's rows: nothing happens
    with theirs.read() as tx:
        assert tx.stats.counts()["jobs_failed"] == 3  # another user's cap kept them
    with mine.read() as tx:
        assert tx.stats.counts()["jobs_failed"] == 1
