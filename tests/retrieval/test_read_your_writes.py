"""Read your writes by meaning (issue 27): a query embeds, for itself, the newest chunks and
facts still waiting for their vectors, and stores them so the worker does not embed them
again. The worker is held busy (an extraction waits on the LLM) so the embed job cannot
run first; the host embedder is a double with one dimension per concept, so the question
and the turn share a meaning but no word."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

import elastimem
from tests.conftest import wait_until

CONCEPTS = {"moved": "home", "live": "home", "lisbon": "lisbon", "allergic": "allergy",
            "allergies": "allergy", "peanuts": "peanut", "banjo": "music"}  # fmt: skip


class ConceptEmbedder:
    def __init__(self) -> None:
        self.names = sorted(set(CONCEPTS.values())) + ["other"]
        self.texts: list[str] = []

    def vector(self, text: str) -> list[float]:
        vec = [0.0] * len(self.names)
        for word in text.casefold().replace("?", " ").replace(":", " ").split():
            if word in CONCEPTS:
                vec[self.names.index(CONCEPTS[word])] += 1.0
        vec[-1] = 0.0 if any(vec) else 1.0
        norm = math.sqrt(sum(v * v for v in vec))
        return [v / norm for v in vec]

    def __call__(self, texts: list[str]) -> list[list[float]]:
        self.texts.extend(texts)
        return [self.vector(t) for t in texts]

    def times(self, fragment: str) -> int:
        return sum(fragment in text for text in self.texts)


@contextmanager
def busy_worker(make_store: Callable[..., elastimem.Elastimem]) -> Iterator[Any]:
    """A store whose worker is stuck in an extraction until the block ends."""
    busy, release = threading.Event(), threading.Event()

    def slow_llm(prompt: str, **kwargs: Any) -> str:
        if prompt.startswith("TASK: extract"):
            busy.set()
            release.wait(30)
        return "NONE"

    concept = ConceptEmbedder()
    mem = make_store(embedder=concept, llm=slow_llm, tier_override="full")
    mem.record_turn("I am learning to play the banjo this summer", "fun")
    try:
        assert busy.wait(10)
        yield mem, concept
    finally:
        release.set()


def test_a_turn_is_found_by_meaning_before_the_worker_embeds_it(
    make_store: Callable[..., elastimem.Elastimem],
) -> None:
    """Before: "where do I live?" right after "I moved to Lisbon" answered [] (no shared
    word, the vector still queued), and found it a moment later."""
    with busy_worker(make_store) as (mem, concept):
        mem.record_turn("I moved to Lisbon", "Nice!")
        before = mem.stats()["embedded_chunks"]
        hits = mem.recall("where do I live?", kinds=["chunk"])
        assert hits and "Lisbon" in hits[0].text
        assert mem.explain("where do I live?").vector_leg == "used"
        # Stored at once, not only used: the worker (still busy) will find it done.
        assert mem.stats()["embedded_chunks"] == before + 1
    assert wait_until(lambda: mem.drain(0.2) or mem.stats()["jobs_pending"] == 0, 30)
    # The stored passage (with the turn before it) once, not again by the worker; the others
    # are the small store's own-text vectors of the turn alone and of its user's words
    # (retrieval/own_text.py), once each.
    passages = [t for t in concept.texts if "I moved to Lisbon" in t and "banjo" in t]
    assert len(passages) == 1, "embedded once, not again by the worker"
    assert concept.times("I moved to Lisbon") == 3


def test_a_fact_is_stored_with_its_vector_by_the_first_query(
    make_store: Callable[..., elastimem.Elastimem],
) -> None:
    with busy_worker(make_store) as (mem, concept):
        mem.remember("allergies", "peanuts")
        assert [h.text for h in mem.recall("what am I allergic to?", kinds=["fact"])] == [
            "allergies: peanuts"
        ]
        assert mem.stats()["embedded_facts"] == 1
    mem.close()
    assert concept.times("my allergies is peanuts") == 1


def test_only_the_newest_few_dozen_are_embedded_for_a_query(
    make_store: Callable[..., elastimem.Elastimem],
) -> None:
    """A backlog stays the worker's: the query pays for the last writes only."""
    from elastimem.retrieval.catch_up import CATCH_UP_CHUNKS

    with busy_worker(make_store) as (mem, _concept):
        for i in range(CATCH_UP_CHUNKS + 8):
            mem.record_turn(f"note number {i} about the weather", "ok")
        mem.record_turn("I moved to Lisbon", "Nice!")
        before = mem.stats()["embedded_chunks"]
        hits = mem.recall("where do I live?", kinds=["chunk"])
        assert "Lisbon" in hits[0].text
        assert mem.stats()["embedded_chunks"] == before + CATCH_UP_CHUNKS


def test_build_context_reads_its_writes(
    make_store: Callable[..., elastimem.Elastimem],
) -> None:

    with busy_worker(make_store) as (mem, _concept):
        mem.record_turn("I moved to Lisbon", "Nice!")
        mem.end_session(wait=False)  # past moments come from earlier sessions (the worker is held)
        mem.begin_session()
        plan = mem.build_context("so where do I live these days?")
        assert "Lisbon" in plan.sections["relevant_past_moments"]


def test_aio_reads_its_writes(make_store: Callable[..., elastimem.Elastimem]) -> None:
    import asyncio

    with busy_worker(make_store) as (mem, _concept):
        amem = elastimem.aio.AsyncElastimem(mem)
        mem.remember("allergies", "peanuts")

        async def ask() -> list[elastimem.Hit]:
            try:
                return await amem.recall("what am I allergic to?", kinds=["fact"])
            finally:
                await amem.close()

        hits = asyncio.run(ask())
        assert [h.text for h in hits] == ["allergies: peanuts"]


# -- a query of symbols only ("🍜"): matched as substrings of facts --------------------------


def test_symbol_terms_are_the_symbol_runs_of_a_query() -> None:
    from elastimem.text import is_symbol_term, symbol_terms

    assert symbol_terms("🍜") == ["🍜"]
    assert symbol_terms("👩‍💻 and ❤️, 🍜🍜 $") == ["👩‍💻", "❤️", "🍜🍜", "$"]
    assert symbol_terms("where do I live?") == []
    assert all(is_symbol_term(t) for t in symbol_terms("a🐶b 🐱"))


@given(st.text(max_size=200))
def test_symbol_terms_never_raise_and_hold_no_word(text: str) -> None:
    from elastimem.text import MAX_QUERY_TERMS, is_symbol_term, symbol_terms

    terms = symbol_terms(text)
    assert len(terms) <= MAX_QUERY_TERMS and len(set(terms)) == len(terms)
    assert all(term and is_symbol_term(term) for term in terms)


def test_a_query_of_emoji_finds_the_facts_that_hold_them(
    make_store: Callable[..., elastimem.Elastimem],
) -> None:
    """Before: recall("🍜") answered [] although a fact value held 🍜 (the keyword indexes
    split text at symbols, and the query had no word to search for)."""
    mem = make_store()
    mem.remember("lunch", "ramen 🍜 twice a week")
    mem.remember("pet", "a dog 🐶 called Biscuit")
    mem.remember("color", "teal")
    assert [h.text for h in mem.recall("🍜")] == ["lunch: ramen 🍜 twice a week"]
    assert [h.text for h in mem.recall("🐶", kinds=["fact"])] == ["pet: a dog 🐶 called Biscuit"]
    assert mem.recall("🦄") == []
