"""PostgresDatabase: atomic/read/savepoints/rollback/close on a real server (issue #18)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import urllib.parse
import uuid
from typing import Any

import pytest

from elastimem.errors import ConfigError, StoreClosedError, StoreError, StoreLockedError
from elastimem.storage.postgres import database as postgres_database
from tests import pg_server

psycopg = pytest.importorskip("psycopg", reason=pg_server.NO_DRIVER)


class Boom(Exception):
    pass


def test_a_committed_write_is_read_back(open_pg: Any) -> None:
    db = open_pg()
    with db.atomic() as tx:
        tx.meta.set("k", "v")
    with db.read() as tx:
        assert tx.meta.get("k") == "v"


def test_an_exception_rolls_the_whole_write_back(open_pg: Any) -> None:
    db = open_pg()
    with pytest.raises(Boom), db.atomic() as tx:
        tx.meta.set("k", "v")
        with db.atomic() as inner:
            inner.meta.set("inner", "x")
        raise Boom
    with db.read() as tx:
        assert tx.meta.get("k") is None
        assert tx.meta.get("inner") is None


def test_a_failed_nested_write_rolls_back_only_its_savepoint(open_pg: Any) -> None:
    db = open_pg()
    with db.atomic() as tx:
        tx.meta.set("outer", "1")
        with pytest.raises(Boom), db.atomic() as inner:
            inner.meta.set("inner", "2")
            raise Boom
        # A database error inside a savepoint leaves the outer transaction usable too.
        with pytest.raises(StoreError), db.atomic() as inner:
            inner.conn.execute("SELECT 1 / 0")
        tx.meta.set("after", "3")
    with db.read() as tx:
        assert (tx.meta.get("outer"), tx.meta.get("inner"), tx.meta.get("after")) == (
            "1",
            None,
            "3",
        )


def test_a_database_error_is_a_store_error_and_rolls_back(open_pg: Any) -> None:
    db = open_pg()
    with pytest.raises(StoreError) as caught, db.atomic() as tx:
        tx.meta.set("k", "v")
        tx.conn.execute("SELECT 1 / 0")
    assert "division by zero" in str(caught.value)
    assert isinstance(caught.value.__cause__, psycopg.Error)
    with db.read() as tx:
        assert tx.meta.get("k") is None
    with db.atomic() as tx:  # the store (and its pool) still work
        tx.meta.set("k", "again")


def test_a_read_is_one_snapshot_and_never_writes(open_pg: Any) -> None:
    db = open_pg()
    with db.atomic() as tx:
        tx.meta.set("k", "old")
    with db.read() as tx:
        assert tx.meta.get("k") == "old"
        writer = threading.Thread(target=_set, args=(db, "k", "new"))
        writer.start()
        writer.join()
        assert tx.meta.get("k") == "old"  # the write committed meanwhile is not seen
    with db.read() as tx:
        assert tx.meta.get("k") == "new"
    with pytest.raises(StoreError, match="read-only"), db.read() as tx:
        tx.meta.set("k", "from a read")
    with db.read() as tx:
        assert tx.meta.get("k") == "new"


def _set(db: Any, key: str, value: str) -> None:
    with db.atomic() as tx:
        tx.meta.set(key, value)


def test_a_read_inside_a_write_sees_it_and_other_threads_do_not(open_pg: Any) -> None:
    db = open_pg()
    seen: list[str | None] = []

    def read_elsewhere() -> None:
        with db.read() as other:
            seen.append(other.meta.get("k"))

    with db.atomic() as tx:
        assert db.in_write()
        tx.meta.set("k", "pending")
        with db.read() as inner:
            assert inner.meta.get("k") == "pending"
        reader = threading.Thread(target=read_elsewhere)
        reader.start()
        reader.join()
    assert not db.in_write()
    assert seen == [None]


def test_in_write_is_per_thread(open_pg: Any) -> None:
    db = open_pg()
    answers: list[bool] = []
    with db.atomic():
        probe = threading.Thread(target=lambda: answers.append(db.in_write()))
        probe.start()
        probe.join()
    assert answers == [False]


def test_writers_of_one_user_in_two_processes_do_not_lose_updates(
    postgres_url: str, tmp_path: Any
) -> None:
    """bump() reads then writes: without the per-user write lock, two processes bumping at
    once would lose increments under READ COMMITTED."""
    user = f"user-{uuid.uuid4().hex}"
    script = textwrap.dedent(
        """
        import sys
        from elastimem.storage.postgres import database
        db = database.open_database(sys.argv[1], sys.argv[2])
        for _ in range(100):
            with db.atomic() as tx:
                tx.meta.bump("counter")
        db.close()
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    workers = [
        subprocess.Popen([sys.executable, "-c", script, postgres_url, user], env=env)
        for _ in range(2)
    ]
    assert [w.wait(timeout=120) for w in workers] == [0, 0]
    db = postgres_database.open_database(postgres_url, user)
    try:
        with db.read() as tx:
            assert tx.meta.get_int("counter") == 200
    finally:
        db.close()


