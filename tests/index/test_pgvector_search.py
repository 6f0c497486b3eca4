"""The vector leg searching in the database (PostgreSQL with pgvector, SPEC §4.4 / issue #18).

``VectorIndex`` over a user's store on a private PostgreSQL 16 with pgvector: exact in the
server (the same ids and scores as the resident numpy search and the brute-force reference,
filters applied before the cut, nothing held in this process), through an HNSW index for a
user above ``ann_min_rows``, and, through the public API, the same recall as a store
without pgvector.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import elastimem
from elastimem.index import in_database
from elastimem.index import vectors as vectors_module
from elastimem.retrieval.rank import Filters
from elastimem.storage.postgres import database as postgres_database
from elastimem.storage.postgres.vectors import hnsw_index_statement
from tests import pg_server
from tests import rows as raw
from tests.conftest import HashEmbedder, pgvector_database
from tests.index.chunk_vectors import (
    LABEL,
    NO_FILTERS,
    add_chunks,
    index_for,
    reference,
    search,
    unit_rows,
)

psycopg = pytest.importorskip("psycopg", reason=pg_server.NO_DRIVER)

DIM = 16


@pytest.fixture
def open_user(pgvector_url: str) -> Iterator[Callable[..., Any]]:
    opened: list[Any] = []

    def open_store(url: str = pgvector_url) -> Any:
        database = postgres_database.open_database(url, f"u-{uuid.uuid4().hex}")
        opened.append(database)
        return database

    try:
        yield open_store
    finally:
        for database in opened:
            database.close()


def filter_cases(database: Any) -> list[Filters]:
    sessions = [int(s) for (s,) in raw.rows(database, "SELECT DISTINCT session_id FROM chunks")]
    return [
        NO_FILTERS,
        Filters(exclude_session=min(sessions)),
        Filters(since="2025-01-02T00:00:00.000000Z"),
        Filters(until="2025-01-03T00:00:00.000000Z"),
        Filters(
            exclude_session=max(sessions),
            since="2025-01-01T10:00:30.000000Z",
            until="2025-01-04T00:00:00.000000Z",
        ),
    ]


def test_the_exact_search_runs_in_the_database_with_the_reference_answers(
    open_user: Callable[..., Any],
) -> None:
    """Ids, scores and order of the brute-force reference, for every filter and n (ties
    included: duplicated vectors go to the higher id), with no rows held here."""
    database = open_user()
    rng = np.random.default_rng(3)
    vectors = unit_rows(rng, 160, DIM)
    vectors[100:110] = vectors[0]  # exact ties
    add_chunks(database, vectors)  # written as raw bytes: the trigger fills the copy
    index = index_for(database, vector_backend="pgvector")
    resident = index_for(database, vector_backend="numpy")
    for query in [*unit_rows(rng, 4, DIM), vectors[0]]:
        for filters in filter_cases(database):
            for n in (1, 5, 12, 50, 400):
                expected = reference(database, query, n, filters)
                got = search(index, database, query, n, filters)
                assert got == expected, (filters, n)
                assert search(resident, database, query, n, filters) == got
    longer = 2.5 * vectors[1]  # a query not of unit length: the cut still holds
    assert search(index, database, longer, 7) == reference(database, longer, 7)
    assert index.backend_name() == "pgvector"
    assert index.resident_rows == 0 and index.resident_bytes == 0
    assert resident.backend_name() == "numpy" and resident.resident_rows == 160


def test_the_cut_fetches_more_when_the_servers_distances_leave_it_in_doubt(
    open_user: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Forty identical vectors: the n-th is tied with every row past the first fetch, so the
    search must widen until it has seen them all, and the ties go to the higher ids."""
    database = open_user()
    vectors = np.repeat(unit_rows(np.random.default_rng(4), 1, DIM), 40, axis=0)
    ids = add_chunks(database, vectors)
    monkeypatch.setattr(in_database, "IN_DATABASE_EXTRA_ROWS", 1)
    got = search(index_for(database, vector_backend="pgvector"), database, vectors[0], 3)
    assert [cid for cid, _ in got] == sorted(ids, reverse=True)[:3]
    assert got == reference(database, vectors[0], 3)


