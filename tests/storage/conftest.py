"""Fixtures for the storage layer's tests: a real, opened storage database per backend.

The contract suite (``tests/storage/contract/``) runs every family's interface through
``backend_database``; a second backend is one more parameter here.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from elastimem import storage

BACKENDS = ["sqlite"]


@pytest.fixture(params=BACKENDS)
def backend_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[storage.Database]:
    """A freshly created, migrated store database on each backend, closed after the test."""
    if request.param == "sqlite":
        database = storage.open_database(tmp_path / "contract.db")
    else:  # pragma: no cover - no other backend yet
        raise AssertionError(request.param)
    try:
        yield database
    finally:
        database.close()
