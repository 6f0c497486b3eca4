"""pgvector (schema version 2, ``schema.PGVECTOR_DOC``): the copy of the chunk vectors in a
database with the ``vector`` extension, its back-fill, and ``tx.vectors.nearest``.

Runs on a private PostgreSQL 16 with pgvector (the ``pgserver`` wheel's binaries, see
``tests/pg_server.py``), as the application role unless the superuser is the point.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from elastimem import storage
from elastimem.storage.postgres import database as postgres_database
from elastimem.storage.postgres import migrations, schema
from elastimem.storage.postgres.vectors import vector_text
from tests import pg_server
from tests.conftest import pgvector_database
from tests.storage import seed

psycopg = pytest.importorskip("psycopg", reason=pg_server.NO_DRIVER)

DIM = 8


def unit_rows(n: int, seed_: int = 0, dim: int = DIM) -> np.ndarray:
    rows = np.random.default_rng(seed_).standard_normal((n, dim)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


@pytest.fixture
def open_vec(pgvector_url: str) -> Iterator[Callable[..., Any]]:
    """Stores on the session's pgvector database as the application role."""
    opened: list[Any] = []

    def open_store(user_id: str | None = None, url: str = pgvector_url) -> Any:
        database = postgres_database.open_database(url, user_id or f"u-{uuid.uuid4().hex}")
        opened.append(database)
        return database

    try:
        yield open_store
    finally:
        for database in opened:
            database.close()


def chunks_with_vectors(database: Any, vectors: np.ndarray) -> tuple[list[int], list[int]]:
    """One chunk per vector, the first half in a session of 2025-01-01 and the rest in one
    of 2025-01-02, stored with ``store_many``; returns ``(chunk ids in vector order,
    the two session ids)``."""
    half = len(vectors) // 2
    ids: list[int] = []
    sessions: list[int] = []
    for day, part in enumerate((range(half), range(half, len(vectors)))):
        at = f"2025-01-{day + 1:02d}T10:00:00.000000Z"
        sessions.append(seed.add_session(database, at))
        made = seed.add_chunks(database, sessions[-1], [f"c{i}" for i in part], created_at=at)
        ids.extend(made)
        with database.atomic() as tx:
            tx.vectors.store_many("m", [(cid, vectors[i], 1) for cid, i in zip(made, part)])
    return ids, sessions


def copies(url: str, user: str) -> dict[int, tuple[bytes | None, str | None]]:
    """Each chunk's ``(embedding, embedding_vec as text)`` of ``user``, read as the role of
    ``url`` (row-level security applies)."""
    with psycopg.connect(url) as conn:
        conn.execute("SELECT set_config('elastimem.user_id', %s, true)", (user,))
        rows = conn.execute(
            "SELECT id, embedding, embedding_vec::text FROM chunks WHERE user_id = %s", (user,)
        ).fetchall()
    return {int(i): (None if b is None else bytes(b), v) for i, b, v in rows}


def assert_copies_exact(found: dict[int, tuple[bytes | None, str | None]]) -> None:
    for cid, (blob, text) in found.items():
        if blob is None:
            assert text is None, cid
            continue
        assert text is not None, f"chunk {cid} has no pgvector copy"
        values = np.asarray([float(x) for x in text.strip("[]").split(",")], dtype="<f4")
        assert values.tobytes() == blob, cid  # bit for bit


# -- writes --------------------------------------------------------------------------------


def test_every_vector_write_sets_the_exact_pgvector_copy(
    open_vec: Callable[..., Any], pgvector_url: str
) -> None:
    database = open_vec()
    assert database.pgvector
    vectors = unit_rows(6, seed_=1)
    vectors[0, 0] = np.float32(1e-40)  # a subnormal survives too
    ids, _ = chunks_with_vectors(database, vectors)
    with database.atomic() as tx:
        tx.vectors.store(ids[1], unit_rows(1, seed_=9)[0], "m", 2)  # a re-embed
    found = copies(pgvector_url, database.user_id)
    assert set(found) == set(ids)
    assert_copies_exact(found)


