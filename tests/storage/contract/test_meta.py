"""Contract: ``tx.meta`` (storage.meta.MetaRows) on every backend."""

from __future__ import annotations

from typing import Any


def test_get_returns_default_until_set(backend_database: Any) -> None:
    with backend_database.read() as tx:
        assert tx.meta.get("contract.missing") is None
        assert tx.meta.get("contract.missing", "fallback") == "fallback"
        assert tx.meta.get_int("contract.missing", 7) == 7
    with backend_database.atomic() as tx:
        tx.meta.set("contract.key", "value")
        tx.meta.set("contract.n", 41)
    with backend_database.read() as tx:
        assert tx.meta.get("contract.key") == "value"
        assert tx.meta.get_int("contract.n") == 41


def test_set_overwrites_and_non_numbers_read_as_default(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        tx.meta.set("contract.key", "one")
        tx.meta.set("contract.key", "two")
        tx.meta.set("contract.word", "not a number")
    with backend_database.read() as tx:
        assert tx.meta.get("contract.key") == "two"
        assert tx.meta.get_int("contract.word", 3) == 3


def test_bump_counts_from_zero(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        assert tx.meta.bump("contract.counter") == 1
        assert tx.meta.bump("contract.counter", 5) == 6
    with backend_database.read() as tx:
        assert tx.meta.get_int("contract.counter") == 6


def test_a_rolled_back_write_leaves_nothing(backend_database: Any) -> None:
    class Boom(Exception):
        pass

    try:
        with backend_database.atomic() as tx:
            tx.meta.set("contract.rolled", "x")
            raise Boom
    except Boom:
        pass
    with backend_database.read() as tx:
        assert tx.meta.get("contract.rolled") is None


def test_log_event_accepts_counts_and_ids(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        tx.meta.log_event("contract", rows=3, ids=[1, 2])
        tx.meta.trim_events()


def test_bump_counts_a_value_that_is_no_integer_from_zero(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        tx.meta.set("contract.counter", "not a number")
        assert tx.meta.bump("contract.counter", 2) == 2
        tx.meta.set("contract.counter", " 41 ")
        assert tx.meta.bump("contract.counter") == 42
        assert tx.meta.get_int("contract.counter") == 42
