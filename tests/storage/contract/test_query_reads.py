"""Contract: the reads and writes of the query path and the job handlers, appended to
``tx.transcript``, ``tx.facts`` and ``tx.postings`` (one block each), on every backend."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from elastimem.index.vectors import write_vectors
from tests.storage.contract.seed import fact, session, turn


@pytest.fixture
def chats(backend_database: Any) -> dict[str, Any]:
    """Two sessions: three turns, then one; chunk ids by name."""
    with backend_database.atomic() as tx:
        first, second = session(tx, at="2024-01-10T00:00:00.000000Z"), session(tx)
        ids = {
            "cello": turn(tx, first, "My sister plays the cello", at="2024-01-10T10:00:00.000000Z"),
            "rust": turn(tx, first, "I am learning Rust", at="2024-01-11T10:00:00.000000Z"),
            "concert": turn(
                tx, first, "The cello concert was at 8pm", at="2024-03-02T10:00:00.000000Z"
            ),
            "later": turn(tx, second, "A cello in the next session"),
        }
    return {
        "first": first,
        "second": second,
        **{name: record.chunk_ids[0] for name, record in ids.items()},
    }


def test_chunk_reads(backend_database: Any, chats: dict[str, Any]) -> None:
    cello, rust, concert, later = (chats[k] for k in ("cello", "rust", "concert", "later"))
    with backend_database.read() as tx:
        assert sorted(tx.transcript.session_chunk_ids(chats["first"])) == [cello, rust, concert]
        spans = tx.transcript.chunk_spans([cello, 10_000])
        assert list(spans) == [cello] and "cello" in spans[cello][0]
        assert spans[cello][1] is not None and spans[cello][2] is not None
        rows = tx.transcript.chunk_rows([later, cello])
        assert sorted((r[0], r[1]) for r in rows) == [
            (cello, chats["first"]),
            (later, chats["second"]),
        ]
        assert all(isinstance(r[2], str) and isinstance(r[3], float) for r in rows)
        assert [cid for cid, _ in tx.transcript.chunk_texts([concert, cello])] == [cello, concert]
        assert tx.transcript.all_chunk_ids() == [cello, rust, concert, later]
        pairs = [(cello, concert, chats["first"]), (cello, rust, chats["first"])]
        assert tx.transcript.consecutive_pairs(pairs) == [(cello, rust)]  # rust is between
        assert tx.transcript.consecutive_pairs([]) == []


def test_chunk_vectors_to_make(backend_database: Any, chats: dict[str, Any]) -> None:
    cello, rust, concert, later = (chats[k] for k in ("cello", "rust", "concert", "later"))
    with backend_database.atomic() as tx:
        assert tx.transcript.any_chunk_without_vector()
        assert [cid for cid, _ in tx.transcript.chunks_without_vector(2)] == [cello, rust]
        write_vectors(tx, [cello, rust], np.eye(2, 4, dtype=np.float32), "m")
        write_vectors(tx, [concert], np.eye(1, 8, dtype=np.float32), "other")
        assert [cid for cid, _ in tx.transcript.chunks_without_vector(10)] == [later]
        assert tx.transcript.chunk_ids_needing_vector("m", 4) == [concert, later]
        wanted = [later, concert, cello]
        assert [c for c, _ in tx.transcript.chunks_needing_vector(wanted, "m", 4)] == [
            concert,
            later,
        ]
        assert [c for c, _ in tx.transcript.chunks_needing_vector(wanted, "m", None)] == [
            cello,
            concert,
            later,
        ]
        assert tx.transcript.chunks_needing_vector([], "m", 4) == []
        write_vectors(tx, [later], np.eye(1, 4, dtype=np.float32), "m")
        assert tx.transcript.any_chunk_without_vector() is False


def test_turns_and_summaries(backend_database: Any, chats: dict[str, Any]) -> None:
    first = chats["first"]
    with backend_database.atomic() as tx:
        messages = tx.transcript.turn_messages(first, [2, 1])
        assert [(t, role) for t, role, _c, _at in messages] == [
            (1, "user"),
            (1, "assistant"),
            (2, "user"),
            (2, "assistant"),
        ]
        assert messages[0][2] == "My sister plays the cello"
        assert tx.transcript.turn_messages(first, []) == []
        assert [cid for cid, _ in tx.transcript.turn_chunks(first, [3, 1])] == [
            chats["cello"],
            chats["concert"],
        ]
        assert tx.transcript.recent_user_messages(first, 2) == [
            "The cello concert was at 8pm",
            "I am learning Rust",
        ]
        assert tx.transcript.rolling_summary(first) is None
        tx.transcript.set_rolling_summary(first, "- one\n- two")
        assert tx.transcript.rolling_summary(first) == "- one\n- two"
        tx.transcript.set_rolling_summary(first, None)
        assert tx.transcript.rolling_summary(first) is None
        tx.transcript.set_session_summary(first, "cello and Rust")


def test_keyword_search_fallbacks(backend_database: Any, chats: dict[str, Any]) -> None:
    cello, concert, later = chats["cello"], chats["concert"], chats["later"]
    with backend_database.read() as tx:
        for search in (tx.postings.chunk_matches, tx.postings.chunk_term_counts):
            found = search(["cello"], 10)
            assert found is not None and {cid for cid, _ in found} == {cello, concert, later}
            assert all(score > 0 for _cid, score in found)
            outside = search(["cello"], 10, exclude_session=chats["first"])
            assert [cid for cid, _ in outside or []] == [later]
            timed = search(["cello"], 10, since="2024-02-01", until="2024-04-01")
            assert [cid for cid, _ in timed or []] == [concert]
            assert len(search(["cello"], 1) or []) == 1
            assert search(["xylophone"], 10) == []
        counts = tx.postings.chunk_term_counts(["cello", "concert"], 10) or []
        assert counts[0][0] == concert  # both terms


def test_fact_reads_and_keyword_search(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        old = fact(tx, "city", "Lisbon", at="2024-01-01")
        new = fact(tx, "city", "Porto", at="2024-06-01")
        pet = fact(tx, "favorite_pet", "greyhound", at="2024-07-01")
        assert tx.facts.key_exists("city") and not tx.facts.key_exists("nope")
        assert sorted(tx.facts.keys_of([old, new, 10_000])) == [
            (old, "city", False),
            (new, "city", True),
        ]
        assert tx.facts.keys_of([]) == []
        assert tx.facts.archived_among([old, new, pet]) == set()
        rows = tx.facts.candidate_rows([pet])
        assert [(r[0], r[1], r[2]) for r in rows] == [(pet, "favorite_pet", "greyhound")]
        assert rows[0][3].startswith("2024-07-01") and isinstance(rows[0][4], float)
        assert tx.facts.candidate_rows([]) == []
        live = tx.facts.live_attributes("city")
        assert live is not None and live[0] == new and isinstance(live[1], float)
        assert tx.facts.live_attributes("nope") is None
        for search in (tx.postings.fact_matches, tx.postings.fact_term_counts):
            assert [fid for fid, _ in search(["porto"], 10) or []] == [new]
            assert search(["lisbon"], 10) == []  # not live
            assert [fid for fid, _ in search(["lisbon"], 10, live_only=False) or []] == [old]
            assert [fid for fid, _ in search(["favorite", "pet"], 10) or []] == [pet]
            assert search(["porto"], 10, since="2024-07-01") == []
            assert [f for f, _ in search(["greyhound"], 10, until="2024-08-01") or []] == [pet]
