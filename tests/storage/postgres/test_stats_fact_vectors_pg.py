"""PostgreSQL's stats and fact vectors families are one user's: counts, sizes, pending and
stored vectors of other users on the same database never show."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests import pg_server
from tests.storage.contract.seed import fact, session, turn

psycopg = pytest.importorskip("psycopg", reason=pg_server.NO_DRIVER)


def _unit(*values: float) -> np.ndarray:
    vector = np.asarray(values, dtype=np.float32)
    return vector / np.linalg.norm(vector)


def _fill(database: Any, facts: int) -> list[int]:
    with database.atomic() as tx:
        turn(tx, session(tx), "hello there " * 50)
        ids = [fact(tx, f"key_{n}", f"value {n}") for n in range(facts)]
        tx.fact_vectors.put(ids[0], "key_0", "value 0", "m", _unit(1.0, 0.0))
    return ids


def test_counts_sizes_and_vectors_are_the_users_own(open_pg: Any) -> None:
    mine, theirs = open_pg(), open_pg()
    mine_ids = _fill(mine, 2)
    with mine.read() as tx:
        before = tx.stats.file_bytes()
        counts = tx.stats.counts()
    _fill(theirs, 30)
    with mine.read() as tx:
        assert tx.stats.counts() == counts
        assert counts["facts"] == 2 and counts["sessions"] == 1 and counts["chunks"] == 1
        assert tx.stats.file_bytes() == before  # another user's rows are not this store's
        assert tx.stats.file_mode() is None  # the server's files are not the library's
        assert tx.stats.embedded_facts("m", 2) == 1
        assert tx.fact_vectors.pending("m", 2, 100) == [(mine_ids[1], "key_1", "value 1")]
        assert [row[0] for row in tx.fact_vectors.live_vectors("m", 2)] == [mine_ids[0]]
    # The size follows the user's own rows.
    with mine.atomic() as tx:
        turn(tx, session(tx), "more words " * 200)
    with mine.read() as tx:
        assert tx.stats.file_bytes() > before


def test_a_vector_for_another_users_fact_id_is_refused(open_pg: Any) -> None:
    mine, theirs = open_pg(), open_pg()
    (their_fact,) = _fill(theirs, 1)
    with mine.atomic() as tx:
        assert not tx.fact_vectors.put(their_fact, "key_0", "value 0", "m", _unit(0.0, 1.0))
    with theirs.read() as tx:
        assert [bytes(v[2]) for v in tx.fact_vectors.live_vectors("m", 2)] == [
            _unit(1.0, 0.0).astype("<f4").tobytes()
        ]