def test_a_statement_writing_only_the_bytes_gets_its_copy_from_the_trigger(
    open_vec: Callable[..., Any], pgvector_url: str
) -> None:
    """An import, or a process that opened before the column existed, writes ``embedding``
    alone: the trigger fills (or clears) the copy in the same statement."""
    database = open_vec()
    ids, _ = chunks_with_vectors(database, unit_rows(3, seed_=2))
    replaced = unit_rows(1, seed_=3)[0]
    with psycopg.connect(pgvector_url) as conn:
        conn.execute("SELECT set_config('elastimem.user_id', %s, true)", (database.user_id,))
        conn.execute(
            "UPDATE chunks SET embedding = %s WHERE user_id = %s AND id = %s",
            (replaced.tobytes(), database.user_id, ids[0]),
        )
        conn.execute(
            "UPDATE chunks SET embedding = NULL, embedding_model = NULL, embedding_dim = NULL "
            "WHERE user_id = %s AND id = %s",
            (database.user_id, ids[1]),
        )
    found = copies(pgvector_url, database.user_id)
    assert found[ids[0]][0] == replaced.tobytes()
    assert found[ids[1]] == (None, None)
    assert_copies_exact(found)


def test_vector_text_round_trips_through_pgvector(pgvector_url: str) -> None:
    values = np.concatenate([unit_rows(4, seed_=4).reshape(-1), [1e-45, -0.0, 3.4e38, 1e-7]])
    values = values.astype("<f4")
    with psycopg.connect(pgvector_url) as conn:
        text = conn.execute("SELECT %s::vector::text", (vector_text(values),)).fetchone()[0]
        row = conn.execute("SELECT elastimem_vector(%s)::text", (values.tobytes(),)).fetchone()
    decoded = row[0]
    back = np.asarray([float(x) for x in text.strip("[]").split(",")], dtype="<f4")
    assert back.tobytes() == values.tobytes()
    assert decoded == text  # the trigger's SQL decoding gives the same vector


# -- nearest -------------------------------------------------------------------------------


def test_nearest_orders_by_cosine_with_the_filters_and_stored_vectors(
    open_vec: Callable[..., Any],
) -> None:
    database = open_vec()
    vectors = unit_rows(40, seed_=5)
    ids, sessions = chunks_with_vectors(database, vectors)
    by_id = dict(zip(ids, vectors))
    query = unit_rows(1, seed_=6)[0]
    with database.read() as tx:
        assert tx.vectors.searches_in_database()
        cases = [
            ({}, set(ids)),
            ({"exclude_session": sessions[0]}, set(ids[20:])),
            ({"since": "2025-01-02T00:00:00.000000Z"}, set(ids[20:])),
            ({"until": "2025-01-02T00:00:00.000000Z"}, set(ids[:20])),
        ]
        for where, allowed in cases:
            filters = {"exclude_session": None, "since": None, "until": None, **where}
            got, distances, matrix = tx.vectors.nearest("m", DIM, query, 7, **filters)
            expected = sorted(allowed, key=lambda i: -float(by_id[i] @ query))[:7]
            assert got.tolist() == expected, where
            assert np.all(np.diff(distances) >= 0)
            np.testing.assert_allclose(1 - distances, matrix.astype(np.float64) @ query, atol=1e-5)
            for cid, row in zip(got.tolist(), matrix):
                assert row.tobytes() == by_id[cid].tobytes()
        # another model or size is never mixed in
        assert tx.vectors.nearest("other", DIM, query, 5, exclude_session=None, since=None,
                                  until=None)[0].size == 0  # fmt: skip


