"""Contract: ``storage.database.Database`` (what ``storage.open_database`` returns) on every
backend: transactions commit, roll back and nest; reads see one committed snapshot; a closed
database refuses; writers on two threads serialize."""

from __future__ import annotations

import threading

import pytest

from elastimem.errors import ClosedError, StoreClosedError, StoreError
from elastimem.storage import Database

WAIT = 10.0  # seconds a thread may take to reach the next step before the test fails


class Boom(Exception):
    pass


def _value(database: Database, key: str) -> str | None:
    with database.read() as tx:
        return tx.meta.get(key)


def _in_thread(target: object) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)  # type: ignore[arg-type]
    thread.start()
    return thread


def test_a_fresh_database_says_what_it_is(backend_database: Database) -> None:
    assert isinstance(backend_database.path, str) and backend_database.path
    assert backend_database.is_memory is False
    assert backend_database.read_only is False
    assert backend_database.set_aside is None
    assert backend_database.closed is False
    assert isinstance(backend_database.fts_enabled, bool)
    backend_database.checkpoint()  # nothing to fold is no error


def test_atomic_commits_when_the_block_ends(backend_database: Database) -> None:
    assert not backend_database.in_write()
    with backend_database.atomic() as tx:
        assert backend_database.in_write()
        tx.meta.set("contract.a", "1")
        tx.meta.set("contract.b", "2")
    assert not backend_database.in_write()
    assert _value(backend_database, "contract.a") == "1"
    assert _value(backend_database, "contract.b") == "2"


def test_an_exception_rolls_the_whole_transaction_back_and_propagates(
    backend_database: Database,
) -> None:
    with backend_database.atomic() as tx:
        tx.meta.set("contract.kept", "before")
    with pytest.raises(Boom), backend_database.atomic() as tx:
        tx.meta.set("contract.kept", "changed")
        tx.meta.set("contract.new", "x")
        raise Boom
    assert not backend_database.in_write()
    assert _value(backend_database, "contract.kept") == "before"
    assert _value(backend_database, "contract.new") is None


def test_a_nested_atomic_is_a_savepoint(backend_database: Database) -> None:
    with backend_database.atomic() as outer:
        outer.meta.set("contract.outer", "1")
        with pytest.raises(Boom), backend_database.atomic() as inner:
            inner.meta.set("contract.inner", "1")
            inner.meta.set("contract.outer", "overwritten")
            raise Boom
        assert outer.meta.get("contract.inner") is None
        assert outer.meta.get("contract.outer") == "1"
        with backend_database.atomic() as kept:
            kept.meta.set("contract.kept", "1")
        assert backend_database.in_write()
    assert _value(backend_database, "contract.outer") == "1"
    assert _value(backend_database, "contract.inner") is None
    assert _value(backend_database, "contract.kept") == "1"


def test_an_outer_failure_rolls_back_the_committed_inner_level_too(
    backend_database: Database,
) -> None:
    with pytest.raises(Boom), backend_database.atomic() as outer:
        with backend_database.atomic() as inner:
            inner.meta.set("contract.inner", "1")
        outer.meta.set("contract.outer", "1")
        raise Boom
    assert _value(backend_database, "contract.inner") is None
    assert _value(backend_database, "contract.outer") is None


def test_a_read_inside_atomic_sees_that_transactions_own_writes(
    backend_database: Database,
) -> None:
    with backend_database.atomic() as tx:
        tx.meta.set("contract.own", "mine")
        with backend_database.read() as view:
            assert view.meta.get("contract.own") == "mine"


def test_read_sees_committed_data_only(backend_database: Database) -> None:
    """A write in progress on another thread is invisible until it commits."""
    written, checked, errors = threading.Event(), threading.Event(), []

    def writer() -> None:
        try:
            with backend_database.atomic() as tx:
                tx.meta.set("contract.pending", "uncommitted")
                written.set()
                assert checked.wait(WAIT)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
            written.set()

    thread = _in_thread(writer)
    assert written.wait(WAIT)
    try:
        assert _value(backend_database, "contract.pending") is None
    finally:
        checked.set()
        thread.join(WAIT)
    assert not thread.is_alive() and errors == []
    assert _value(backend_database, "contract.pending") == "uncommitted"


def test_one_read_is_one_snapshot(backend_database: Database) -> None:
    """A commit made while a read() block runs is not seen by that block, only by the next."""
    with backend_database.atomic() as tx:
        tx.meta.set("contract.snap", "old")
    errors: list[BaseException] = []

    def commit_new() -> None:
        try:
            with backend_database.atomic() as tx:
                tx.meta.set("contract.snap", "new")
        except BaseException as exc:
            errors.append(exc)

    with backend_database.read() as view:
        assert view.meta.get("contract.snap") == "old"
        thread = _in_thread(commit_new)
        thread.join(WAIT)
        assert not thread.is_alive() and errors == []
        assert view.meta.get("contract.snap") == "old"
    assert _value(backend_database, "contract.snap") == "new"


def test_in_write_is_true_only_on_the_writing_thread(backend_database: Database) -> None:
    seen: list[bool] = []
    with backend_database.atomic():
        thread = _in_thread(lambda: seen.append(backend_database.in_write()))
        thread.join(WAIT)
    assert seen == [False]


def test_a_closed_database_refuses_reads_and_writes(backend_database: Database) -> None:
    backend_database.close()
    assert backend_database.closed
    for begin in (backend_database.atomic, backend_database.read):
        with pytest.raises(StoreClosedError) as raised, begin():
            pass
        assert isinstance(raised.value, ClosedError)
        assert isinstance(raised.value, StoreError)
    backend_database.close()  # idempotent


def test_writers_on_two_threads_serialize_with_no_lost_update(
    backend_database: Database,
) -> None:
    """Each thread reads a counter and writes it back plus one, inside one atomic(): were
    two transactions interleaved, an increment would be lost."""
    rounds = 200
    start, errors = threading.Barrier(2), []

    def increment() -> None:
        try:
            start.wait(WAIT)
            for _ in range(rounds):
                with backend_database.atomic() as tx:
                    value = tx.meta.get_int("contract.counter")
                    tx.meta.set("contract.counter", value + 1)
        except BaseException as exc:
            errors.append(exc)

    threads = [_in_thread(increment) for _ in range(2)]
    for thread in threads:
        thread.join(60)
    assert not any(t.is_alive() for t in threads) and errors == []
    with backend_database.read() as tx:
        assert tx.meta.get_int("contract.counter") == 2 * rounds


def test_holding_the_lock_keeps_other_writers_out(backend_database: Database) -> None:
    started, done = threading.Event(), threading.Event()

    def write() -> None:
        started.set()
        with backend_database.atomic() as tx:
            tx.meta.set("contract.locked_out", "written")
        done.set()

    with backend_database.lock:
        thread = _in_thread(write)
        assert started.wait(WAIT)
        assert not done.wait(0.2)  # still waiting for the lock
        assert _value(backend_database, "contract.locked_out") is None
    thread.join(WAIT)
    assert done.is_set()
    assert _value(backend_database, "contract.locked_out") == "written"
