"""The watchdog that runs host calls on helper threads (gate.Watchdog), with real threads."""

from __future__ import annotations

import threading

import pytest

from elastimem.runtime.gate import CallTimeout, HostCallError, Watchdog
from tests.conftest import wait_until


def _helpers(what: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"elastimem-call-{what}"]


def test_calls_return_values_and_raise_errors_on_the_caller() -> None:
    watchdog = Watchdog("values")
    try:
        assert watchdog.call(5, lambda a, b=0: a + b, 2, b=3) == 5
        with pytest.raises(ZeroDivisionError):
            watchdog.call(5, lambda: 1 / 0)
    finally:
        watchdog.close()


def test_a_base_exception_from_the_callable_reaches_the_caller_as_a_failed_call() -> None:
    watchdog = Watchdog("escapes")

    def leave() -> None:
        raise SystemExit(3)

    try:
        with pytest.raises(HostCallError, match="SystemExit") as raised:
            watchdog.call(5, leave)
        assert isinstance(raised.value.__cause__, SystemExit)
        assert watchdog.call(5, lambda: "still here") == "still here"
    finally:
        watchdog.close()


def test_sequential_calls_reuse_one_helper_thread() -> None:
    watchdog = Watchdog("reuse")
    try:
        threads = {watchdog.call(5, lambda: threading.get_ident()) for _ in range(50)}
        assert len(threads) == 1
        assert threading.get_ident() not in threads
    finally:
        watchdog.close()


def test_concurrent_calls_each_get_a_thread() -> None:
    watchdog = Watchdog("concurrent")
    barrier = threading.Barrier(3, timeout=5)
    results: list[int] = []

    def caller() -> None:
        results.append(watchdog.call(5, lambda: barrier.wait() + 1))

    try:
        callers = [threading.Thread(target=caller) for _ in range(3)]
        for t in callers:
            t.start()
        for t in callers:
            t.join(10)
        # All three calls were inside the host callable at once (the barrier needs three).
        assert sorted(results) == [1, 2, 3]
    finally:
        watchdog.close()


def test_a_hung_call_times_out_then_blocks_further_calls_until_it_returns() -> None:
    watchdog = Watchdog("hung")
    release = threading.Event()
    try:
        with pytest.raises(CallTimeout):
            watchdog.call(0.1, release.wait)
        assert watchdog.stuck
        with pytest.raises(CallTimeout, match="earlier call"):
            watchdog.call(5, lambda: 1)
        release.set()
        assert wait_until(lambda: not watchdog.stuck)
        assert watchdog.call(5, lambda: 7) == 7
    finally:
        release.set()
        watchdog.close()


def test_close_ends_the_idle_helper_threads() -> None:
    watchdog = Watchdog("closing")
    watchdog.call(5, lambda: None)
    assert len(_helpers("closing")) == 1
    watchdog.close()
    assert wait_until(lambda: not _helpers("closing"))


def test_idle_helper_threads_end_by_themselves() -> None:
    watchdog = Watchdog("idle")
    watchdog.IDLE_SECONDS = 0.05
    watchdog.call(5, lambda: None)
    assert wait_until(lambda: not _helpers("idle"))
    assert watchdog.call(5, lambda: 3) == 3  # a new helper starts when needed
    watchdog.close()
