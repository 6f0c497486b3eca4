"""Time in questions (retrieval/temporal.py) and name discrimination (retrieval/names.py)."""

from __future__ import annotations

from datetime import date, datetime, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import elastimem
from elastimem.retrieval import names, temporal

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)


# -- parsing ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("question", "start", "end", "rest"),
    [
        (
            "What did we cook on 7 July, 2023?",
            date(2023, 7, 7),
            date(2023, 7, 7),
            "What did we cook?",
        ),
        ("Who called on July 7th, 2023?", date(2023, 7, 7), date(2023, 7, 7), "Who called?"),
        ("What happened on 2023-07-07", date(2023, 7, 7), date(2023, 7, 7), "What happened"),
        (
            "Which book did I read in May 2023?",
            date(2023, 5, 1),
            date(2023, 5, 31),
            "Which book did I read?",
        ),
        (
            "Who won in the beginning of November 2022?",
            date(2022, 11, 1),
            date(2022, 11, 30),
            "Who won?",
        ),
        (
            "Which state did we visit in summer 2021?",
            date(2021, 6, 1),
            date(2021, 8, 31),
            "Which state did we visit?",
        ),
        (
            "Where did we ski in winter 2022?",
            date(2021, 12, 1),
            date(2022, 2, 28),
            "Where did we ski?",
        ),
        (
            "What did I do the week before August 3, 2023?",
            date(2023, 7, 27),
            date(2023, 8, 3),
            "What did I do?",
        ),
        (
            "Which puppy came two weeks before Aug 11, 2023?",
            date(2023, 7, 28),
            date(2023, 8, 11),
            "Which puppy came?",
        ),
        ("Where did we go yesterday?", date(2026, 11, 30), date(2026, 11, 30), "Where did we go?"),
        ("What did I plant last summer?", date(2025, 6, 1), date(2025, 8, 31), "What did I plant?"),
        ("What did I buy 3 days ago?", date(2026, 11, 27), date(2026, 11, 29), "What did I buy?"),
    ],
)
def test_a_named_time_becomes_a_span_of_days_and_leaves_the_text(
    question: str, start: date, end: date, rest: str
) -> None:
    scope = temporal.parse(question, NOW)
    assert scope is not None
    assert (scope.start, scope.end, scope.rest) == (start, end, rest)


@pytest.mark.parametrize(
    "question",
    [
        "May I ask what my dog is called?",  # "May" is no month here
        "What did we do in 2023?",  # a year alone is most of a conversation
        "What happened on 31 February, 2023?",  # no such day
        "When did Caroline go to the support group?",  # asks when; names no time
    ],
)
def test_no_span_where_the_question_names_no_usable_time(question: str) -> None:
    assert temporal.parse(question, NOW) is None


def test_relative_time_needs_a_reference() -> None:
    assert temporal.parse("What did I plant last summer?") is None


def test_closeness_falls_off_outside_the_span() -> None:
    scope = temporal.TimeScope(date(2023, 5, 1), date(2023, 5, 31), "")
    assert scope.closeness(date(2023, 5, 15)) == 1.0
    assert 0 < scope.closeness(date(2023, 6, 1)) < 1.0
    assert scope.closeness(date(2023, 6, 30)) == 0.0


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=80))
def test_parse_takes_any_string(text: str) -> None:
    scope = temporal.parse(text, NOW)
    assert scope is None or scope.start <= scope.end


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60))
def test_name_helpers_take_any_string(text: str) -> None:
    words = names.name_words(text)
    assert all(w[:1].isupper() for w in words)
    assert isinstance(names.strip(text, frozenset(w.lower() for w in words)), str)


def test_name_words_skip_sentence_starts_and_i() -> None:
    assert names.name_words("What do Melanie's kids like? Jon said I should ask.") == ["Melanie"]
    assert names.strip("What do Melanie's kids like?", frozenset({"melanie"})) == (
        "What do kids like?"
    )
    assert names.strip("Melanie?", frozenset({"melanie"})) == "Melanie?"


