"""The durable job queue and the worker: claims, retries, adoption, drain, close."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import elastimem
from elastimem.memory.episodic import Owner
from elastimem.runtime import queue as jobs
from elastimem.storage.sqlite.database import Database, open_store
from tests.conftest import wait_until
from tests.rows import execute, one, rows


@pytest.fixture
def queue_db(tmp_path: Path) -> Iterator[Database]:
    """A store's database without a facade or worker: the queue's rules on their own."""
    database = open_store(tmp_path / "queue.db")
    try:
        yield database
    finally:
        database.close()


def test_retries_then_failed_keeps_last_error(queue_db: Database) -> None:
    owner = Owner.current()
    with queue_db.atomic() as conn:
        job_id = jobs.enqueue(conn, "embed", owner, payload={"chunk_ids": [1]})
        claimed = jobs.claim(conn, owner, frozenset())
        assert claimed is not None and claimed.id == job_id
        assert claimed.payload == {"chunk_ids": [1]}
        assert jobs.fail(conn, job_id, "first") is False
    assert rows(queue_db.path, "SELECT state, attempts, not_before IS NOT NULL FROM jobs") == [
        ("queued", 1, 1)
    ]
    with queue_db.atomic() as conn:
        assert jobs.claim(conn, owner, frozenset()) is None  # not before its retry time
        assert jobs.fail(conn, job_id, "second") is False
        assert jobs.fail(conn, job_id, "third") is True
        assert jobs.fail(conn, job_id + 1, "gone") is False  # no such job
    assert rows(queue_db.path, "SELECT state, last_error FROM jobs") == [("failed", "third")]


def test_claim_order_and_ownership(queue_db: Database) -> None:
    me = Owner.current()
    other = Owner(me.pid + 1, "another-host")
    with queue_db.atomic() as conn:
        jobs.enqueue(conn, "consolidate", me)
        jobs.enqueue(conn, "extract", me, session_id=None)
        foreign = jobs.enqueue(conn, "embed", other)
        first = jobs.claim(conn, me, frozenset())
        second = jobs.claim(conn, me, frozenset({"consolidate"}))
        third = jobs.claim(conn, me, frozenset())
        assert jobs.claim(conn, me, frozenset()) is None  # the foreign job is not ours
    execute(
        queue_db.path,
        "UPDATE jobs SET owner_pid = NULL, owner_host = NULL WHERE id = ?",
        (foreign,),
    )
    with queue_db.atomic() as conn:
        assert jobs.claim(conn, me, frozenset()).id == foreign  # type: ignore[union-attr]
    assert (first.kind, second, third.kind) == ("extract", None, "consolidate")  # type: ignore[union-attr]


def test_expired_leases_and_dead_owners_are_recovered(queue_db: Database) -> None:
    me = Owner.current()
    with queue_db.atomic() as conn:
        stale = jobs.enqueue(conn, "embed", Owner(999_999, me.host))  # a dead pid here
        silent = jobs.enqueue(conn, "link", Owner(5, "far-away"))
        alive = jobs.enqueue(conn, "link", Owner(5, "far-away"))
    execute(
        queue_db.path,
        "UPDATE jobs SET state='running', lease_until='2000-01-01T00:00:00.000000Z' WHERE id = ?",
        (stale,),
    )
    execute(
        queue_db.path,
        "UPDATE jobs SET updated_at='2000-01-01T00:00:00.000000Z' WHERE id = ?",
        (silent,),
    )
    with queue_db.atomic() as conn:
        requeued, adopted = jobs.recover(conn, me)
    found = dict(rows(queue_db.path, "SELECT id, owner_host || ':' || state FROM jobs"))
    assert requeued == 1 and adopted == 2
    assert found[stale] == f"{me.host}:queued" and found[silent] == f"{me.host}:queued"
    assert found[alive] == "far-away:queued"


def test_drain_waits_and_times_out(make_store: Any) -> None:
    def slow(prompt: str, *, max_tokens: int, temperature: float) -> str:
        time.sleep(0.6)
        return "NONE"

    mem = make_store(llm=slow, tier_override="full")
    mem.record_turn("I am learning to play the banjo this summer", "fun")
    start = time.monotonic()
    assert mem.drain(timeout=0.1) is False
    assert time.monotonic() - start < 0.5
    assert mem.pending() >= 1
    assert mem.drain(timeout=10) is True
    assert mem.pending() == 0


def test_embed_jobs_write_labelled_vectors(make_store: Any, embedder: Any) -> None:
    mem = make_store(embedder=embedder)
    mem.record_turn("The lighthouse keeper fed the gulls", "ok")
    assert mem.drain(timeout=10)
    stats = mem.stats()
    assert stats["embedded_chunks"] == 1 and stats["embedding_model"] == "host"
    assert stats["embedder"] == "ready"
    assert rows(mem, "SELECT embedding_model, embedding_dim, embed_seq FROM chunks") == [
        ("host", embedder.dim, 1)
    ]
    assert one(mem, "SELECT value FROM meta WHERE key='embedder.host.dim'") == str(embedder.dim)


def test_close_drains_and_leaves_unfinished_jobs_ownerless(
    make_store: Any, store_path: Any
) -> None:
    # LITE with the opt-in holds extractions until session end, and drain does not release them.
    mem = make_store(llm=lambda p, **k: "NONE", tier_override="lite", lite_llm_extraction=True)
    mem.record_turn("I am learning to play the banjo this summer", "fun")
    assert mem.pending() == 1  # held
    mem.close()
    extracts = "SELECT owner_pid, state, phase FROM jobs WHERE kind='extract'"
    assert rows(mem, extracts) == [(None, "held", "turn")]
    # The next open closes the ownerless session as an orphan: the held job is released
    # (phase session_end) and adopted; with no LLM at LITE it goes back to held.
    again = make_store(store_path, tier_override="lite", lite_llm_extraction=True)
    again.drain(timeout=2)
    assert rows(again, extracts) == [(os.getpid(), "held", "session_end")]


def test_closing_one_of_two_instances_leaves_their_shared_jobs_alone(
    make_store: Any, store_path: Any
) -> None:
    """Instances of one process on one file share their jobs (§5.11): closing one gave
    away the other's held extractions (its pending() fell to 0, drain() ran nothing) and
    put a job its worker was running back in the queue, for another process to run again."""
    entered, release = threading.Event(), threading.Event()

    def slow_llm(prompt: str, **kwargs: Any) -> str:
        if prompt.startswith("TASK: extract") and "banjo" in prompt:
            entered.set()
            release.wait(10)
        return "NONE"

    running = make_store(llm=slow_llm, tier_override="full")
    running.record_turn("I am learning to play the banjo this summer", "fun")
    assert entered.wait(10)  # opened after this: no other worker can take the job
    holding = make_store(llm=slow_llm, tier_override="standard", batched_every_n_turns=50)
    other = make_store(tier_override="full")
    holding.record_turn("My sister works as a nurse in the city hospital", "ok")
    before = holding.pending()
    other.close()
    found = rows(running, "SELECT state, owner_pid FROM jobs ORDER BY id")
    assert found[0] == ("running", os.getpid())  # still leased to the worker running it
    assert all(pid == os.getpid() for _state, pid in found)
    assert holding.pending() == before >= 2
    release.set()
    assert holding.drain(timeout=10) and holding.pending() == 0


def test_a_job_still_running_at_close_keeps_its_owner_and_lease(queue_db: Database) -> None:
    me = Owner.current()
    with queue_db.atomic() as conn:
        first = jobs.enqueue(conn, "extract", me)
        second = jobs.enqueue(conn, "extract", me)
    execute(
        queue_db.path,
        "UPDATE jobs SET state = 'running', lease_until = 'x' WHERE id IN (?, ?)",
        (first, second),
    )
    with queue_db.atomic() as conn:
        jobs.clear_owner(conn, me, still_running=[first])
    assert rows(
        queue_db.path, "SELECT id, state, owner_pid, lease_until FROM jobs ORDER BY id"
    ) == [
        (first, "running", me.pid, "x"),
        (second, "queued", None, None),
    ]


def test_two_instances_closing_at_once_hand_their_jobs_over(
    make_store: Any, store_path: Any
) -> None:
    """Each saw the other still open, so neither drained nor cleared the owner: the jobs
    stayed owned by a live pid with no worker, out of every other process's reach."""

    def slow_llm(prompt: str, **kwargs: Any) -> str:
        time.sleep(1.0)
        return "The user talked about tomatoes."

    first = make_store(llm=slow_llm, tier_override="standard")
    second = make_store(store_path, llm=slow_llm, tier_override="standard")
    first.begin_session()
    first.record_turn("we talked about the garden and tomatoes today", "ok")
    first.record_turn("then we talked about the roses", "ok")
    first.end_session(wait=False)
    barrier = threading.Barrier(2)

    def close(mem: elastimem.Elastimem) -> None:
        barrier.wait()
        mem.close()

    closers = [threading.Thread(target=close, args=(m,)) for m in (first, second)]
    for thread in closers:
        thread.start()
    for thread in closers:
        thread.join(60)
    left = rows(
        first,
        "SELECT kind FROM jobs WHERE owner_pid = ? AND state <> 'failed'",
        (os.getpid(),),
    )
    assert left == []