def test_nearest_never_returns_another_users_rows(open_vec: Callable[..., Any]) -> None:
    """Row-level security binds the application role: the same vectors under two users,
    each user's search sees only its own."""
    vectors = unit_rows(10, seed_=7)
    alice, bob = open_vec(), open_vec()
    alice_ids, _ = chunks_with_vectors(alice, vectors)
    bob_ids, _ = chunks_with_vectors(bob, vectors)
    for database, own in ((alice, alice_ids), (bob, bob_ids)):
        with database.read() as tx:
            got = tx.vectors.nearest(
                "m", DIM, vectors[0], 100, exclude_session=None, since=None, until=None
            )[0]
        assert sorted(got.tolist()) == sorted(own)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_without_pgvector_the_database_does_not_search(
    backend: str, request: pytest.FixtureRequest, tmp_path: Any
) -> None:
    if backend == "sqlite":
        database = storage.open_database(tmp_path / "s.db")
    else:
        url = request.getfixturevalue("postgres_url")
        database = postgres_database.open_database(url, f"u-{uuid.uuid4().hex}")
    try:
        with database.read() as tx:
            assert not tx.vectors.searches_in_database()
            assert tx.vectors.hnsw_dims() == frozenset()
            with pytest.raises(NotImplementedError):
                tx.vectors.nearest(
                    "m", DIM, unit_rows(1)[0], 5, exclude_session=None, since=None, until=None
                )
    finally:
        database.close()


# -- schema: the step to version 2 and an extension installed later ------------------------


def _layout(url: str) -> dict[str, Any]:
    with psycopg.connect(url) as conn:
        columns = conn.execute(
            "SELECT column_name, data_type, udt_name FROM information_schema.columns "
            "WHERE table_name = 'chunks' ORDER BY column_name"
        ).fetchall()
        storage_mode = conn.execute(
            "SELECT attstorage FROM pg_attribute WHERE attrelid = 'chunks'::regclass "
            "AND attname = %s",
            (schema.PGVECTOR_COLUMN,),
        ).fetchall()
        triggers = conn.execute(
            "SELECT tgname FROM pg_trigger WHERE tgrelid = 'chunks'::regclass "
            "AND NOT tgisinternal ORDER BY tgname"
        ).fetchall()
        functions = conn.execute(
            "SELECT proname FROM pg_proc WHERE starts_with(proname, 'elastimem_') ORDER BY 1"
        ).fetchall()
        forced = conn.execute(
            "SELECT relforcerowsecurity FROM pg_class WHERE oid = 'chunks'::regclass"
        ).fetchone()
        ledger = conn.execute(f"SELECT max(version) FROM {schema.LEDGER_TABLE}").fetchone()
    return {
        "columns": columns,
        "storage": storage_mode,
        "triggers": triggers,
        "functions": functions,
        "forced": forced,
        "version": ledger,
    }


def _v1_database(server: pg_server.PgServer, *, extension: bool) -> str:
    """A database holding the version-1 layout (as elastimem before this step made it)."""
    admin_url = server.create_database("elastimem_v1")
    with psycopg.connect(admin_url, autocommit=True) as conn:
        if extension:
            conn.execute("CREATE EXTENSION vector")
        conn.execute(schema.TABLES[schema.LEDGER_TABLE])
        for statement in schema.create_statements():
            conn.execute(statement)
        conn.execute(f"INSERT INTO {schema.LEDGER_TABLE} (version, applied_at) VALUES (1, 'then')")
    return admin_url


def _write_v1_vectors(url: str, user: str, vectors: np.ndarray) -> list[int]:
    """Vectors written as version 1 wrote them: the bytes only."""
    database = postgres_database.open_database(url, user)
    try:
        session = seed.add_session(database, "2025-01-01T10:00:00.000000Z")
        ids = seed.add_chunks(database, session, [f"c{i}" for i in range(len(vectors))])
        with database.read() as tx:
            assert not tx.pgvector
        with database.atomic() as tx:
            tx.vectors.store_many("m", [(cid, v, 1) for cid, v in zip(ids, vectors)])
        return ids
    finally:
        database.close()


