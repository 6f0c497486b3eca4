"""Contract: the methods the facade and the front ends (store, assembly, cli) added to other
families: ``tx.jobs.count_unfinished``, ``tx.facts.recent_quarantine``,
``tx.transcript.ended_session_summaries`` / ``rolling_summary`` and
``tx.vectors.has_vectors_labelled``, on every backend."""

from __future__ import annotations

from typing import Any

import numpy as np

NOW = "2025-01-01T00:00:00.000000Z"


def put(tx: Any, table: str, **row: Any) -> None:
    assert tx.admin.insert_row(table, list(row), list(row.values())) is None


def test_count_unfinished_counts_queued_and_running_jobs_of_the_list(
    backend_database: Any,
) -> None:
    base = {"kind": "consolidate", "priority": 4, "created_at": NOW, "updated_at": NOW}
    with backend_database.atomic() as tx:
        for job_id, state in ((1, "queued"), (2, "running"), (3, "held"), (4, "failed")):
            put(tx, "jobs", id=job_id, state=state, **base)
        put(tx, "jobs", id=5, state="queued", **base)
    with backend_database.read() as tx:
        assert tx.jobs.count_unfinished([1, 2, 3, 4]) == 2
        assert tx.jobs.count_unfinished([3, 4, 99]) == 0
        assert tx.jobs.count_unfinished([]) == 0


def test_recent_quarantine_gives_the_newest_oldest_first(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        for i in range(1, 5):
            put(tx, "quarantine", id=i, ts=f"2025-01-0{i}", key=f"k{i}", value=f"v{i}",
                reason="r", source="auto")  # fmt: skip
        put(tx, "quarantine", id=5, ts="2025-01-05", reason="no key")
    with backend_database.read() as tx:
        newest = tx.facts.recent_quarantine(2)
        assert tx.facts.recent_quarantine(0) == []
        assert len(tx.facts.recent_quarantine(100)) == 5
    assert newest == [
        {"ts": "2025-01-04", "key": "k4", "value": "v4", "reason": "r", "source": "auto"},
        {"ts": "2025-01-05", "key": None, "value": None, "reason": "no key", "source": None},
    ]


def test_ended_session_summaries_newest_first(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        put(tx, "sessions", id=1, started_at="2025-01-01", ended_at="2025-01-01", summary="one")
        put(tx, "sessions", id=2, started_at="2025-01-02", ended_at="2025-01-02", title="two")
        put(tx, "sessions", id=3, started_at="2025-01-03", ended_at="2025-01-03")  # nothing
        put(tx, "sessions", id=4, started_at="2025-01-04", summary="open")  # not ended
        put(tx, "sessions", id=5, started_at="2025-01-05", ended_at="2025-01-05",
            summary="five", title="Five")  # fmt: skip
    with backend_database.read() as tx:
        assert tx.transcript.ended_session_summaries(None, 10) == [
            ("2025-01-05", "five", "Five"),
            ("2025-01-02", None, "two"),
            ("2025-01-01", "one", None),
        ]
        assert tx.transcript.ended_session_summaries(5, 1) == [("2025-01-02", None, "two")]
        assert tx.transcript.ended_session_summaries(None, 0) == []


def test_rolling_summary(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        put(tx, "sessions", id=1, started_at=NOW, rolling_summary="- we met")
        put(tx, "sessions", id=2, started_at=NOW)
    with backend_database.read() as tx:
        assert tx.transcript.rolling_summary(1) == "- we met"
        assert tx.transcript.rolling_summary(2) is None
        assert tx.transcript.rolling_summary(3) is None


def test_has_vectors_labelled_matches_a_label_prefix(backend_database: Any) -> None:
    vector = np.ones(2, dtype="<f4") / np.sqrt(np.float32(2))
    with backend_database.atomic() as tx:
        put(tx, "sessions", id=1, started_at=NOW)
        for cid, label in ((1, "host:model"), (2, None), (3, "x_y%")):
            put(tx, "messages", id=cid, session_id=1, turn=cid, role="user", content="m",
                created_at=NOW)  # fmt: skip
            vec: dict[str, Any] = {}
            if label is not None:
                vec = {"embedding": vector.tobytes(), "embedding_model": label, "embedding_dim": 2}
            put(tx, "chunks", id=cid, session_id=1, first_msg_id=cid, last_msg_id=cid, text="t",
                created_at=NOW, **vec)  # fmt: skip
    with backend_database.read() as tx:
        assert tx.vectors.has_vectors_labelled("host:") is True
        assert tx.vectors.has_vectors_labelled("elastimem:") is False
        assert tx.vectors.has_vectors_labelled("x_y%") is True
        assert tx.vectors.has_vectors_labelled("x%") is False  # no wildcard in a prefix
        assert tx.vectors.has_vectors_labelled("xzy") is False
