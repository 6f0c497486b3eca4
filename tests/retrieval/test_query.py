"""The one query path (retrieval.query.rank_query): recall, explain and build_context's past
moments rank through it, so they agree on one ranking."""

from __future__ import annotations

from typing import Any

import pytest

import elastimem
from elastimem.assembly import CONTEXT_MIN_SCORE
from elastimem.retrieval import query as query_path
from tests.conftest import HashEmbedder

TURNS = [
    ("My greyhound Biscuit loves the beach", "Sounds fun."),
    ("Biscuit the greyhound had a vet visit", "Hope he is fine."),
    ("We adopted Biscuit from a greyhound shelter", "Lovely."),
    ("The dentist appointment is on Thursday", "Noted."),
    ("I ran the Berlin marathon with my greyhound's trainer", "Impressive."),
]


@pytest.fixture
def store(make_store: Any) -> elastimem.Elastimem:
    mem = make_store(embedder=HashEmbedder())
    mem.begin_session(at="2024-01-10")
    for i, (user, assistant) in enumerate(TURNS):
        mem.record_turn(user, assistant, at=f"2024-01-{10 + i}")
    mem.remember("pet", "greyhound named Biscuit")
    assert mem.drain(10)
    mem.begin_session()  # build_context leaves out the current session: keep it empty
    return mem


def test_recall_explain_and_build_context_agree_on_one_ranking(
    store: elastimem.Elastimem,
) -> None:
    question = "how is my greyhound Biscuit doing"
    k = store.profile.episodic_top_k
    hits = store.recall(question, k, kinds=["chunk"])
    assert len(hits) >= 3
    explained = store.explain(question, k)
    # explain ranks facts too (one takes a place among its hits): its chunks come in the
    # same order, and its chunk breakdowns are recall's chunks.
    chunk_hits = [h.id for h in explained.hits if h.kind == "chunk"]
    assert chunk_hits == [h.id for h in hits][: len(chunk_hits)] and len(chunk_hits) >= 3
    assert [c.chunk_id for c in explained.chunk_breakdowns] == [h.id for h in hits]
    scores = {c.chunk_id: c.total for c in explained.chunk_breakdowns}
    assert [scores[h.id] for h in hits] == pytest.approx([h.score for h in hits])
    assert explained.vector_leg == "used"
    section = store.build_context(question).sections["relevant_past_moments"]
    # Each line is "- [date] text" for one hit, in the ranking's order.
    shown = [line.split("] ", 1)[1] for line in section.split("\n")]
    # ... those scoring at least CONTEXT_MIN_SCORE (issue 26)
    kept = [h for h in hits if h.score >= CONTEXT_MIN_SCORE]
    assert kept and shown == [" ".join(h.text.split()) for h in kept]


def test_every_query_goes_through_rank_query(
    store: elastimem.Elastimem, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[frozenset[str], int]] = []
    real = query_path.rank

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append((kwargs["kinds"], kwargs["k"]))
        return real(*args, **kwargs)

    monkeypatch.setattr(query_path, "rank", counting)
    store.recall("greyhound Biscuit", 3)
    store.explain("greyhound Biscuit", 4)
    store.build_context("how is my greyhound Biscuit doing")
    chunk_only = frozenset({"chunk"})
    both = frozenset({"chunk", "fact"})
    top_k = store.profile.episodic_top_k
    assert calls == [(both, 3), (both, 4), (chunk_only, top_k)]


def test_a_query_without_search_terms_ranks_nothing(store: elastimem.Elastimem) -> None:
    assert store.recall("?!", 5) == []
    result = store.explain("?!", 5)
    assert result.hits == [] and result.chunk_breakdowns == []
    assert store.build_context("?!").sections["relevant_past_moments"] == ""