def test_the_step_to_version_2_matches_a_fresh_schema_and_back_fills_every_user(
    pgvector_server: pg_server.PgServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = _v1_database(pgvector_server, extension=True)
    app_old = pgvector_server.app_url(old)
    # version 1 as it ran: no step to apply, no pgvector
    monkeypatch.setattr(migrations, "CURRENT_SCHEMA_VERSION", 1)
    monkeypatch.setattr(migrations, "needs_pgvector", lambda conn: False)
    monkeypatch.setattr(postgres_database, "has_pgvector_column", lambda conn: False)
    written = {user: _write_v1_vectors(app_old, user, unit_rows(5, seed_=n)) for n, user in
               enumerate(("alice", "bob"))}  # fmt: skip
    monkeypatch.undo()
    migrations.BACKFILL_PAGE, page = 3, migrations.BACKFILL_PAGE  # several pages
    try:
        postgres_database.open_database(old, "owner").close()  # the owner upgrades
    finally:
        migrations.BACKFILL_PAGE = page
    fresh = pgvector_database(pgvector_server)
    assert _layout(old) == _layout(fresh)
    layout = _layout(old)
    assert layout["version"] == (schema.CURRENT_SCHEMA_VERSION,) and layout["forced"] == (True,)
    for user, ids in written.items():
        found = copies(old, user)
        assert set(found) == set(ids)
        assert_copies_exact(found)


def test_a_version_1_database_without_the_extension_steps_up_with_nothing_added(
    postgres_server: pg_server.PgServer,
) -> None:
    old = _v1_database(postgres_server, extension=False)
    postgres_database.open_database(old, "owner").close()
    layout = _layout(old)
    assert layout["version"] == (schema.CURRENT_SCHEMA_VERSION,)
    assert schema.PGVECTOR_COLUMN not in {c for c, _, _ in layout["columns"]}
    assert ("chunks_embedding_vec",) not in layout["triggers"]


def test_an_extension_installed_after_the_schema_is_added_and_back_filled_by_its_owner(
    pgvector_server: pg_server.PgServer, caplog: pytest.LogCaptureFixture
) -> None:
    admin_url = pgvector_server.create_database("elastimem_late")
    with psycopg.connect(admin_url, autocommit=True) as conn:
        migrations.ensure_schema(conn, "test")  # version 2, no extension yet
    app = pgvector_server.app_url(admin_url)
    vectors = unit_rows(4, seed_=11)
    database = postgres_database.open_database(app, "alice")
    try:
        ids, _ = chunks_with_vectors(database, vectors)
        assert not database.pgvector
    finally:
        database.close()
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION vector")  # the operator, as a superuser
    # The application role may not change the schema: it opens, searching in-process.
    with caplog.at_level(logging.WARNING, logger="elastimem"):
        database = postgres_database.open_database(app, "alice")
    try:
        assert not database.pgvector
        with database.read() as tx:
            assert not tx.vectors.searches_in_database()
    finally:
        database.close()
    assert "open it once as the schema's owner" in caplog.text
    postgres_database.open_database(admin_url, "owner").close()  # the owner adds it
    database = postgres_database.open_database(app, "alice")
    try:
        assert database.pgvector
        with database.read() as tx:
            got = tx.vectors.nearest(
                "m", DIM, vectors[2], 1, exclude_session=None, since=None, until=None
            )[0]
        assert got.tolist() == [ids[2]]
    finally:
        database.close()
    found = copies(app, "alice")
    assert set(found) == set(ids)
    assert_copies_exact(found)
    assert _layout(admin_url) == _layout(pgvector_database(pgvector_server))


def test_export_leaves_the_copy_out(open_vec: Callable[..., Any]) -> None:
    database = open_vec()
    chunks_with_vectors(database, unit_rows(2))
    with database.read() as tx:
        names = [name for name, _ in tx.admin.columns("chunks")]
    assert "embedding" in names and schema.PGVECTOR_COLUMN not in names
