"""Fixtures for the LangGraph and LlamaIndex adapter tests (imported by their modules): a TARGET
on the test's backend, and user names.

``target`` is a folder of per-user SQLite stores, or the session's PostgreSQL address (a
test's users get a random suffix there, since every test shares that server's database).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture
def target(store_backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if store_backend == "postgres":
        return str(request.getfixturevalue("postgres_url"))
    return str(tmp_path / "users")


@pytest.fixture
def users() -> dict[str, str]:
    """alice, bob and carol as user ids unique to this test."""
    suffix = os.urandom(4).hex()
    return {name: f"{name}-{suffix}" for name in ("alice", "bob", "carol")}
