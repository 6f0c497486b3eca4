"""Query expansion on the keyword leg (retrieval/expansion.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import elastimem
from elastimem.retrieval import expansion

Factory = Callable[..., elastimem.Elastimem]

# Everyday exchanges, none of them about the museum or its dinosaurs: more than the vector
# leg's 50 candidates, so that its min-max floor leaves the unrelated ones near 0.
FILLER = [
    (f"{when}, {chore[0].lower()}{chore[1:]}", reply)
    for when in ("On Monday", "Last week", "This morning")
    for chore, reply in (
        [
            ("I watered the tomatoes on the balcony", "They will like that"),
            ("The bus was late again this morning", "Annoying"),
            ("I fixed the squeaky hinge on the door", "Nice work"),
            ("We ordered pizza for dinner", "Sounds tasty"),
            ("My phone battery drains too fast", "Check the settings"),
            ("I finished the quarterly report", "Well done"),
            ("The neighbours had a loud party", "Earplugs help"),
            ("I tried a new running route", "How far was it?"),
            ("Our heating needs a service", "Call the plumber"),
            ("I cleaned out the garage", "That takes a while"),
            ("The printer jammed twice today", "Classic printer"),
            ("I baked banana bread", "Smells good"),
            ("We repainted the fence", "What colour?"),
            ("I renewed my passport", "Good timing"),
            ("The cat knocked over a vase", "Cats do that"),
            ("I read a thriller on the train", "Any good?"),
            ("We planted two apple trees", "Lovely"),
            ("I booked the dentist for Friday", "Good luck"),
            ("The wifi keeps dropping", "Restart the router"),
            ("I sorted the recycling", "Thanks"),
            ("My sister called about the holidays", "What did she say?"),
            ("I changed the car oil", "Handy"),
            ("We watched a comedy last night", "Was it funny?"),
            ("I ironed all the shirts", "Tedious"),
        ]
    )
]
# The one the question is about, and another mention of its specifics that shares no word
# with the question.
MUSEUM = ("My daughter loved the museum trip with her class", "What did she like best?")
LATER = ("She keeps drawing the triceratops skeleton and the fossil eggs", "So cute")
EXHIBIT = ("The triceratops skeleton and the fossil eggs at the museum", "Amazing")
QUESTION = "What did my daughter love at the museum?"


def _store(make: Factory, turns: list[tuple[str, str]], **kw: object) -> elastimem.Elastimem:
    mem = make(**kw)
    for user, assistant in turns:
        mem.record_turn(user, assistant)
    assert mem.drain(10)
    return mem


def _first_lines(hits: list[elastimem.Hit]) -> list[str]:
    return [h.text.split("\n")[0] for h in hits]


def _museum_embedder(texts: list[str]) -> list[list[float]]:
    """Knows one topic: a chunk (its own two lines, not the context embedded after them) or
    a question about the museum."""
    return [[1.0, 0.1] if "museum" in "\n".join(t.split("\n")[:2]) else [0.1, 1.0] for t in texts]


def test_the_vector_legs_best_lend_their_rare_words(
    make_store: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The question's meaning finds the museum exchanges; their specific words
    ("triceratops", "fossil") find the later mention, which shares none of the question's
    words and none of its meaning."""
    turns = [*FILLER[:40], MUSEUM, EXHIBIT, *FILLER[40:], LATER]
    mem = _store(make_store, turns, embedder=_museum_embedder)
    hits = mem.recall(QUESTION, k=10, kinds=["chunk"])
    assert "User: " + LATER[0] in _first_lines(hits)
    explained = mem.explain(QUESTION, k=10)
    later = next(c for c, h in zip(explained.chunk_breakdowns, explained.hits) if "keeps" in h.text)
    assert later.fts == 0 and later.vector == 0 and later.expansion > 0
    monkeypatch.setattr(expansion, "EXPANSION_WEIGHT", 0.0)
    assert "User: " + LATER[0] not in _first_lines(mem.recall(QUESTION, k=10, kinds=["chunk"]))


def test_keyword_only_the_keyword_legs_best_feed_it(
    make_store: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    mem = _store(make_store, [*FILLER[:40], MUSEUM, EXHIBIT, *FILLER[40:], LATER])
    hits = mem.recall(QUESTION, k=10, kinds=["chunk"])
    assert "User: " + LATER[0] in _first_lines(hits)
    monkeypatch.setattr(expansion, "EXPANSION_WEIGHT", 0.0)
    assert "User: " + LATER[0] not in _first_lines(mem.recall(QUESTION, k=10, kinds=["chunk"]))


def test_explain_counts_the_expansion_in_the_fused_relevance(make_store: Factory) -> None:
    mem = _store(make_store, [*FILLER, MUSEUM, EXHIBIT, LATER])
    explained = mem.explain(QUESTION, k=10)
    assert any(c.expansion > 0 for c in explained.chunk_breakdowns)
    for c in explained.chunk_breakdowns:
        # Keyword only: the keyword leg alone is the legs' part.
        assert c.fused_relevance == pytest.approx(c.fts + c.expansion + c.time_bonus + c.neighbour)


def test_a_small_store_is_not_expanded(make_store: Factory) -> None:
    """Below EXPANSION_MIN_ROWS every word is rare: nothing is added."""
    mem = _store(make_store, [*FILLER[:12], MUSEUM, EXHIBIT, LATER])
    explained = mem.explain(QUESTION, k=10)
    assert all(c.expansion == 0 for c in explained.chunk_breakdowns)
    assert "User: " + LATER[0] not in _first_lines(mem.recall(QUESTION, k=10, kinds=["chunk"]))
