"""``storage.open_database``: the address picks the backend; what no backend opens yet is
refused before anything is created."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from elastimem import ConfigError, StoreError, storage
from elastimem.storage.sqlite import database as sqlite_database

POSTGRES_MESSAGE = (
    "a PostgreSQL store holds many users' memory: pass user_id= (--user on the command "
    "line) to say whose memory this instance serves"
)


@pytest.mark.parametrize("target", ["path", "str", ":memory:"])
def test_a_path_opens_an_sqlite_store(tmp_path: Path, target: str) -> None:
    given = {"path": tmp_path / "a.db", "str": str(tmp_path / "a.db"), ":memory:": target}
    database = storage.open_database(given[target])
    try:
        assert isinstance(database, sqlite_database.Database)
        assert database.is_memory == (target == ":memory:")
        with database.atomic() as tx:
            tx.meta.set("k", "v")
        with database.read() as tx:
            assert tx.meta.get("k") == "v"
            assert tx.meta.get_int("schema_version") > 0
    finally:
        database.close()


@pytest.mark.parametrize(
    "address", ["postgresql://u@db/memory", "postgres://db/memory", "POSTGRESQL://db/x"]
)
def test_a_postgres_address_needs_a_user_and_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, address: str
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as raised:
        storage.open_database(address)
    assert str(raised.value) == POSTGRES_MESSAGE
    assert os.listdir(tmp_path) == []


def test_another_scheme_is_no_store_address(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="is an address, not a file path"):
        storage.open_database("mysql://db/memory")
    assert os.listdir(tmp_path) == []


def test_create_false_opens_only_an_existing_store(tmp_path: Path) -> None:
    missing = tmp_path / "sub" / "missing.db"
    with pytest.raises(StoreError, match="none was created"):
        storage.open_database(missing, create=False)
    assert not missing.parent.exists()
    storage.open_database(tmp_path / "there.db").close()
    database = storage.open_database(tmp_path / "there.db", create=False)
    database.close()
    assert database.closed


@pytest.mark.parametrize("address", ["postgresql://app:s3cret@db/memory", "postgres://db/memory"])
def test_the_sqlite_backend_refuses_a_postgres_address_and_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, address: str
) -> None:
    # It became a folder "postgresql:" in the working folder holding an SQLite file.
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="is a PostgreSQL address, not a file path") as raised:
        sqlite_database.open_store(address)
    assert "s3cret" not in str(raised.value)
    assert os.listdir(tmp_path) == []