def test_writers_of_different_users_do_not_wait_for_each_other(open_pg: Any) -> None:
    alice, bob = open_pg(), open_pg()
    done = threading.Event()

    def write_bob() -> None:
        with bob.atomic() as tx:
            tx.meta.set("k", "bob")
        done.set()

    with alice.atomic() as tx:
        tx.meta.set("k", "alice")
        other = threading.Thread(target=write_bob)
        other.start()
        other.join(timeout=60)
        assert done.is_set()  # while alice's write is still open


def test_a_user_locked_past_the_timeout_raises_store_locked(
    open_pg: Any, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = open_pg()
    monkeypatch.setattr(postgres_database, "LOCK_TIMEOUT_MS", 200)
    with psycopg.connect(postgres_url, autocommit=True) as holder:
        holder.execute("BEGIN")
        holder.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s || %s, 0))",
            (postgres_database.USER_LOCK_PREFIX, db.user_id),
        )
        with pytest.raises(StoreLockedError), db.atomic() as tx:
            tx.meta.set("k", "v")
        holder.execute("ROLLBACK")
    with db.atomic() as tx:
        tx.meta.set("k", "v")


def test_close_refuses_new_work_and_is_idempotent(open_pg: Any) -> None:
    db = open_pg()
    assert not db.closed
    db.close()
    db.close()
    assert db.closed
    with pytest.raises(StoreClosedError), db.atomic():
        pass
    with pytest.raises(StoreClosedError), db.read():
        pass


def test_stores_of_one_server_share_the_pool_and_outlive_each_other(open_pg: Any) -> None:
    first, second = open_pg(), open_pg()
    first.close()
    with second.atomic() as tx:
        tx.meta.set("k", "still served")
    with second.read() as tx:
        assert tx.meta.get("k") == "still served"


def test_path_is_the_address_without_the_password(open_pg: Any, postgres_url: str) -> None:
    parts = urllib.parse.urlsplit(postgres_url)
    db = open_pg()
    assert parts.password
    assert parts.password not in db.path
    assert db.path.startswith("postgresql://")
    assert f"@{parts.hostname}:{parts.port}{parts.path}" in db.path
    assert (db.is_memory, db.fts_enabled) == (False, True)


def test_an_unreachable_server_is_a_store_error_without_the_password() -> None:
    with socket_port() as port:
        url = f"postgresql://app:s3cret-pw@127.0.0.1:{port}/memory"
        with pytest.raises(StoreError) as caught:
            postgres_database.open_database(url, "alice")
    message = str(caught.value)
    assert "s3cret-pw" not in message
    assert f"postgresql://app@127.0.0.1:{port}/memory" in message


