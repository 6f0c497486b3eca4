"""Fixtures for the storage layer's tests: a real, opened storage database per backend.

The contract suite (``tests/storage/contract/``) runs every family's interface through
``backend_database``; a second backend is one more parameter here.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from elastimem import storage

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