# -- through recall ---------------------------------------------------------------------------


@pytest.fixture
def two_hikes(mem: elastimem.Elastimem) -> elastimem.Elastimem:
    """Two alike exchanges, months apart; the older one is the one asked about."""
    mem.begin_session(at="2024-03-09T10:00:00+00:00")
    mem.record_turn(
        "We went hiking in the hills near the lake", "Sounds lovely", at="2024-03-09T10:00:00+00:00"
    )
    mem.end_session()
    mem.begin_session(at="2024-07-20T10:00:00+00:00")
    mem.record_turn(
        "We went hiking in the hills by the coast", "How nice", at="2024-07-20T10:00:00+00:00"
    )
    mem.end_session()
    return mem


def test_a_month_in_the_question_puts_what_was_said_then_first(
    two_hikes: elastimem.Elastimem,
) -> None:
    hits = two_hikes.recall("Where did we go hiking in March 2024?", k=2, kinds=["chunk"])
    assert [h.date for h in hits] == ["2024-03-09", "2024-07-20"]
    assert "lake" in hits[0].text
    # without the month, the newer one leads (recency), as before
    hits = two_hikes.recall("Where did we go hiking?", k=2, kinds=["chunk"])
    assert hits[0].date == "2024-07-20"


def test_explain_shows_the_date_bonus(two_hikes: elastimem.Elastimem) -> None:
    result = two_hikes.explain("Where did we go hiking on 9 March, 2024?", k=2)
    bonus = {b.chunk_id: b.time_bonus for b in result.chunk_breakdowns}
    march = next(h for h in result.hits if h.date == "2024-03-09")
    july = next(h for h in result.hits if h.date == "2024-07-20")
    assert bonus[march.id] == pytest.approx(temporal.DATE_BONUS)
    assert bonus[july.id] == 0.0


def test_build_context_shows_each_past_moment_with_its_date(
    two_hikes: elastimem.Elastimem,
) -> None:
    two_hikes.begin_session(at="2024-09-01T10:00:00+00:00")
    past = two_hikes.build_context("Where did we go hiking in March 2024?").sections[
        "relevant_past_moments"
    ]
    lines = past.split("\n")
    assert lines[0].startswith("- [2024-03-09] ") and "lake" in lines[0]
    assert lines[1].startswith("- [2024-07-20] ")


def _greetings(mem: elastimem.Elastimem, n: int) -> None:
    mem.begin_session(at="2024-05-01T09:00:00+00:00")
    for i in range(n):
        mem.record_turn(f"Thanks, Alex! Day {i} was fine", "Glad to hear it")
    mem.record_turn("Jordan fired the new kiln today", "Exciting!")
    mem.record_turn("Jordan says the glaze cracked", "Oh no")
    mem.end_session()


def test_a_name_most_exchanges_hold_does_not_match_by_itself(mem: elastimem.Elastimem) -> None:
    """ "Alex" is in 24 of 26 exchanges (the greeting of each): it says nothing about which
    one the question means, so the greetings are not hits for it."""
    _greetings(mem, 24)
    hits = mem.recall("Did Alex mention the kiln?", k=5, kinds=["chunk"])
    assert [h.text.split("\n")[0] for h in hits] == ["User: Jordan fired the new kiln today"]
    # alone, the name still finds what holds it
    assert mem.recall("Alex", k=3, kinds=["chunk"])


def test_a_discriminating_name_still_counts(mem: elastimem.Elastimem) -> None:
    _greetings(mem, 24)
    hits = mem.recall("What did Jordan say about the kiln?", k=5, kinds=["chunk"])
    assert {h.text.split("\n")[0] for h in hits} == {
        "User: Jordan fired the new kiln today",
        "User: Jordan says the glaze cracked",
    }


def test_a_small_store_keeps_every_name(mem: elastimem.Elastimem) -> None:
    _greetings(mem, 5)  # 7 exchanges: below names.MIN_CHUNKS
    hits = mem.recall("Did Alex mention the kiln?", k=10, kinds=["chunk"])
    assert len(hits) == 6
