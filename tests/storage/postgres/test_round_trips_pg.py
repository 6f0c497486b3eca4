"""Round trips to the server of the hot paths (issue #18: record_turn on PostgreSQL took 8×
SQLite's time, most of it waiting for ~16 statements one after another).

Each ``execute`` on a psycopg cursor is one round trip; the counts are of the calling thread
only (the store's worker has its own).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import elastimem
from tests import pg_server
from tests.conftest import HashEmbedder

psycopg = pytest.importorskip("psycopg", reason=pg_server.NO_DRIVER)

# BEGIN with its settings and the user's lock; the session's state; the turn (messages,
# session counters, chunks and postings); the writes counter; the graph check; the embed job;
# COMMIT.
RECORD_TURN_ROUND_TRIPS = 7


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The statements this thread sends from now on, in order."""
    sent: list[str] = []
    me = threading.get_ident()
    execute = psycopg.Cursor.execute

    def counted(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        if threading.get_ident() == me:
            sent.append(query if isinstance(query, str) else repr(query))
        return execute(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", counted)
    yield sent


def test_record_turn_is_a_few_round_trips(postgres_url: str, statements: list[str]) -> None:
    user = f"trips-{uuid.uuid4().hex}"
    with elastimem.open(
        postgres_url, user_id=user, embedder=HashEmbedder(), disable_builtin_embedder=True
    ) as mem:
        mem.begin_session()
        mem.record_turn("I keep a kayak at the lake.", "Nice, how often do you go?")
        mem.drain(30)
        statements.clear()
        mem.record_turn("Every weekend when it is warm.", "That sounds relaxing.")
        sent = list(statements)
        assert mem.drain(30)
        assert len(mem.recall("kayak weekend", 5)) == 2
    assert len(sent) <= RECORD_TURN_ROUND_TRIPS, sent
