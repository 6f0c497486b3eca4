"""The keyword index keys its arrays by a row's position, not by its id (issue 18): on
PostgreSQL one id sequence serves every user, so a user's ids are huge and sparse, and an
index sized by the largest id would cost memory for the whole database's rows."""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from elastimem import storage
from elastimem.index.keyword import KeywordIndex
from tests import pg_server
from tests.rows import execute as execute_raw
from tests.storage.contract.seed import session, turn

BASE = 10**12
GAP = 10**9
TEXTS = [
    "garden tomato walrus",
    "the garden gnome and the walrus",
    "tomato soup for lunch",
    "a walrus in the garden garden",
    "berlin trip with my sister",
    "garden party on friday",
]
QUERIES = [["garden"], ["walrus", "tomato"], ["sister", "garden", "friday"], ["nothing"]]
# The index's arrays for a handful of rows: far below one byte per id of the id range.
SMALL_BYTES = 64 * 1024


def same_ranking(ours: list[tuple[int, float]] | None, server: Any) -> None:
    assert ours is not None
    assert server is not None
    assert [i for i, _ in ours] == [i for i, _ in server]
    for (_, a), (_, b) in zip(ours, server, strict=True):
        assert math.isclose(a, b, rel_tol=1e-9)


def check(database: Any, index: KeywordIndex, ids: list[int]) -> None:
    """The index ranks as the backend's own BM25 and holds only these rows."""
    with database.read() as tx:
        for terms in QUERIES:
            same_ranking(
                index.top(tx, terms, 10, any_size=True), tx.postings.chunk_matches(terms, 10)
            )
    assert index.loaded_rows == len(ids)
    assert 0 < index.memory_bytes < SMALL_BYTES


@pytest.fixture
def own_postgres_url(postgres_server: pg_server.PgServer) -> Iterator[str]:
    """A database of this test's own (the test moves its id sequences far ahead)."""
    psycopg = pytest.importorskip("psycopg", reason=pg_server.NO_DRIVER)
    from elastimem.storage.postgres import migrations

    admin_url = postgres_server.create_database()
    with psycopg.connect(admin_url, autocommit=True) as conn:
        migrations.ensure_schema(conn, "the test database")
    yield postgres_server.app_url(admin_url)


def test_huge_sparse_ids_on_postgres_keep_the_index_small(own_postgres_url: str) -> None:
    import psycopg

    database = storage.open_database(own_postgres_url, user_id=f"ids-{uuid.uuid4().hex}")
    try:
        with psycopg.connect(own_postgres_url, autocommit=True) as other:
            with database.atomic() as tx:
                session_id = session(tx)
            ids = []
            # Other users' rows take the ids between this user's: the sequence jumps.
            for number, text in enumerate(TEXTS):
                other.execute(
                    "SELECT setval(pg_get_serial_sequence('chunks', 'id'), %s)",
                    (BASE + number * GAP,),
                )
                with database.atomic() as tx:
                    ids.append(turn(tx, session_id, text).chunk_ids[0])
            assert ids[0] > BASE and ids[-1] - ids[0] >= (len(TEXTS) - 1) * GAP
            index = KeywordIndex()
            check(database, index, ids)
            # Preloaded, then a row appended further up still.
            with database.read() as tx:
                index.prime(tx)
            assert index.preloaded
            check(database, index, ids)
            other.execute(
                "SELECT setval(pg_get_serial_sequence('chunks', 'id'), %s)", (BASE * 1000,)
            )
            with database.atomic() as tx:
                ids.append(turn(tx, session_id, "walrus garden late").chunk_ids[0])
            assert ids[-1] > BASE * 1000
            check(database, index, ids)
            assert index.preloaded  # appended, not dropped
    finally:
        database.close()


def test_huge_sparse_ids_on_sqlite_keep_the_index_small(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    database = storage.open_database(path)
    try:
        with database.atomic() as tx:
            session_id = session(tx)
            turn(tx, session_id, TEXTS[0])
        ids = [1]
        # Rows with ids of our choosing (an import can give any): huge and far apart.
        for number, text in enumerate(TEXTS[1:], start=1):
            ids.append(BASE + number * GAP)
            execute_raw(
                path,
                "INSERT INTO chunks (id, session_id, first_msg_id, last_msg_id, text, "
                "created_at) SELECT ?, session_id, first_msg_id, last_msg_id, ?, created_at "
                "FROM chunks WHERE id = 1",
                (ids[-1], text),
            )
        index = KeywordIndex()
        check(database, index, ids)
        with database.read() as tx:
            index.prime(tx)
        assert index.preloaded
        check(database, index, ids)
        with database.atomic() as tx:
            ids.append(turn(tx, session_id, "walrus garden late").chunk_ids[0])
        assert ids[-1] == ids[-2] + 1
        check(database, index, ids)
    finally:
        database.close()
