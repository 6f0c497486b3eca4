"""Row-level security: a transaction sees and writes only its own user's rows, in every
table, even with SQL that forgets the user (issue #18). Run as a role that is no superuser
and has no BYPASSRLS (the ``postgres_url`` role), as an application would be."""

from __future__ import annotations

from typing import Any

import pytest

from elastimem.storage.postgres import schema
from tests import pg_server

psycopg = pytest.importorskip("psycopg", reason=pg_server.NO_DRIVER)

TS = "2026-01-01T00:00:00.000000Z"


def _fill(conn: Any, user: str) -> None:
    """One row (or more) in every user table for ``user``, inside a scoped transaction."""

    def insert(sql: str, *params: object) -> int:
        row = conn.execute(sql, (user, *params)).fetchone()
        return int(row[0]) if row else 0

    session = insert("INSERT INTO sessions (user_id, started_at) VALUES (%s, %s) RETURNING id", TS)
    message = insert(
        "INSERT INTO messages (user_id, session_id, turn, role, content, created_at) "
        "VALUES (%s, %s, 1, 'user', 'hello', %s) RETURNING id",
        session,
        TS,
    )
    chunk = insert(
        "INSERT INTO chunks (user_id, session_id, first_msg_id, last_msg_id, text, created_at) "
        "VALUES (%s, %s, %s, %s, 'hello', %s) RETURNING id",
        session,
        message,
        message,
        TS,
    )
    facts = [
        insert(
            "INSERT INTO facts (user_id, key, value, category, source, importance, created_at, "
            "valid_from, origin_session_id) VALUES (%s, %s, 'v', 'note', 'explicit', 0.5, %s, "
            "%s, %s) RETURNING id",
            key,
            TS,
            TS,
            session,
        )
        for key in ("k1", "k2")
    ]
    insert(
        "INSERT INTO fact_reviews (user_id, old_fact_id, new_fact_id, verdict, reviewed_at) "
        "VALUES (%s, %s, %s, 'kept', %s) RETURNING id",
        facts[0],
        facts[1],
        TS,
    )
    insert(
        "INSERT INTO fact_vectors (user_id, fact_id, embedding_model, embedding_dim, embedding) "
        "VALUES (%s, %s, 'm', 1, '\\x00000000') RETURNING fact_id",
        facts[0],
    )
    insert(
        "INSERT INTO lessons (user_id, text, created_at, last_used_at) "
        "VALUES (%s, 'be brief', %s, %s) RETURNING id",
        TS,
        TS,
    )
    insert("INSERT INTO quarantine (user_id, ts, reason) VALUES (%s, %s, 'r') RETURNING id", TS)
    nodes = [
        insert(
            "INSERT INTO graph_nodes (user_id, canonical_name, created_at, updated_at) "
            "VALUES (%s, %s, %s, %s) RETURNING id",
            name,
            TS,
            TS,
        )
        for name in ("ada", "bob")
    ]
    insert(
        "INSERT INTO graph_edges (user_id, source_node, target_node, relationship, created_at, "
        "last_seen, source_chunk_id) VALUES (%s, %s, %s, 'knows', %s, %s, %s) RETURNING id",
        nodes[0],
        nodes[1],
        TS,
        TS,
        chunk,
    )
    insert(
        "INSERT INTO graph_mentions (user_id, node_id, chunk_id, created_at) "
        "VALUES (%s, %s, %s, %s) RETURNING node_id",
        nodes[0],
        chunk,
        TS,
    )
    insert(
        "INSERT INTO graph_merge_reviews (user_id, type_a, name_a, type_b, name_b, verdict, "
        "reviewed_at) VALUES (%s, 'person', 'ada', 'person', 'ad', 'same', %s) RETURNING id",
        TS,
    )
    insert(
        "INSERT INTO jobs (user_id, kind, state, session_id, priority, created_at, updated_at) "
        "VALUES (%s, 'embed', 'queued', %s, 1, %s, %s) RETURNING id",
        session,
        TS,
        TS,
    )
    insert(
        "INSERT INTO ann_index (user_id, label, dim, seq, gen, data, built_at) "
        "VALUES (%s, 'm', 1, 1, 1, '\\x00', %s) RETURNING dim",
        TS,
    )
    insert(
        "INSERT INTO chunk_terms (user_id, term, chunk_id, tf) VALUES (%s, 'hello', %s, 1) "
        "RETURNING tf",
        chunk,
    )
    insert(
        "INSERT INTO fact_terms (user_id, term, fact_id, tf) VALUES (%s, 'v', %s, 1) RETURNING tf",
        facts[0],
    )
    insert("INSERT INTO events (user_id, ts, kind) VALUES (%s, %s, 'e') RETURNING id", TS)


