"""The PostgreSQL schema: its creation, ledger and layout (issue #18)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from elastimem.clock import parse_moment
from elastimem.errors import SchemaTooNewError, StoreError
from elastimem.storage.postgres import database as postgres_database
from elastimem.storage.postgres import migrations, schema
from tests import pg_server

psycopg = pytest.importorskip("psycopg", reason=pg_server.NO_DRIVER)

_OPEN_WHEN_TOLD = textwrap.dedent(
    """
    import os, sys, time
    from elastimem.storage.postgres import database
    url, user, go = sys.argv[1:4]
    while not os.path.exists(go):
        time.sleep(0.005)
    database.open_database(url, user).close()
    """
)


def _ledger(url: str) -> list[tuple[int, str]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(f"SELECT version, applied_at FROM {schema.LEDGER_TABLE}").fetchall()
    return [(int(version), str(at)) for version, at in rows]


def test_four_processes_creating_the_schema_at_once_all_open_it(
    postgres_server: pg_server.PgServer, tmp_path: Path
) -> None:
    url = postgres_server.create_database()
    go = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", _OPEN_WHEN_TOLD, url, f"user-{n}", str(go)],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(4)
    ]
    time.sleep(1.0)  # let them all start and wait at the line
    go.touch()
    errors = [w.communicate(timeout=120)[1] for w in workers]
    assert [w.returncode for w in workers] == [0, 0, 0, 0], errors
    ledger = _ledger(url)
    assert [version for version, _ in ledger] == [schema.CURRENT_SCHEMA_VERSION]
    parse_moment(ledger[0][1])  # a canonical timestamp
    with psycopg.connect(url) as conn:
        users = conn.execute(
            "SELECT user_id FROM meta WHERE key = 'created_at' ORDER BY user_id"
        ).fetchall()
    assert [u for (u,) in users] == [f"user-{n}" for n in range(4)]


def test_opening_again_changes_nothing(postgres_server: pg_server.PgServer) -> None:
    url = postgres_server.create_database()
    postgres_database.open_database(url, "alice").close()
    before = _ledger(url)
    with psycopg.connect(url, autocommit=True) as conn:
        assert migrations.ensure_schema(conn, "test") == schema.CURRENT_SCHEMA_VERSION
    postgres_database.open_database(url, "alice").close()
    assert _ledger(url) == before


def test_a_newer_schema_is_refused_before_anything_is_written(
    postgres_server: pg_server.PgServer,
) -> None:
    url = postgres_server.create_database()
    postgres_database.open_database(url, "alice").close()
    with psycopg.connect(url) as conn:
        conn.execute(
            f"INSERT INTO {schema.LEDGER_TABLE} (version, applied_at) VALUES (%s, 'later')",
            (schema.CURRENT_SCHEMA_VERSION + 1,),
        )
    with pytest.raises(SchemaTooNewError, match="upgrade elastimem"):
        postgres_database.open_database(url, "bob")
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT count(*) FROM meta WHERE user_id = 'bob'").fetchone() == (0,)


def test_create_false_on_an_empty_database_creates_nothing(
    postgres_server: pg_server.PgServer,
) -> None:
    url = postgres_server.create_database()
    with pytest.raises(StoreError, match="create=False"):
        postgres_database.open_database(url, "alice", create=False)
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT to_regclass(%s)", (schema.LEDGER_TABLE,)).fetchone() == (None,)


def test_a_failed_creation_leaves_no_table_behind(
    postgres_server: pg_server.PgServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = postgres_server.create_database()
    broken = [*schema.create_statements(), "CREATE TABLE meta (x int)"]  # a clash at the end
    monkeypatch.setattr(migrations, "create_statements", lambda: broken)
    with pytest.raises(StoreError):
        postgres_database.open_database(url, "alice")
    with psycopg.connect(url) as conn:
        tables = conn.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()"
        ).fetchone()
    assert tables == (0,)


def _catalog(conn: Any, sql: str, table: str) -> list[Any]:
    return list(conn.execute(sql, (table,)).fetchall())


def test_every_user_table_is_keyed_and_guarded_by_user(postgres_url: str) -> None:
    """user_id NOT NULL first in every primary key, unique constraint and index, in every
    foreign key; row-level security enabled and forced with the user policy."""
    with psycopg.connect(postgres_url) as conn:
        tables = {
            name
            for (name,) in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
            )
        }
        assert tables == set(schema.TABLES)
        for table in schema.USER_TABLES:
            (nullable,) = conn.execute(
                "SELECT is_nullable FROM information_schema.columns "
                "WHERE table_schema = current_schema() AND table_name = %s "
                "AND column_name = 'user_id'",
                (table,),
            ).fetchone() or ("missing",)
            assert nullable == "NO", table
            first_columns = _catalog(
                conn,
                "SELECT i.indexrelid::regclass::text, a.attname FROM pg_index i "
                "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0] "
                "WHERE i.indrelid = %s::regclass",
                table,
            )
            assert first_columns, table
            for index, column in first_columns:
                assert column == "user_id", (table, index)
            foreign_keys = _catalog(
                conn,
                "SELECT conname, (SELECT attname FROM pg_attribute WHERE attrelid = conrelid "
                "AND attnum = conkey[1]) FROM pg_constraint "
                "WHERE conrelid = %s::regclass AND contype = 'f'",
                table,
            )
            for name, column in foreign_keys:
                assert column == "user_id", (table, name)
            security = _catalog(
                conn,
                "SELECT relrowsecurity, relforcerowsecurity FROM pg_class WHERE oid = %s::regclass",
                table,
            )
            assert security == [(True, True)], table
            policies = _catalog(
                conn,
                "SELECT cmd, qual, with_check FROM pg_policies WHERE tablename = %s",
                table,
            )
            assert len(policies) == 1, table
            cmd, qual, with_check = policies[0]
            assert cmd == "ALL"
            assert schema.USER_SETTING in qual and schema.USER_SETTING in with_check


def test_one_live_version_per_key_and_user(postgres_server: pg_server.PgServer) -> None:
    url = postgres_server.create_database()
    postgres_database.open_database(url, "alice").close()
    insert = (
        "INSERT INTO facts (user_id, key, value, category, source, importance, created_at, "
        "valid_from, invalidated_at) VALUES (%s, 'city', %s, 'profile', 'explicit', 0.5, "
        "'2026-01-01T00:00:00.000000Z', '2026-01-01T00:00:00.000000Z', %s)"
    )
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(insert, ("alice", "Paris", None))
        conn.execute(insert, ("bob", "Rome", None))  # another user's live version
        conn.execute(insert, ("alice", "Lyon", "2026-02-01T00:00:00.000000Z"))  # history
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.execute(insert, ("alice", "Nice", None))
        # The stamp triggers write the writing user's meta.
        stamps = conn.execute(
            "SELECT user_id FROM meta WHERE key = 'facts.stamp' ORDER BY user_id"
        ).fetchall()
    assert stamps == [("alice",), ("bob",)]


def _layout(url: str) -> dict[str, list[Any]]:
    """What a migration may change: constraints, indexes, triggers and functions."""
    with psycopg.connect(url) as conn:
        return {
            "constraints": conn.execute(
                "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) "
                "FROM pg_constraint WHERE connamespace = current_schema()::regnamespace "
                "ORDER BY 1, 2"
            ).fetchall(),
            "indexes": conn.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() "
                "ORDER BY 1"
            ).fetchall(),
            "triggers": conn.execute(
                "SELECT tgrelid::regclass::text, tgname, pg_get_triggerdef(oid) FROM pg_trigger "
                "WHERE NOT tgisinternal ORDER BY 1, 2"
            ).fetchall(),
            "functions": conn.execute(
                "SELECT proname, prosrc FROM pg_proc "
                "WHERE pronamespace = current_schema()::regnamespace ORDER BY 1"
            ).fetchall(),
        }


def test_a_version_1_schema_upgrades_to_the_layout_a_new_one_has(
    postgres_server: pg_server.PgServer,
) -> None:
    """Version 3: the keyword postings lose their foreign keys (a key's check cost a lookup
    and a row lock per posting) and a statement trigger deletes them with their rows; the
    chunks' session index gains the id."""
    fresh = postgres_server.create_database()
    old = postgres_server.create_database()
    for url in (fresh, old):
        with psycopg.connect(url, autocommit=True) as conn:
            migrations.ensure_schema(conn, "test")
    with psycopg.connect(old, autocommit=True) as conn, conn.transaction():
        # The version 1 layout: the postings' cascading keys, no trigger of their own.
        for table in ("chunks", "facts"):
            conn.execute(f"DROP TRIGGER {table}_delete_postings ON {table}")
        conn.execute("DROP FUNCTION elastimem_delete_postings()")
        for postings, column, parent in (
            ("chunk_terms", "chunk_id", "chunks"),
            ("fact_terms", "fact_id", "facts"),
        ):
            conn.execute(
                f"ALTER TABLE {postings} ADD CONSTRAINT {postings}_user_id_{column}_fkey "
                f"FOREIGN KEY (user_id, {column}) REFERENCES {parent} (user_id, id) "
                "ON DELETE CASCADE DEFERRABLE"
            )
        conn.execute("DROP INDEX idx_chunks_session")
        conn.execute("CREATE INDEX idx_chunks_session ON chunks (user_id, session_id)")
        conn.execute(f"DELETE FROM {schema.LEDGER_TABLE}")
        conn.execute(f"INSERT INTO {schema.LEDGER_TABLE} VALUES (1, '2026-01-01T00:00:00Z')")
    assert _layout(old) != _layout(fresh)
    with psycopg.connect(old, autocommit=True) as conn:
        assert migrations.ensure_schema(conn, "test") == schema.CURRENT_SCHEMA_VERSION
    assert sorted(version for version, _ in _ledger(old)) == list(
        range(1, schema.CURRENT_SCHEMA_VERSION + 1)
    )  # each step's own row
    assert _layout(old) == _layout(fresh)


