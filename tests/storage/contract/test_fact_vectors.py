"""Contract: ``tx.fact_vectors`` (storage.fact_vectors.FactVectorRows) on every backend."""

from __future__ import annotations

from typing import Any

import numpy as np

from elastimem.memory import semantic
from tests.storage.contract.seed import fact


def unit(*values: float) -> np.ndarray:
    vector = np.asarray(values, dtype=np.float32)
    return vector / np.linalg.norm(vector)


def test_pending_lists_live_facts_without_a_vector_of_the_model(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        first = fact(tx, "employer", "Acme")
        second = fact(tx, "city", "Lisbon")
        assert tx.fact_vectors.any_without_vector()
        assert tx.fact_vectors.pending("m", 2, 10) == [
            (first, "employer", "Acme"),
            (second, "city", "Lisbon"),
        ]
        assert tx.fact_vectors.pending("m", 2, 1) == [(first, "employer", "Acme")]
        assert tx.fact_vectors.all_live() == [
            (first, "employer", "Acme"),
            (second, "city", "Lisbon"),
        ]
        assert tx.fact_vectors.put(first, "employer", "Acme", "m", unit(1.0, 0.0))
        assert tx.fact_vectors.pending("m", 2, 10) == [(second, "city", "Lisbon")]
        assert tx.fact_vectors.pending("m", 3, 10) == [
            (first, "employer", "Acme"),
            (second, "city", "Lisbon"),
        ]  # another dimension
        assert tx.fact_vectors.pending("m", None, 10) == [
            (first, "employer", "Acme"),
            (second, "city", "Lisbon"),
        ]  # no dimension known: none matches
        assert tx.fact_vectors.any_without_vector()
        assert tx.fact_vectors.put(second, "city", "Lisbon", "other", unit(0.0, 1.0))
        assert not tx.fact_vectors.any_without_vector()  # a vector of any model counts


def test_put_refuses_a_changed_or_missing_fact(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        fid = fact(tx, "employer", "Acme")
        assert not tx.fact_vectors.put(fid, "employer", "Globex", "m", unit(1.0, 0.0))
        assert not tx.fact_vectors.put(fid + 100, "employer", "Acme", "m", unit(1.0, 0.0))
        assert tx.fact_vectors.live_vectors("m", 2) == []
        assert tx.fact_vectors.put(fid, "employer", "Acme", "m", unit(1.0, 0.0))
        assert tx.fact_vectors.put(fid, "employer", "Acme", "m", unit(0.0, 1.0))  # replaced
        [(found, _valid_from, blob)] = tx.fact_vectors.live_vectors("m", 2)
        assert found == fid
        assert np.allclose(np.frombuffer(blob, "<f4"), unit(0.0, 1.0))


def test_live_vectors_and_waiting_skip_superseded_versions(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        old = fact(tx, "city", "Lisbon", at="2024-01-01")
        tx.fact_vectors.put(old, "city", "Lisbon", "m", unit(1.0, 0.0))
        new = fact(tx, "city", "Porto", at="2024-06-01")
        other = fact(tx, "pet", "greyhound", at="2024-07-01")
        tx.fact_vectors.put(other, "pet", "greyhound", "m", unit(0.0, 1.0))
        live = tx.fact_vectors.live_vectors("m", 2)
        assert [row[0] for row in live] == [other]
        assert live[0][1].startswith("2024-07-01")
        assert tx.fact_vectors.live_vectors("m", 3) == []
        waiting = tx.fact_vectors.waiting("m", 2, 10)
        assert [(row[0], row[1], row[2]) for row in waiting] == [(new, "city", "Porto")]
        assert waiting[0][3].startswith("2024-06-01")
        third = fact(tx, "diet", "vegan")
        assert [row[0] for row in tx.fact_vectors.waiting("m", 2, 10)] == [
            third,
            new,
        ]  # newest first
        assert [row[0] for row in tx.fact_vectors.waiting("m", 2, 1)] == [third]


def test_stamps_move_with_facts_and_vectors(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        fid = fact(tx, "employer", "Acme")
    with backend_database.read() as tx:
        before = tx.fact_vectors.stamps()
    with backend_database.atomic() as tx:
        tx.fact_vectors.put(fid, "employer", "Acme", "m", unit(1.0, 0.0))
    with backend_database.read() as tx:
        after_vector = tx.fact_vectors.stamps()
    assert after_vector[1] != before[1]
    with backend_database.atomic() as tx:
        semantic.forget(tx, "employer")
    with backend_database.read() as tx:
        after_forget = tx.fact_vectors.stamps()
        assert tx.fact_vectors.live_vectors("m", 2) == []
    assert after_forget[0] != after_vector[0]
