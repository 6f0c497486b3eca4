"""Contract: ``tx.lessons`` (storage.lessons.LessonRows) on every backend."""

from __future__ import annotations

from typing import Any

T0 = "2026-01-01T00:00:00.000000Z"
T1 = "2026-01-02T00:00:00.000000Z"
T2 = "2026-01-03T00:00:00.000000Z"
T3 = "2026-01-04T00:00:00.000000Z"


def test_add_then_revive_counts_uses(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        assert tx.lessons.archived_state("check the units") is None
        tx.lessons.add_or_revive("check the units", "math", T0)
        assert tx.lessons.archived_state("check the units") is False
        tx.lessons.add_or_revive("check the units", None, T1)
    with backend_database.read() as tx:
        (only,) = tx.lessons.most_used(5)
    assert (only.text, only.last_used_at) == ("check the units", T1)


def test_most_used_order_and_limit(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        tx.lessons.add_or_revive("once, late", None, T3)
        for at in (T0, T1, T2):
            tx.lessons.add_or_revive("three times", None, at)
        tx.lessons.add_or_revive("once, early", None, T0)
        tx.lessons.add_or_revive("once, early twin", None, T0)
    with backend_database.read() as tx:
        used = tx.lessons.most_used(10)
        assert [u.text for u in tx.lessons.most_used(2)] == ["three times", "once, late"]
        assert tx.lessons.most_used(0) == []
    assert [u.text for u in used] == [
        "three times",
        "once, late",
        "once, early twin",
        "once, early",
    ]
    assert used[2].id > used[3].id


def test_archive_beyond_keeps_the_most_recently_used(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        tx.lessons.add_or_revive("old", None, T0)
        tx.lessons.add_or_revive("middle", None, T1)
        tx.lessons.add_or_revive("new", None, T2)
        tx.lessons.archive_beyond(2)
        assert tx.lessons.archived_state("old") is True
        assert tx.lessons.archived_state("middle") is False
    with backend_database.read() as tx:
        assert sorted(u.text for u in tx.lessons.most_used(10)) == ["middle", "new"]
    with backend_database.atomic() as tx:
        tx.lessons.add_or_revive("old", None, T3)  # revived: current again
        assert tx.lessons.archived_state("old") is False
        tx.lessons.archive_beyond(2)
        assert tx.lessons.archived_state("middle") is True
        tx.lessons.archive_beyond(0)
    with backend_database.read() as tx:
        assert tx.lessons.most_used(10) == []