def test_hits_hand_over_the_vectors_the_resident_index_would(
    open_user: Callable[..., Any],
) -> None:
    database = open_user()
    rng = np.random.default_rng(5)
    ids = add_chunks(database, unit_rows(rng, 30, DIM))
    query = unit_rows(rng, 1, DIM)[0]
    wanted = np.asarray([ids[3], ids[7], 10**12], dtype=np.int64)
    answers = []
    for index in (
        index_for(database, vector_backend="pgvector"),
        index_for(database, vector_backend="numpy"),
    ):
        with database.read() as conn:
            found = index.search(conn, query, LABEL, NO_FILTERS, 10)
            assert isinstance(found, vectors_module.VectorHits)
            answers.append(found.vectors_of(wanted))
    (held_db, matrix_db), (held_np, matrix_np) = answers
    assert held_db.tolist() == held_np.tolist() == [True, True, False]
    np.testing.assert_array_equal(matrix_db, matrix_np)


def test_one_users_search_never_returns_another_users_chunks(
    open_user: Callable[..., Any],
) -> None:
    vectors = unit_rows(np.random.default_rng(6), 20, DIM)
    alice, bob = open_user(), open_user()
    alice_ids = set(add_chunks(alice, vectors))
    bob_ids = set(add_chunks(bob, vectors))
    for database, own in ((alice, alice_ids), (bob, bob_ids)):
        got = search(index_for(database, vector_backend="pgvector"), database, vectors[0], 100)
        assert {cid for cid, _ in got} == own


@pytest.fixture
def hnsw_database(pgvector_server: pg_server.PgServer) -> tuple[str, str]:
    """(superuser, application) addresses of a database of its own with the extension, the
    schema and an HNSW index over the DIM-sized vectors."""
    admin_url = pgvector_database(pgvector_server)
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(hnsw_index_statement(DIM))
    app_url = pgvector_server.app_url(admin_url)
    raw.POSTGRES_URLS.insert(0, app_url)  # for tests.rows
    return admin_url, app_url


def test_a_user_above_ann_min_rows_is_searched_through_the_hnsw_index(
    hnsw_database: tuple[str, str], open_user: Callable[..., Any]
) -> None:
    """The HNSW candidates are re-scored exactly (on a graph this small the walk finds
    them all: the reference answer); a user below the threshold, or one for whom the walk
    finds fewer than n rows, is searched exactly."""
    _, url = hnsw_database
    big, small = open_user(url), open_user(url)
    rng = np.random.default_rng(7)
    add_chunks(big, unit_rows(rng, 300, DIM))
    add_chunks(small, unit_rows(rng, 6, DIM))
    query = unit_rows(rng, 1, DIM)[0]
    index = index_for(big, ann_min_rows=200)
    with big.read() as conn:
        assert conn.vectors.hnsw_dims() == frozenset({DIM})
    assert search(index, big, query, 10) == reference(big, query, 10)
    assert index.backend_name() == "pgvector-hnsw"
    below = index_for(big, ann_min_rows=1000)  # auto: the resident search, the faster one
    assert search(below, big, query, 10) == reference(big, query, 10)
    assert below.backend_name() == "numpy"
    exact = index_for(big, vector_backend="pgvector", ann_min_rows=1000)
    assert search(exact, big, query, 10) == reference(big, query, 10)
    assert exact.backend_name() == "pgvector" and exact.resident_rows == 0
    few = index_for(small, vector_backend="hnsw")
    assert search(few, small, query, 10) == reference(small, query, 10)
    assert few.backend_name() == "pgvector"  # 6 rows < 10: the exact search answered


# -- through the public API ---------------------------------------------------------------


