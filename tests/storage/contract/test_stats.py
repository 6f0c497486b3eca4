"""Contract: ``tx.stats`` (storage.stats.StatsRows) on every backend."""

from __future__ import annotations

from typing import Any

import numpy as np

from elastimem.index.vectors import write_vectors
from elastimem.memory import semantic
from elastimem.storage.stats import COUNT_KEYS
from tests.storage.contract.seed import fact, session, turn


def unit_rows(count: int, dim: int) -> np.ndarray:
    matrix = np.zeros((count, dim), dtype=np.float32)
    matrix[:, 0] = 1.0
    return matrix


def test_counts_of_an_empty_store(backend_database: Any) -> None:
    with backend_database.read() as tx:
        counts = tx.stats.counts()
    assert set(counts) == set(COUNT_KEYS)
    assert all(value == 0 for value in counts.values())


def test_counts_follow_the_rows(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        sid = session(tx)
        turn(tx, sid, "The greyhound Biscuit loves the beach")
        turn(tx, sid, "We flew to Lisbon")
        fact(tx, "city", "Lisbon")
        fact(tx, "city", "Porto")  # supersedes Lisbon
        fact(tx, "pet", "greyhound")
        semantic.quarantine(tx, "bad", "value", "test", "auto", 10)
    with backend_database.read() as tx:
        counts = tx.stats.counts()
    assert counts["sessions"] == counts["open_sessions"] == 1
    assert (counts["messages"], counts["chunks"]) == (4, 2)
    assert (counts["facts"], counts["fact_versions"], counts["archived_facts"]) == (2, 3, 0)
    assert counts["quarantine"] == 1
    assert counts["jobs_pending"] == counts["jobs_failed"] == 0


def test_chunk_vectors_current_and_stale(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        sid = session(tx)
        ids = [turn(tx, sid, f"turn number {i}").chunk_ids[0] for i in range(3)]
        write_vectors(tx, ids[:2], unit_rows(2, 4), "elastimem:model-a")
        write_vectors(tx, ids[2:], unit_rows(1, 8), "host")
    with backend_database.read() as tx:
        assert tx.stats.chunk_vectors("elastimem:model-a", 4) == (2, 1)
        assert tx.stats.chunk_vectors("host", 8) == (1, 2)
        assert tx.stats.chunk_vectors("host", 4) == (0, 3)
        assert tx.stats.chunk_vectors(None, None) == (0, 3)  # no model: every vector is stale
        assert tx.stats.chunk_vectors("host", None) == (0, 0)  # its dimension is unknown
        assert tx.stats.most_common_vector_model() == "elastimem:model-a"
        assert tx.stats.most_common_vector_model("elastimem:") == "elastimem:model-a"
        assert tx.stats.most_common_vector_model("ho") == "host"
        assert tx.stats.most_common_vector_model("nothing-like-it") is None
        assert tx.stats.has_recorded_embedder("elastimem:")
        assert tx.stats.has_recorded_embedder("host")
        assert not tx.stats.has_recorded_embedder("elastimem_")  # a prefix, not a pattern


def test_embedded_facts_counts_live_facts_with_a_vector_of_the_model(
    backend_database: Any,
) -> None:
    with backend_database.atomic() as tx:
        assert tx.stats.embedded_facts(None, None) == 0
        fid = fact(tx, "pet", "greyhound")
        old = fact(tx, "city", "Lisbon")
        tx.fact_vectors.put(fid, "pet", "greyhound", "m", np.ones(2, np.float32) / np.sqrt(2))
        tx.fact_vectors.put(old, "city", "Lisbon", "m", np.ones(2, np.float32) / np.sqrt(2))
        fact(tx, "city", "Porto")  # the vector of Lisbon now belongs to a past version
    with backend_database.read() as tx:
        assert tx.stats.embedded_facts("m", 2) == 1
        assert tx.stats.embedded_facts("m", 3) == 0
        assert tx.stats.embedded_facts("m", None) == 0
        assert tx.stats.most_common_vector_model() == "m"  # facts' vectors count too


def test_file_size_and_mode(backend_database: Any) -> None:
    with backend_database.read() as tx:
        size = tx.stats.file_bytes()
        mode = tx.stats.file_mode()
    assert size > 0
    assert mode is None or (len(mode) == 4 and set(mode) <= set("01234567"))
