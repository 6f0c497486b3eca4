"""Contract: ``tx.vectors`` (storage.vectors.VectorRows) on every backend."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from elastimem.storage.vectors import CREATED_DTYPE
from tests.storage import seed

DIM = 4


def unit_rows(n: int, seed_: int = 0, dim: int = DIM) -> np.ndarray:
    rows = np.random.default_rng(seed_).standard_normal((n, dim)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def store_all(database: Any, ids: list[int], vectors: np.ndarray, label: str = "m") -> None:
    with database.atomic() as tx:
        for seq, (cid, vector) in enumerate(zip(ids, vectors), start=1):
            tx.vectors.store(cid, vector, label, seq)


@pytest.fixture
def sessions(backend_database: Any) -> tuple[int, int]:
    return (
        seed.add_session(backend_database, "2025-01-01T10:00:00.000000Z"),
        seed.add_session(backend_database, "2025-01-02T10:00:00.000000Z"),
    )


@pytest.fixture
def chunks(backend_database: Any, sessions: tuple[int, int]) -> list[int]:
    first = seed.add_chunks(
        backend_database, sessions[0], ["a0", "a1", "a2"], created_at="2025-01-01T10:00:00.000000Z"
    )
    second = seed.add_chunks(
        backend_database, sessions[1], ["b0", "b1"], created_at="2025-01-02T10:00:00.000000Z"
    )
    return first + second


def test_counters_start_at_zero_and_follow_meta(backend_database: Any) -> None:
    with backend_database.read() as tx:
        assert tx.vectors.counters() == (0, 0)
    with backend_database.atomic() as tx:
        tx.meta.bump("vectors.gen")
        tx.meta.set("vectors.seq", 12)
    with backend_database.read() as tx:
        assert tx.vectors.counters() == (1, 12)


def test_targets_and_store_many_act_as_target_and_store_in_one_go(
    backend_database: Any, chunks: list[int]
) -> None:
    """The batch forms the vector writer uses (one statement each on PostgreSQL)."""
    vectors = unit_rows(len(chunks), seed_=3)
    missing = max(chunks) + 100
    with backend_database.read() as tx:
        assert tx.vectors.targets([*chunks[:2], missing]) == {
            chunks[0]: (False, "a0"),
            chunks[1]: (False, "a1"),
        }
        assert tx.vectors.targets([]) == {}
    with backend_database.atomic() as tx:
        tx.vectors.store_many("m", [(cid, vectors[n], 10 + n) for n, cid in enumerate(chunks[:3])])
        tx.vectors.store_many("m", [])
    with backend_database.read() as tx:
        assert tx.vectors.targets(chunks) == {
            **{cid: (True, text) for cid, text in zip(chunks[:3], ["a0", "a1", "a2"])},
            chunks[3]: (False, "b0"),
            chunks[4]: (False, "b1"),
        }
        assert tx.vectors.count("m", DIM, after_seq=10) == 2
        ids, matrix = tx.vectors.read("m", DIM, chunks)
    assert sorted(ids.tolist()) == sorted(chunks[:3])
    by_id = dict(zip(ids.tolist(), matrix))
    for n, cid in enumerate(chunks[:3]):
        assert np.array_equal(by_id[cid], vectors[n])


def test_store_then_target_count_and_read(backend_database: Any, chunks: list[int]) -> None:
    vectors = unit_rows(len(chunks))
    with backend_database.read() as tx:
        assert tx.vectors.target(chunks[0]) == (False, "a0")
        assert tx.vectors.target(max(chunks) + 100) is None
        assert tx.vectors.count("m", DIM) == 0
    store_all(backend_database, chunks[:4], vectors[:4])
    with backend_database.read() as tx:
        assert tx.vectors.target(chunks[0]) == (True, "a0")
        assert tx.vectors.count("m", DIM) == 4
        assert tx.vectors.count("m", DIM, after_seq=2) == 2
        assert tx.vectors.count("m", DIM + 1) == 0
        assert tx.vectors.count("other", DIM) == 0
        ids, matrix = tx.vectors.read("m", DIM, [chunks[3], chunks[4], chunks[0]])
    assert matrix.dtype == np.float32 and matrix.shape == (2, DIM)
    got = dict(zip(ids.tolist(), matrix))
    assert set(got) == {chunks[0], chunks[3]}  # chunks[4] holds no vector
    assert np.array_equal(got[chunks[3]], vectors[3])
    with backend_database.read() as tx:
        ids, matrix = tx.vectors.read("m", DIM + 1, [chunks[0]])
    assert ids.size == 0 and matrix.shape == (0, DIM + 1)


def test_blocks_walk_every_vector_by_id(backend_database: Any, chunks: list[int]) -> None:
    vectors = unit_rows(len(chunks))
    store_all(backend_database, chunks, vectors)
    with backend_database.read() as tx:
        blocks = list(tx.vectors.blocks("m", DIM, size=2))
        newer = list(tx.vectors.blocks("m", DIM, after_seq=3, size=10))
        assert list(tx.vectors.blocks("m", DIM + 1, size=2)) == []
    assert [b.ids.size for b in blocks] == [2, 2, 1]
    ids = np.concatenate([b.ids for b in blocks])
    assert ids.tolist() == chunks
    assert np.array_equal(np.concatenate([b.vectors for b in blocks]), vectors)
    first = blocks[0]
    assert first.vectors.dtype == np.float32 and first.created.dtype == np.dtype(CREATED_DTYPE)
    assert first.created.tolist()[0] == b"2025-01-01T10:00:00.000000Z"
    assert [i for b in newer for i in b.ids.tolist()] == chunks[3:]


def test_blocks_carry_sessions_and_times(
    backend_database: Any, sessions: tuple[int, int], chunks: list[int]
) -> None:
    store_all(backend_database, chunks, unit_rows(len(chunks)))
    with backend_database.read() as tx:
        (block,) = list(tx.vectors.blocks("m", DIM, size=10))
    assert block.sessions.tolist() == [sessions[0]] * 3 + [sessions[1]] * 2
    assert (
        block.created.tolist()
        == [b"2025-01-01T10:00:00.000000Z"] * 3 + [b"2025-01-02T10:00:00.000000Z"] * 2
    )


def test_filtered_blocks(
    backend_database: Any, sessions: tuple[int, int], chunks: list[int]
) -> None:
    store_all(backend_database, chunks, unit_rows(len(chunks)))

    def ids(**filters: Any) -> list[int]:
        with backend_database.read() as tx:
            blocks = tx.vectors.filtered_blocks("m", DIM, size=2, **filters)
            return sorted(i for b in blocks for i in b.ids.tolist())

    everything = {"exclude_session": None, "since": None, "until": None}
    assert ids(**everything) == chunks
    assert ids(**{**everything, "exclude_session": sessions[0]}) == chunks[3:]
    assert ids(**{**everything, "since": "2025-01-02T00:00:00.000000Z"}) == chunks[3:]
    assert ids(**{**everything, "until": "2025-01-02T10:00:00.000000Z"}) == chunks[:3]
    with backend_database.read() as tx:
        blocks = tx.vectors.filtered_blocks("x", DIM, size=2, **everything)
        assert list(blocks) == []


def test_after_id_reads_the_next_vectors_by_id(backend_database: Any, chunks: list[int]) -> None:
    vectors = unit_rows(len(chunks))
    store_all(backend_database, chunks, vectors)
    with backend_database.read() as tx:
        ids, matrix = tx.vectors.after_id("m", DIM, chunks[0], 2)
        assert ids.tolist() == chunks[1:3] and np.array_equal(matrix, vectors[1:3])
        ids, matrix = tx.vectors.after_id("m", DIM, chunks[-1], 2)
        assert ids.size == 0 and matrix.shape == (0, DIM)


def test_other_model_finds_vectors_of_another_label_or_size(
    backend_database: Any, chunks: list[int]
) -> None:
    store_all(backend_database, chunks[:2], unit_rows(2))
    with backend_database.read() as tx:
        assert tx.vectors.other_model("m", DIM) is None
    for label, dim in (("a-before", DIM), ("z-after", DIM), ("m", DIM + 2)):
        with backend_database.atomic() as tx:
            tx.vectors.store(chunks[4], unit_rows(1, dim=dim)[0], label, 9)
        with backend_database.read() as tx:
            assert tx.vectors.other_model("m", DIM) == (label, dim)


def test_previous_texts_stay_in_the_session(
    backend_database: Any, sessions: tuple[int, int], chunks: list[int]
) -> None:
    with backend_database.read() as tx:
        assert tx.vectors.previous_texts(chunks) == {
            chunks[1]: "a0",
            chunks[2]: "a1",
            chunks[4]: "b0",
        }
        assert tx.vectors.previous_texts([]) == {}


def test_snapshots_are_kept_per_label_and_dim(backend_database: Any) -> None:
    with backend_database.read() as tx:
        assert tx.vectors.snapshot("m", DIM) is None
    with backend_database.atomic() as tx:
        tx.vectors.save_snapshot("m", DIM, 5, 1, b"first")
        tx.vectors.save_snapshot("m", DIM + 1, 6, 1, b"other")
    with backend_database.atomic() as tx:
        tx.vectors.save_snapshot("m", DIM, 7, 2, b"second")
    with backend_database.read() as tx:
        assert tx.vectors.snapshot("m", DIM) == (7, 2, b"second")
        assert tx.vectors.snapshot("m", DIM + 1) == (6, 1, b"other")
        assert tx.vectors.snapshot("n", DIM) is None