TURNS = [
    ("I adopted a grey cat named Miso last spring", "Miso sounds lovely."),
    ("My sister Lena moved to Lisbon for work", "Lisbon is a great city."),
    ("I am training for the Berlin marathon in September", "Good luck with the training!"),
    ("We planted tomatoes and basil on the balcony", "Fresh basil is the best."),
    ("My favourite band is Radiohead, OK Computer especially", "A classic album."),
    ("I started learning the cello two months ago", "The cello is beautiful."),
    ("Our team ships the billing service on Fridays", "Friday releases are brave."),
    ("I get migraines when I skip breakfast", "Regular meals may help."),
] * 3  # three of each: ties for the cut
QUERIES = ["what pet do I have", "where does my sister live", "which race am I running",
           "what music do I like", "what instrument", "health problems", "gardening"]  # fmt: skip


def _remembered(url: str, user: str, **options: Any) -> list[list[str]]:
    with elastimem.open(
        url, user_id=user, embedder=HashEmbedder(), disable_builtin_embedder=True, **options
    ) as mem:
        return [[hit.text for hit in mem.recall(query, 5)] for query in QUERIES]


def _fill(url: str, user: str) -> None:
    with elastimem.open(
        url, user_id=user, embedder=HashEmbedder(), disable_builtin_embedder=True
    ) as mem:
        mem.begin_session()
        for user_text, reply in TURNS:
            mem.record_turn(user_text, reply)
        mem.end_session(wait=True, timeout=60)
        assert mem.drain(60)


def test_hybrid_recall_on_pgvector_returns_what_a_store_without_it_returns(
    pgvector_url: str, postgres_url: str
) -> None:
    user = f"api-{uuid.uuid4().hex}"
    _fill(pgvector_url, user)
    _fill(postgres_url, user)
    for backend, path in (("pgvector", "pgvector"), ("auto", "numpy")):
        with elastimem.open(
            pgvector_url,
            user_id=user,
            embedder=HashEmbedder(),
            disable_builtin_embedder=True,
            vector_backend=backend,
        ) as mem:
            mem.recall(QUERIES[0], 5)
            assert mem.stats()["vector_backend"] == path
    in_database = _remembered(pgvector_url, user, vector_backend="pgvector")
    assert in_database == _remembered(pgvector_url, user)
    assert in_database == _remembered(postgres_url, user)
    assert any(hits for hits in in_database)


def test_erase_leaves_no_vector_of_the_session(pgvector_url: str) -> None:
    user = f"erase-{uuid.uuid4().hex}"
    _fill(pgvector_url, user)
    with elastimem.open(
        pgvector_url, user_id=user, embedder=HashEmbedder(), disable_builtin_embedder=True
    ) as mem:
        (session,) = [s for (s,) in raw.rows(mem, "SELECT id FROM sessions")]
        assert raw.one(mem, "SELECT count(embedding_vec) FROM chunks") == len(TURNS)
        mem.erase(session_id=int(session))
        assert raw.one(mem, "SELECT count(*) FROM chunks") == 0
        assert all("Miso" not in hit.text for hit in mem.recall(QUERIES[0], 5))


def test_an_import_into_a_pgvector_store_gets_its_copies(
    pgvector_url: str, postgres_url: str, tmp_path: Any
) -> None:
    """A user moved from a database without pgvector: the export carries the bytes only,
    the imported rows get their pgvector copy (the trigger) and recall finds them in the
    database as the source found them."""
    user = f"moved-{uuid.uuid4().hex}"
    _fill(postgres_url, user)
    dump = tmp_path / "dump.jsonl"
    with elastimem.open(
        postgres_url, user_id=user, embedder=HashEmbedder(), disable_builtin_embedder=True
    ) as mem:
        mem.export(dump)
    with elastimem.open(
        pgvector_url, user_id=user, embedder=HashEmbedder(), disable_builtin_embedder=True
    ) as mem:
        mem.import_(dump)
        assert raw.one(mem, "SELECT count(embedding_vec) FROM chunks") == len(TURNS)
    assert _remembered(pgvector_url, user) == _remembered(postgres_url, user)
