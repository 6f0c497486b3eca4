"""Contract: ``tx.facts`` (storage.facts.FactRows) on every backend."""

from __future__ import annotations

from typing import Any

import pytest

from elastimem.errors import StoreError

T0 = "2026-01-01T00:00:00.000000Z"
T1 = "2026-01-02T00:00:00.000000Z"
T2 = "2026-01-03T00:00:00.000000Z"
T3 = "2026-01-04T00:00:00.000000Z"


def _insert(
    tx: Any,
    key: str,
    value: str,
    *,
    at: str = T0,
    category: str = "note",
    source: str = "explicit",
    importance: float = 1.0,
    origin: int | None = None,
) -> int:
    return int(
        tx.facts.insert_version(
            key,
            value,
            category=category,
            source=source,
            importance=importance,
            created_at=at,
            valid_from=at,
            origin_session_id=origin,
        )
    )


def _replace(tx: Any, key: str, value: str, at: str, source: str = "explicit") -> int:
    live = tx.facts.live_version(key)
    tx.facts.invalidate(live.id, at)
    new_id = _insert(tx, key, value, at=at, source=source)
    tx.facts.link_successor(live.id, new_id)
    return new_id


def test_live_version_and_the_chain_of_versions(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        assert tx.facts.live_version("city") is None
        first = _insert(tx, "city", "Paris", at=T0)
        live = tx.facts.live_version("city")
        assert (live.id, live.value, live.valid_from) == (first, "Paris", T0)
        second = _replace(tx, "city", "Lyon", T1)
    with backend_database.read() as tx:
        assert tx.facts.live_version("city").id == second
        versions = tx.facts.history("city")
        assert tx.facts.history("nothing") == []
    assert [(f.id, f.value) for f in versions] == [(first, "Paris"), (second, "Lyon")]
    assert versions[0].invalidated_at == T1 and versions[0].invalidated_by == second
    assert versions[1].invalidated_at is None and versions[1].invalidated_by is None
    assert versions[1].created_at == T1 and versions[1].source == "explicit"


def test_a_second_live_version_of_a_key_is_refused(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        _insert(tx, "city", "Paris")
    with pytest.raises(StoreError), backend_database.atomic() as tx:
        _insert(tx, "other", "kept only if the transaction commits")
        _insert(tx, "city", "Lyon")
    with backend_database.read() as tx:
        assert [f.value for f in tx.facts.history("city")] == ["Paris"]
        assert tx.facts.history("other") == []


def test_insert_keeps_the_origin_session(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        session_id = tx.transcript.insert_session(
            above=0,
            started_at=T0,
            host_tag=None,
            owner_pid=1,
            owner_host="h",
            heartbeat_at=T0,
            backdated=False,
        )
        _insert(tx, "pet", "cat", origin=session_id)
    with backend_database.read() as tx:
        assert tx.facts.live_values_of(["pet"]) == {"pet": "cat"}


def test_shown_facts_order_and_archiving(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        low = _insert(tx, "low", "l", importance=0.2, at=T2)
        high = _insert(tx, "high", "h", importance=0.9, at=T0)
        newer = _insert(tx, "newer", "n", importance=0.9, at=T1)
        profile = _insert(tx, "name", "Ada", importance=0.1, category="profile")
        hidden = _insert(tx, "hidden", "x", importance=1.0)
        tx.facts.archive([hidden])
        ended = _insert(tx, "ended", "e")
        assert tx.facts.end_live("ended", T1) is True
    order = [profile, newer, high, low]
    with backend_database.read() as tx:
        assert [f.id for f in tx.facts.shown_facts()] == order
        rows = tx.facts.shown_rows()
        assert [r[0] for r in rows] == order
        assert rows[0] == (profile, "name", "Ada", "profile", pytest.approx(0.1), T0)
        assert list(tx.facts.shown_values().items()) == [
            ("name", "Ada"),
            ("newer", "n"),
            ("high", "h"),
            ("low", "l"),
        ]
        # Archived versions are live: current ids and live values include them.
        assert sorted(tx.facts.current_ids()) == sorted([*order, hidden])
        assert tx.facts.live_values_of(["hidden", "ended", "absent"]) == {"hidden": "x"}
        assert tx.facts.live_values_of([]) == {}
        assert ended not in tx.facts.current_ids()


def test_confirm_counts_an_access_and_unarchives(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        fact_id = _insert(tx, "city", "Paris")
        tx.facts.archive([fact_id])
        tx.facts.confirm(fact_id, T2)
    with backend_database.read() as tx:
        (fact,) = tx.facts.history("city")
    assert (fact.archived, fact.access_count, fact.last_accessed_at) == (False, 1, T2)


def test_touch_counts_accesses(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        a = _insert(tx, "a", "1")
        b = _insert(tx, "b", "2")
        tx.facts.touch([a, b], T1)
        tx.facts.touch([a], T2)
        tx.facts.touch([], T3)
    with backend_database.read() as tx:
        (fact_a,) = tx.facts.history("a")
        (fact_b,) = tx.facts.history("b")
    assert (fact_a.access_count, fact_a.last_accessed_at) == (2, T2)
    assert (fact_b.access_count, fact_b.last_accessed_at) == (1, T1)


def test_end_live_and_end_live_started_by(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        _insert(tx, "diet", "vegetarian", at=T1)
        _insert(tx, "job", "baker", at=T1)
        assert tx.facts.end_live_started_by("diet", T0) is False  # it began after T0
        assert tx.facts.end_live_started_by("diet", T2) is True
        assert tx.facts.end_live_started_by("diet", T3) is False  # nothing live any more
        assert tx.facts.end_live("job", T0) is True  # whatever its start
        assert tx.facts.end_live("job", T0) is False
        assert tx.facts.end_live("absent", T0) is False
    with backend_database.read() as tx:
        assert tx.facts.history("diet")[0].invalidated_at == T2
        assert tx.facts.history("job")[0].invalidated_at == T0
        assert tx.facts.live_version("diet") is None


def test_decay_candidates_are_shown_facts_below_the_importance(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        weak = _insert(tx, "weak", "w", importance=0.5, at=T1)
        _insert(tx, "strong", "s", importance=0.7)
        archived = _insert(tx, "archived", "a", importance=0.1)
        tx.facts.archive([archived])
        tx.facts.touch([weak], T2)
    with backend_database.read() as tx:
        found = tx.facts.decay_candidates(0.7)
    assert len(found) == 1
    candidate = found[0]
    assert (candidate.id, candidate.valid_from, candidate.last_accessed_at) == (weak, T1, T2)
    assert candidate.importance == pytest.approx(0.5) and candidate.access_count == 1


def test_stamp_changes_with_what_is_shown_not_with_accesses(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        before = tx.facts.stamp()
        fact_id = _insert(tx, "city", "Paris")
        inserted = tx.facts.stamp()
        tx.facts.touch([fact_id], T1)
        touched = tx.facts.stamp()
        tx.facts.archive([fact_id])
        archived = tx.facts.stamp()
    assert inserted is not None and inserted != before
    assert touched == inserted
    assert archived != touched
    with backend_database.read() as tx:
        assert tx.facts.stamp() == archived


def test_merge_reviews(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        _insert(tx, "city", "Paris", at=T0)
        lyon = _replace(tx, "city", "Lyon", T1)
        _insert(tx, "food", "pasta", at=T0)
        merged = _replace(tx, "food", "pizza", T2, source="merge")
        _insert(tx, "pet", "cat", at=T0)
        _replace(tx, "pet", "dog", T2)
        replaced = _replace(tx, "pet", "fish", T3)  # the dog is no longer live
    with backend_database.read() as tx:
        pairs = tx.facts.unreviewed_replacements(T0, 10)
        assert tx.facts.unreviewed_replacements(T3, 10)[0].new_id == replaced
        assert len(tx.facts.unreviewed_replacements(T0, 1)) == 1
    assert [(p.key, p.old_value, p.new_value) for p in pairs] == [
        ("city", "Paris", "Lyon"),
        ("pet", "dog", "fish"),
    ]
    assert merged not in {p.new_id for p in pairs}
    first = pairs[0]
    assert (first.new_id, first.old_valid_from, first.new_valid_from) == (lyon, T0, T1)
    with backend_database.atomic() as tx:
        assert tx.facts.record_review(first.old_id, first.new_id, "kept", None, T3) is True
        assert tx.facts.record_review(first.old_id, first.new_id, "merged", lyon, T3) is False
    with backend_database.read() as tx:
        assert [p.key for p in tx.facts.unreviewed_replacements(T0, 10)] == ["pet"]


def test_quarantine_keeps_the_newest_entries(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        assert tx.facts.newest_quarantine(5) == []
        for n in range(4):
            tx.facts.add_quarantine(at=T0, key=f"k{n}", value=None, reason="r", source="auto")
        tx.facts.add_quarantine(at=T1, key=None, value="v", reason="why", source=None)
        tx.facts.trim_quarantine(3)
    with backend_database.read() as tx:
        entries = tx.facts.newest_quarantine(10)
        assert [e["key"] for e in tx.facts.newest_quarantine(2)] == ["k3", None]
        assert tx.facts.newest_quarantine(0) == []
    assert [e["key"] for e in entries] == ["k2", "k3", None]
    assert entries[-1] == {"ts": T1, "key": None, "value": "v", "reason": "why", "source": None}