def test_close_inside_a_foreground_block_lets_the_worker_go(make_store: Any) -> None:
    """The worker waited for the LLM lock this thread held, for good: foreground_end()
    raises once the store is closed, so nothing released it."""
    mem = make_store(llm=lambda p, **k: "NONE", tier_override="standard")
    mem.foreground_begin()
    mem.record_turn("we talked about the garden and tomatoes today", "ok")
    mem.drain(0.5)  # the batched extraction is released and waits for the lock
    mem.close()
    with pytest.raises(elastimem.ClosedError):
        mem.foreground_end()
    workers = lambda: [t for t in threading.enumerate() if t.name == "elastimem-worker"]  # noqa: E731
    assert wait_until(lambda: not workers(), 10)


def test_a_job_this_process_left_running_is_requeued_at_its_next_open(
    mem: elastimem.Elastimem, store_path: Any
) -> None:
    """A worker that outlived close() inside a host call cannot record its outcome: the job
    stayed 'running' under this live pid until its lease ran out (10 minutes)."""
    mem.close()
    database = open_store(store_path)
    try:
        with database.atomic() as conn:
            job = jobs.enqueue(conn, "link", Owner.current(), payload={"chunk_ids": []})
    finally:
        database.close()
    execute(
        store_path,
        "UPDATE jobs SET state = 'running', lease_until = '2999-01-01T00:00:00.000000Z' "
        "WHERE id = ?",
        (job,),
    )
    with elastimem.Elastimem(str(store_path), disable_builtin_embedder=True) as again:
        assert again.drain(timeout=5) and again.pending() == 0


def test_a_sibling_opening_while_another_closes_keeps_its_jobs(
    make_store: Any, store_path: Any
) -> None:
    """The closing instance decided at its start that it was the last one, then after its
    drain gave away every job of the process, those of a sibling opened meanwhile too."""
    turn = ("I really enjoy hiking in the mountains near Denver every weekend", "Nice.")

    def slow_llm(prompt: str, **kwargs: Any) -> str:
        time.sleep(2.0)
        return "NONE"

    closing = make_store(llm=slow_llm, tier_override="standard")
    closing.record_turn(*turn)  # held; the close's drain releases it and waits on the LLM
    closer = threading.Thread(target=closing.close)
    closer.start()
    time.sleep(0.5)
    opened = make_store(store_path, llm=lambda p, **k: "NONE", tier_override="standard")
    opened.record_turn(*turn)
    closer.join(30)
    mine = rows(
        opened, "SELECT state, owner_pid FROM jobs WHERE session_id = ?", (opened.session_id,)
    )
    assert mine == [("held", os.getpid())]
    assert opened.pending() == 1
    assert opened.drain(timeout=10) and opened.pending() == 0