class socket_port:
    """A local port nothing listens on (bound, not listening, while in use)."""

    def __enter__(self) -> int:
        import socket

        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        return int(self._sock.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        self._sock.close()


@pytest.mark.parametrize("user_id", ["", "   ", None, 7, "a\x00b"])
def test_a_user_id_is_required(postgres_url: str, user_id: Any) -> None:
    with pytest.raises(ConfigError):
        postgres_database.open_database(postgres_url, user_id)


def test_open_records_a_new_users_store_once(open_pg: Any) -> None:
    user = f"user-{uuid.uuid4().hex}"
    with pytest.raises(StoreError, match="create=False"):
        open_pg(user, create=False)
    db = open_pg(user)
    with db.read() as tx:
        created = tx.meta.get("created_at")
        assert created is not None
    again = open_pg(user, create=False)
    with again.read() as tx:
        assert tx.meta.get("created_at") == created


@pytest.mark.parametrize(
    ("conninfo", "shown"),
    [
        (
            "postgresql://app:pw1@db.internal:5433/memory",
            "postgresql://app@db.internal:5433/memory",
        ),
        ("postgres://app@db.internal/memory?password=pw1", "postgresql://app@db.internal/memory"),
        (
            "host=db.internal user=app password=pw1 dbname=memory",
            "postgresql://app@db.internal/memory",
        ),
    ],
)
def test_redact_drops_the_password_whatever_the_form(conninfo: str, shown: str) -> None:
    assert postgres_database.redact(conninfo) == shown
    assert "pw1" not in postgres_database.redact(conninfo)


def test_a_cancelled_statement_is_not_called_a_lock(open_pg: Any) -> None:
    db = open_pg()
    with pytest.raises(StoreError, match="cancelled") as caught, db.atomic() as tx:
        tx.conn.execute("SET LOCAL statement_timeout = '50ms'")
        tx.conn.execute("SELECT pg_sleep(5)")
    assert not isinstance(caught.value, StoreLockedError)


@pytest.mark.parametrize("user_id", ["o'brien", "back\\slash", "naïve user", "a;b -- c"])
def test_any_user_id_string_is_one_user(open_pg: Any, user_id: str) -> None:
    db = open_pg(user_id)
    other = open_pg()
    with db.atomic() as tx:
        tx.meta.set("k", user_id)
    with db.read() as tx:
        assert tx.meta.get("k") == user_id
        assert tx.conn.execute("SELECT DISTINCT user_id FROM meta").fetchall() == [(user_id,)]
    with other.read() as tx:
        assert tx.meta.get("k") is None


def test_connections_the_server_dropped_are_replaced(
    open_pg: Any, postgres_server: pg_server.PgServer, postgres_url: str
) -> None:
    db = open_pg()
    with db.atomic() as tx:
        tx.meta.set("k", "before")
    database = urllib.parse.urlsplit(postgres_url).path.lstrip("/")
    with psycopg.connect(postgres_server.admin_url, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND usename = %s",
            (database, pg_server.APP_ROLE),
        )
    with db.read() as tx:
        assert tx.meta.get("k") == "before"
    with db.atomic() as tx:
        tx.meta.set("k", "after")
    with db.read() as tx:
        assert tx.meta.get("k") == "after"


def test_a_writer_killed_mid_write_leaves_nothing_and_holds_no_lock(
    open_pg: Any, postgres_url: str, tmp_path: Any
) -> None:
    db = open_pg()
    ready = tmp_path / "ready"
    script = textwrap.dedent(
        """
        import pathlib, sys, time
        from elastimem.storage.postgres import database
        db = database.open_database(sys.argv[1], sys.argv[2])
        with db.atomic() as tx:
            tx.meta.set("half", "written")
            pathlib.Path(sys.argv[3]).touch()
            time.sleep(600)
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    writer = subprocess.Popen(
        [sys.executable, "-c", script, postgres_url, db.user_id, str(ready)], env=env
    )
    try:
        deadline = 120
        while not ready.exists() and deadline > 0 and writer.poll() is None:
            threading.Event().wait(0.05)
            deadline -= 0.05
        assert ready.exists()
    finally:
        writer.kill()
        writer.wait()
    with db.atomic() as tx:  # the user's write lock went with the killed process
        assert tx.meta.get("half") is None
        tx.meta.set("next", "writer")
    with db.read() as tx:
        assert (tx.meta.get("half"), tx.meta.get("next")) == (None, "writer")


def test_without_the_driver_opening_says_which_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(ConfigError, match=r"elastimem\[postgres\]"):
        postgres_database.open_database("postgresql://app@db.internal/memory", "alice")


def test_a_role_that_bypasses_row_security_is_warned_about_once(
    postgres_server: pg_server.PgServer, caplog: pytest.LogCaptureFixture
) -> None:
    url = postgres_server.create_database()  # as the superuser
    with caplog.at_level("WARNING", logger="elastimem"):
        postgres_database.open_database(url, "alice").close()
        postgres_database.open_database(url, "bob").close()
    warned = [r for r in caplog.records if "row-level security" in r.getMessage()]
    assert len(warned) == 1
