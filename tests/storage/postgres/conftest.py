"""Fixtures for the PostgreSQL backend's own tests (the server: ``tests/storage/conftest.py``)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest


@pytest.fixture
def open_pg(postgres_url: str) -> Iterator[Callable[..., Any]]:
    """Open stores on the session's database as the application role; closed after the
    test. ``open_pg()`` is a new user's store, ``open_pg(user)`` a given user's."""
    from elastimem.storage.postgres import database as postgres_database

    opened: list[Any] = []

    def open_store(user_id: str | None = None, **options: Any) -> Any:
        database = postgres_database.open_database(
            postgres_url, user_id or f"user-{uuid.uuid4().hex}", **options
        )
        opened.append(database)
        return database

    try:
        yield open_store
    finally:
        for database in opened:
            database.close()