def _counts(conn: Any) -> dict[str, int]:
    """Rows of every user table as the SQL sees them, with no user in the statement."""
    counts = {}
    for table in schema.USER_TABLES:
        row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
        counts[table] = int(row[0])
    return counts


@pytest.fixture
def two_users(open_pg: Any) -> tuple[Any, Any]:
    alice, bob = open_pg(), open_pg()
    for db in (alice, bob):
        with db.atomic() as tx:
            _fill(tx.conn, db.user_id)
    return alice, bob


def test_the_test_role_is_bound_by_row_security(postgres_url: str) -> None:
    with psycopg.connect(postgres_url) as conn:
        row = conn.execute(
            "SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user"
        ).fetchone()
    assert row == (False, False)


def test_a_user_sees_only_its_own_rows_in_every_table(two_users: tuple[Any, Any]) -> None:
    alice, bob = two_users
    with alice.read() as tx:
        mine = _counts(tx.conn)
        theirs = tx.conn.execute(
            "SELECT count(*) FROM sessions WHERE user_id = %s", (bob.user_id,)
        ).fetchone()
    assert all(mine[table] >= 1 for table in schema.USER_TABLES), mine
    assert theirs == (0,)
    with bob.read() as tx:
        assert _counts(tx.conn) == mine  # the same rows for each: nothing of the other


def test_a_user_cannot_write_anothers_rows(two_users: tuple[Any, Any]) -> None:
    alice, bob = two_users
    for table, column in (("meta", "value"), ("sessions", "title"), ("facts", "value")):
        with alice.atomic() as tx:
            changed = tx.conn.execute(
                f"UPDATE {table} SET {column} = 'stolen' WHERE user_id = %s", (bob.user_id,)
            ).rowcount
            removed = tx.conn.execute(
                f"DELETE FROM {table} WHERE user_id = %s", (bob.user_id,)
            ).rowcount
            assert (changed, removed) == (0, 0), table
    with alice.atomic() as tx:
        tx.conn.execute("DELETE FROM sessions")  # every session it can see: its own
    with bob.read() as tx:
        assert tx.conn.execute("SELECT count(*) FROM sessions").fetchone() == (1,)
        assert tx.conn.execute("SELECT count(*) FROM chunks").fetchone() == (1,)


@pytest.mark.parametrize("table", schema.USER_TABLES)
def test_a_user_cannot_insert_rows_for_another(two_users: tuple[Any, Any], table: str) -> None:
    alice, bob = two_users
    with bob.read() as tx:
        before = _counts(tx.conn)
    with alice.atomic() as tx:
        conn = tx.conn
        with conn.transaction():  # a savepoint, so the failure leaves the write usable
            columns = [
                name
                for (name,) in conn.execute(
                    "SELECT column_name FROM information_schema.columns "
                    "WHERE table_schema = current_schema() AND table_name = %s "
                    "AND column_name NOT IN ('user_id', 'id') ORDER BY ordinal_position",
                    (table,),
                )
            ]
            listed = ", ".join(columns)
            conn.execute(
                f"CREATE TEMP TABLE copy_of_row ON COMMIT DROP AS "
                f"SELECT {listed} FROM {table} LIMIT 1"
            )
        if table == "lessons":  # unique per user and text: make it another text
            conn.execute("UPDATE copy_of_row SET text = 'another'")
        refused = pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security")
        with refused, conn.transaction():
            conn.execute(
                f"INSERT INTO {table} (user_id, {listed}) SELECT %s, {listed} FROM copy_of_row",
                (bob.user_id,),
            )
    with bob.read() as tx:
        assert _counts(tx.conn) == before


def test_a_transaction_without_a_user_sees_nothing(
    two_users: tuple[Any, Any], postgres_url: str
) -> None:
    with psycopg.connect(postgres_url) as conn:
        assert set(_counts(conn).values()) == {0}  # the setting was never made
        conn.rollback()
        with conn.transaction():
            conn.execute("SELECT set_config(%s, %s, true)", (schema.USER_SETTING, "x"))
        # Set for one transaction only: afterwards it is empty, and matches no row.
        assert set(_counts(conn).values()) == {0}
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(
                "INSERT INTO meta (user_id, key, value) VALUES (%s, 'k', 'v')",
                (two_users[0].user_id,),
            )
