"""Fixtures for the storage layer's tests: a real, opened storage database per backend.

The contract suite (``tests/storage/contract/``) runs every family's interface through
``backend_database``; a second backend is one more parameter here.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from elastimem import storage
from tests import pg_server

# Set by .ci/run: a PostgreSQL server that cannot be started fails the run instead of
# skipping the PostgreSQL half.
REQUIRE_POSTGRES_ENV_VAR = "ELASTIMEM_REQUIRE_POSTGRES"

BACKENDS = ["sqlite", "postgres"]


@pytest.fixture(params=BACKENDS)
def backend_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[storage.Database]:
    """A freshly created, migrated store database on each backend, closed after the test."""
    if request.param == "sqlite":
        database = storage.open_database(tmp_path / "contract.db")
    else:
        database = open_postgres_database(request)
    try:
        yield database
    finally:
        database.close()


# -- PostgreSQL (issue #18): a real server, started once per test session ----------------------


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[pg_server.PgServer]:
    """The test session's PostgreSQL server (tests/pg_server.py); skips the PostgreSQL half,
    with the reason, where none can be had."""
    try:
        server = pg_server.start()
    except pg_server.PgUnavailable as exc:
        if os.environ.get(REQUIRE_POSTGRES_ENV_VAR):  # CI: the PostgreSQL half must run
            pytest.fail(f"{REQUIRE_POSTGRES_ENV_VAR} is set but {exc}")
        pytest.skip(str(exc))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def postgres_url(postgres_server: pg_server.PgServer) -> str:
    """A database with the current schema, addressed as the application role (not a
    superuser, so row-level security binds it as it binds an application)."""
    import psycopg

    from elastimem.storage.postgres import migrations

    admin_url = postgres_server.create_database()
    with psycopg.connect(admin_url, autocommit=True) as conn:
        migrations.ensure_schema(conn, "the test database")
    return postgres_server.app_url(admin_url)


def open_postgres_database(request: pytest.FixtureRequest) -> Any:
    """A fresh store on PostgreSQL: a new user of the session's database (users share
    nothing, so a new user is a new, empty store)."""
    from elastimem.storage.postgres import database as postgres_database
    from elastimem.storage.postgres.tx import IMPLEMENTED_FAMILIES
    from elastimem.storage.tx import Tx

    family = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_")
    families = {name for name, member in vars(Tx).items() if isinstance(member, property)}
    if family in families and family not in IMPLEMENTED_FAMILIES:
        pytest.skip(f"the {family} family is not implemented on PostgreSQL yet (issue #18)")
    url = request.getfixturevalue("postgres_url")
    return postgres_database.open_database(url, f"contract-{uuid.uuid4().hex}")
