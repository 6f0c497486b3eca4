"""Ranking on a person's first small store (issue 26), each cause of a wrong first answer.

The store is the issue's own: a dozen everyday turns with filler among them, and a few
explicit facts, embedded by the built-in model (tests marked ``embedder``). The figures over
the whole labelled set are ``benchmarks/small_stores.py``'s; these pin one example per cause:

- a chunk's vector carrying the turn before it (``vector_writes.passage_texts``): small
  talk is embedded alone, and a small pool's cosines give back what a chunk owes the turn
  before it (``scale.unride``);
- min-max over a handful of candidates turning noise into 1.0 (``scale.py``): nonsense
  scored like a true match, so no cut-off could be set;
- BM25 over a few documents: one shared word ("living") outvoting the meaning;
- small talk ("thanks!") ranking at all;
- facts losing to exchanges for the direct questions they answer.

``min_score`` is checked on every surface that has it (API sync and aio, CLI here; REST
and MCP in tests/service).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import elastimem
from elastimem import aio
from elastimem.assembly import CONTEXT_MIN_SCORE
from elastimem.errors import ConfigError
from elastimem.index import vector_writes
from tests.retrieval.builtin_stores import builtin_store

TURNS = [
    ("I adopted a border collie called Juniper last spring", "How lovely, collies are smart."),
    ("My favourite food is ramen", "Ramen is a great choice."),
    ("We're repainting the living room this weekend", "Sounds like a fun project."),
    ("thanks!", "You're welcome!"),
    ("My manager Priya wants the quarterly report by Friday", "Good luck with the report."),
    ("Last spring I flew to Kyoto to see the cherry blossoms", "Kyoto in spring is beautiful."),
    ("ok", "Ok."),
    ("I get a rash whenever I eat shrimp or crab", "That sounds like a shellfish allergy."),
    ("haha", "😄"),
    ("My sister Clara lives in Lisbon now", "Lisbon is a lovely city."),
]
FACTS = {
    "occupation": "nurse",
    "diet": "vegetarian",
    "employer": "Acme Corp",
}
NONSENSE = ["zzzz qqq xxxx", "What is the capital of Mongolia?"]


@pytest.fixture(scope="module")
def small_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[elastimem.Elastimem]:
    with builtin_store(tmp_path_factory.mktemp("small") / "small.db", TURNS, FACTS) as mem:
        stats = mem.stats()
        assert stats["embedded_chunks"] == stats["chunks"]
        yield mem


def first(mem: elastimem.Elastimem, question: str) -> str:
    hits = mem.recall(question, k=5)
    assert hits, question
    return hits[0].text


@pytest.mark.embedder
def test_a_chunk_does_not_ride_on_the_turn_before_it(small_store: elastimem.Elastimem) -> None:
    # On main the ramen exchange came first: its vector was embedded with the collie turn.
    assert "collie" in first(small_store, "Do I own any animals?")
    assert "collie" in first(small_store, "What is my dog's name?")


@pytest.mark.embedder
def test_nonsense_scores_clearly_below_a_real_match(small_store: elastimem.Elastimem) -> None:
    # On main "zzzz qqq xxxx" topped at 0.4195 against 0.4196 for the real question.
    real = small_store.recall("Do I own any animals?", k=1)[0].score
    assert real > 2 * CONTEXT_MIN_SCORE
    for question in NONSENSE:
        hits = small_store.recall(question, k=5)
        assert all(hit.score < CONTEXT_MIN_SCORE for hit in hits), (question, hits[:1])
        assert small_store.recall(question, k=5, min_score=CONTEXT_MIN_SCORE) == []


@pytest.mark.embedder
def test_one_shared_word_does_not_outvote_the_meaning(small_store: elastimem.Elastimem) -> None:
    top = first(small_store, "What do I do for a living?")
    assert "living room" not in top
    assert top == "occupation: nurse"


@pytest.mark.embedder
def test_small_talk_is_never_a_hit(small_store: elastimem.Elastimem) -> None:
    for question in ["What do I do for a living?", "Where do I work?", "Do I eat meat?"]:
        texts = [hit.text for hit in small_store.recall(question, k=10)]
        assert not [t for t in texts if "thanks!" in t or "User: ok" in t or "haha" in t], texts


@pytest.mark.embedder
@pytest.mark.parametrize(
    ("question", "answer"),
    [
        ("What do I do for a living?", "occupation: nurse"),
        ("Do I eat meat?", "diet: vegetarian"),
        ("Which company employs me?", "employer: Acme Corp"),
        ("What do I like to eat?", "ramen"),
        ("Am I allergic to anything?", "shrimp"),
    ],
)
def test_the_issue_questions_answer_first_everywhere(
    small_store: elastimem.Elastimem, question: str, answer: str
) -> None:
    assert answer in first(small_store, question)
    assert answer in small_store.explain(question, k=5).hits[0].text  # the one query path


@pytest.mark.embedder
def test_build_context_leaves_out_off_topic_moments(small_store: elastimem.Elastimem) -> None:
    small_store.begin_session()  # the stored turns are then past moments
    try:
        off = small_store.build_context("What is the capital of Mongolia?").render()
        assert "Kyoto" not in off and "Lisbon" not in off
        on = small_store.build_context("Am I allergic to anything?").render()
        assert "shrimp" in on
    finally:
        small_store.end_session()


def test_small_talk_is_embedded_without_the_turn_before_it() -> None:
    class Rows:
        def previous_texts(self, ids: list[int]) -> dict[int, str]:
            return {i: "User: I adopted a border collie called Juniper" for i in ids}

    class Conn:
        vectors = Rows()

    texts = vector_writes.passage_texts(
        Conn(),  # type: ignore[arg-type]
        [(1, "User: thanks!\nAssistant: You're welcome!"), (2, "User: My favourite food is ramen")],
    )
    assert texts[0] == "User: thanks!\nAssistant: You're welcome!"
    # an exchange that says something keeps its context (the LoCoMo gain, vector_writes.py)
    assert (
        texts[1]
        == "User: My favourite food is ramen\nUser: I adopted a border collie called Juniper"
    )


# -- min_score on every surface ----------------------------------------------------------------


def test_min_score_cuts_hits_and_checks_its_value(mem: elastimem.Elastimem) -> None:
    mem.record_turn("We hiked at Multnomah Falls", "Nice!")
    mem.remember("favorite_color", "teal")
    hits = mem.recall("Multnomah Falls hike", k=5)
    assert hits
    best = hits[0].score
    assert mem.recall("Multnomah Falls hike", k=5, min_score=None) == hits
    assert [h.score for h in mem.recall("Multnomah Falls hike", k=5, min_score=best)] == [best]
    assert mem.recall("Multnomah Falls hike", k=5, min_score=best + 1) == []
    for bad in ["0.2", True, float("nan"), float("inf")]:
        with pytest.raises(ConfigError, match="min_score"):
            mem.recall("x", min_score=bad)  # type: ignore[arg-type]


def test_min_score_on_the_async_api(tmp_path: Path) -> None:
    async def go() -> tuple[list[Any], list[Any]]:
        async with await aio.open(str(tmp_path / "a.db"), disable_builtin_embedder=True) as mem:
            await mem.record_turn("We hiked at Multnomah Falls", "Nice!")
            return (
                await mem.recall("Multnomah hike", k=3),
                await mem.recall("Multnomah hike", k=3, min_score=100.0),
            )

    every, none = asyncio.run(go())
    assert every and none == []


def test_min_score_on_the_cli(tmp_path: Path) -> None:
    from tests.cli.test_cli import run_json

    db = str(tmp_path / "cli.db")
    with elastimem.open(db, disable_builtin_embedder=True) as mem:
        mem.record_turn("We hiked at Multnomah Falls", "Nice!")
    assert run_json("--db", db, "recall", "Multnomah hike")
    assert run_json("--db", db, "recall", "Multnomah hike", "--min-score", "100") == []


TERSE_TURNS = [
    ("postgres 15 on the prod box, 64GB ram", "Noted."),
    ("main service is Go, workers are python 3.12", "Got it."),
    ("oncall rotation: every 3rd week", "Noted."),
    ("laptop: thinkpad x1, arch linux", "Noted."),
]


@pytest.fixture(scope="module")
def terse_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[elastimem.Elastimem]:
    path = tmp_path_factory.mktemp("terse") / "terse.db"
    with builtin_store(path, TERSE_TURNS, {"role": "backend engineer"}) as mem:
        yield mem


@pytest.mark.embedder
def test_a_fact_competes_with_exchanges_on_their_scale(terse_store: elastimem.Elastimem) -> None:
    # The bare model puts "my role is backend engineer" first (cosine 0.36); on the facts'
    # own scale (floor 0.33) it scored 0.06 and lost to the exchange about Python workers.
    assert first(terse_store, "What do I do for a living?") == "role: backend engineer"
    assert terse_store.explain("What do I do for a living?", k=3).hits[0].kind == "fact"


@pytest.mark.embedder
def test_a_fact_under_the_facts_own_floor_answers_in_a_small_store(
    small_store: elastimem.Elastimem,
) -> None:
    # The issue: "where do I work?" -> [] although employer: Acme Corp is stored. The model
    # scores "my employer is Acme Corp" 0.30, under the facts' own floor (0.33); in a small
    # pool facts share the chunks' scale, and its floor.
    texts = [hit.text for hit in small_store.recall("Where do I work?", k=3)]
    assert "employer: Acme Corp" in texts
