"""Chunks said within the time a question names join the candidates (retrieval/span_pool.py)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import date

import pytest

import elastimem
from elastimem.retrieval import span_pool, temporal
from elastimem.retrieval.rank import VECTOR_CANDIDATES, Filters

from ..conftest import HashEmbedder

Factory = Callable[..., elastimem.Elastimem]

QUESTION = "What did we paint on 7 July, 2023?"
SUNSET = "Finished a sunset over the lake at last"


@pytest.fixture
def painted(make_store: Factory, embedder: HashEmbedder) -> elastimem.Elastimem:
    """More exchanges about painting than the vector leg keeps, none said on 7 July 2023,
    and one said that day that shares no word with the question."""
    mem = make_store(embedder=embedder)
    for month in (3, 4, 5):
        mem.begin_session(at=f"2023-0{month}-01T10:00:00+00:00")
        for i in range(VECTOR_CANDIDATES // 2):
            at = f"2023-0{month}-01T10:{i:02d}:00+00:00"
            mem.record_turn(f"We paint what we see, part {month}-{i}", "Paint on!", at=at)
        mem.end_session()
    mem.begin_session(at="2023-07-07T10:00:00+00:00")
    mem.record_turn(SUNSET, "Beautiful", at="2023-07-07T10:00:00+00:00")
    mem.end_session()
    assert mem.drain(10)
    return mem


def _has_sunset(hits: list[elastimem.Hit]) -> bool:
    return any(SUNSET in h.text for h in hits)


def test_a_chunk_said_on_the_named_day_joins_though_no_leg_found_it(
    painted: elastimem.Elastimem, monkeypatch: pytest.MonkeyPatch
) -> None:
    hits = painted.recall(QUESTION, k=200, kinds=["chunk"])
    assert _has_sunset(hits)
    sunset = next(h for h in hits if SUNSET in h.text)
    breakdown = next(
        b for b in painted.explain(QUESTION, k=200).chunk_breakdowns if b.chunk_id == sunset.id
    )
    assert breakdown.fts == 0.0
    assert breakdown.vector == pytest.approx(span_pool.SPAN_POOL_SHARE)
    assert breakdown.time_bonus == pytest.approx(temporal.DATE_BONUS)
    # without the span's own search no leg holds it: it is no candidate at all
    monkeypatch.setattr(span_pool, "SPAN_POOL_N", 0)
    assert not _has_sunset(painted.recall(QUESTION, k=200, kinds=["chunk"]))


def test_a_question_naming_no_time_is_unchanged(painted: elastimem.Elastimem) -> None:
    assert not _has_sunset(painted.recall("What did we paint?", k=200, kinds=["chunk"]))


def test_the_callers_time_filters_still_hold(painted: elastimem.Elastimem) -> None:
    before = painted.recall(QUESTION, k=200, kinds=["chunk"], until="2023-07-01T00:00:00Z")
    assert before and not _has_sunset(before)
    assert _has_sunset(painted.recall(QUESTION, k=200, kinds=["chunk"], since="2023-07-06"))


def test_keyword_only_stores_are_unchanged(make_store: Factory) -> None:
    mem = make_store()
    mem.begin_session(at="2023-07-07T10:00:00+00:00")
    mem.record_turn(SUNSET, "Beautiful", at="2023-07-07T10:00:00+00:00")
    mem.end_session()
    assert mem.recall(QUESTION, k=5, kinds=["chunk"]) == []


def test_the_span_is_narrowed_by_its_slack_and_the_callers_filters() -> None:
    scope = temporal.TimeScope(date(2023, 7, 7), date(2023, 7, 7), "What did we paint?")
    assert span_pool.span_filters(Filters(), scope) == Filters(None, "2023-07-05", "2023-07-10")
    narrowed = span_pool.span_filters(Filters(3, "2023-07-06T00:00:00Z", "2023-07-08"), scope)
    assert narrowed == Filters(3, "2023-07-06T00:00:00Z", "2023-07-08")


def test_a_streaming_store_searches_the_span_too(painted: elastimem.Elastimem) -> None:
    """At LITE the vectors are not resident (no ``VectorHits.within``): the leg runs again,
    restricted to the span."""
    painted.reconfigure(tier_override="lite")
    assert painted.stats()["vector_backend"] == "numpy-stream"
    hits = painted.recall(QUESTION, k=200, kinds=["chunk"])
    sunset = next(h for h in hits if SUNSET in h.text)
    breakdown = next(
        b for b in painted.explain(QUESTION, k=200).chunk_breakdowns if b.chunk_id == sunset.id
    )
    assert breakdown.vector == pytest.approx(span_pool.SPAN_POOL_SHARE)