def test_the_chunk_before_each_chunk_is_one_index_probe_without_statistics(
    postgres_server: pg_server.PgServer,
) -> None:
    """What an embed job asks for every chunk (``vectors.previous_texts``) on tables the
    server has not analysed yet: with the session index by (user_id, session_id) alone the
    planner sorted a session's chunks once per chunk (a 10 MB exchange, 13k chunks in one
    session: minutes of one core)."""
    url = postgres_server.create_database()
    database = postgres_database.open_database(url, "alice")
    try:
        with database.atomic() as tx:
            sid = tx.transcript.insert_session(above=0, started_at="2026-01-01T00:00:00Z",
                host_tag=None, owner_pid=1, owner_host="h", heartbeat_at="2026-01-01T00:00:00Z",
                backdated=False)  # fmt: skip
            chunks = tx.transcript.insert_turn(sid, [("user", "x", 1)],
                [f"chunk {n}" for n in range(2000)], created_at="2026-01-01T00:00:00Z",
                title=None, heartbeat_at="2026-01-01T00:00:00Z").chunk_ids  # fmt: skip
        with database.read() as tx:
            assert tx.vectors.previous_texts([chunks[5]]) == {chunks[5]: "chunk 4"}
    finally:
        database.close()
    with psycopg.connect(url) as conn:
        plan = "\n".join(
            row[0]
            for row in conn.execute(
                "EXPLAIN SELECT c.id, p.text FROM chunks c CROSS JOIN LATERAL ("
                "SELECT text FROM chunks p WHERE p.user_id = c.user_id "
                "AND p.session_id = c.session_id AND p.id < c.id ORDER BY p.id DESC LIMIT 1) p "
                "WHERE c.user_id = 'alice' AND c.id = ANY(%s)",
                (list(chunks),),
            )
        )
    assert "Sort" not in plan, plan
    assert "idx_chunks_session" in plan, plan
