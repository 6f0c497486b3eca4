"""build_context: sections, budgets, fitting, exclusions and failure isolation (SPEC §5.8)."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import elastimem
from elastimem import assembly
from elastimem.assembly import fit_lines
from elastimem.memory import semantic
from tests.conftest import ScriptedLLM
from tests.rows import connect, execute, one, open_storage

HEADINGS = [
    "WHAT YOU KNOW ABOUT THE USER",
    "RELATED TOPICS",
    "RELEVANT PAST MOMENTS (from earlier conversations)",
    "PREVIOUS SESSIONS",
    "LESSONS FROM PAST MISTAKES",
]


def est(text: str) -> int:
    return 0 if not text else max(1, len(text) // 4)


def test_plan_shape_and_render(mem: elastimem.Elastimem) -> None:
    mem.begin_session(at="2024-05-01")
    mem.record_turn("We hiked the Dolomites with our tent", "Wonderful", at="2024-05-01")
    mem.end_session()
    mem.remember("name", "Ada")
    mem.remember("tent_brand", "Hilleberg")
    mem.add_lesson("Double-check trail closures")
    mem.begin_session()
    plan = mem.build_context("planning another tent hike")
    assert list(plan.sections) == [
        "user_facts",
        "graph_context",
        "relevant_past_moments",
        "previous_sessions",
        "lessons",
    ]
    assert plan.sections["user_facts"].split("\n") == ["- name: Ada", "- tent_brand: Hilleberg"]
    assert plan.sections["relevant_past_moments"].startswith("- [2024-05-01] User: We hiked")
    assert (
        plan.sections["previous_sessions"] == "- [2024-05-01] We hiked the Dolomites with our tent"
    )
    assert plan.sections["lessons"] == "- Double-check trail closures"
    rendered = plan.render()
    assert rendered.startswith("WHAT YOU KNOW ABOUT THE USER\n- name: Ada")
    order = [rendered.index(h) for h in HEADINGS if h in rendered]
    assert order == sorted(order) and "RELATED TOPICS" not in rendered
    assert "\n\n" in rendered
    assert set(plan.tokens) == set(plan.sections)
    assert plan.keep_last_n_turns == mem.profile.keep_last_n_turns
    assert len(plan.fact_ids) == 2 and plan.profile == mem.profile


def test_injected_facts_are_touched(mem: elastimem.Elastimem) -> None:
    mem.remember("name", "Ada")
    mem.build_context("hello")
    mem.build_context("hello")
    (fact,) = mem.fact_history("name")
    assert fact.access_count == 2 and fact.last_accessed_at is not None


def test_notes_are_ranked_by_relevance_after_profile_facts(mem: elastimem.Elastimem) -> None:
    mem.remember("bike_model", "Brompton")
    mem.remember("coffee_order", "flat white")
    mem.remember("location", "Leeds")
    lines = mem.build_context("which coffee should I order?").sections["user_facts"].split("\n")
    assert lines == ["- location: Leeds", "- coffee_order: flat white", "- bike_model: Brompton"]


def test_notes_without_relevance_follow_importance_then_recency(
    mem: elastimem.Elastimem,
) -> None:
    """The note order is the fact total of §5.6: with no query, the importance nudge and
    recency decide, and equal totals keep the live order (``facts()`` order)."""
    mem.remember("old_note", "kept from long ago", at="2020-01-01")
    mem.remember("new_note", "written today")
    mem.remember("rule_note", "from a rule", source="rule")
    mem.remember("twin_a", "same day", at="2024-05-01")
    mem.remember("twin_b", "same day", at="2024-05-01")
    database = open_storage(mem)  # the memory layer's own reader, beside the store
    try:
        with database.read() as conn:
            rows = semantic.live_fact_rows(conn)  # in live order
    finally:
        database.close()
    weights = elastimem.retrieval.rank.DEFAULT_WEIGHTS
    half_life = mem.config.fact_recency_half_life_days
    now = time.time()

    def total(row: tuple[Any, ...]) -> float:
        born = datetime.fromisoformat(row[5].replace("Z", "+00:00")).timestamp()
        age = max(0.0, (now - born) / 86400)
        return weights.imp * (row[4] - 0.5) + weights.rec * 0.5 ** (age / half_life)

    lines = mem.build_context("").sections["user_facts"].split("\n")
    shown = [line.removeprefix("- ").split(":")[0] for line in lines]
    expected = [row[1] for row in sorted(rows, key=lambda row: -total(row))]  # stable
    assert shown == expected
    assert shown.index("twin_b") == shown.index("twin_a") - 1  # a tie: live order


def _stamp(mem: elastimem.Elastimem) -> str | None:
    value = one(mem, "SELECT value FROM meta WHERE key = 'facts.stamp'")
    return None if value is None else str(value)


def test_the_facts_stamp_changes_with_the_facts_but_not_with_a_touch(
    mem: elastimem.Elastimem,
) -> None:
    mem.remember("name", "Ada")
    first = _stamp(mem)
    assert first is not None
    mem.build_context("hello there")  # touches "name": access counts only
    assert _stamp(mem) == first
    mem.remember("city", "Leeds")
    second = _stamp(mem)
    assert second != first
    mem.forget("city")
    third = _stamp(mem)
    assert third != second
    execute(mem, "UPDATE facts SET archived = 1 WHERE key = 'name'")  # decay archives in place
    assert _stamp(mem) != third


def test_build_context_sees_facts_written_by_another_connection(
    mem: elastimem.Elastimem,
) -> None:
    """The live facts are kept between turns; a write by any connection (another process,
    here a plain driver one) changes the stamp and the next plan shows it."""
    mem.remember("pet", "cat")
    assert "pet: cat" in mem.build_context("tell me more").sections["user_facts"]
    assert "pet: cat" in mem.build_context("tell me more").sections["user_facts"]  # kept
    with connect(mem) as conn:
        conn.execute(
            "INSERT INTO facts (key, value, category, source, importance, created_at, valid_from)"
            " VALUES ('hobby', 'archery', 'note', 'import', 0.6, "
            "'2024-01-01T00:00:00.000000Z', '2024-01-01T00:00:00.000000Z')"
        )
        conn.execute("UPDATE facts SET value = 'dog' WHERE key = 'pet'")  # no API does this
    facts = mem.build_context("tell me more").sections["user_facts"]
    assert "hobby: archery" in facts and "pet: dog" in facts


def test_past_moments_never_include_the_current_session(mem: elastimem.Elastimem) -> None:
    mem.record_turn("an older chat about violins", "ok")
    mem.begin_session()
    for i in range(10):
        mem.record_turn(f"violins violins violins number {i}", "ok")
    past = mem.build_context("violins").sections["relevant_past_moments"]
    assert past.count("\n") == 0 and "older chat" in past
    assert len(mem.recall("violins", k=20)) == 11  # recall includes it


def test_retrieval_needs_enough_words(make_store: Any) -> None:
    mem = make_store(min_retrieval_query_words=3)
    mem.record_turn("kayak trip notes", "ok")
    mem.begin_session()
    assert mem.build_context("kayak").sections["relevant_past_moments"] == ""
    assert mem.build_context("my kayak trip").sections["relevant_past_moments"]


def test_fitting_cuts_or_skips_and_continues() -> None:
    lines = ["- short one", "- " + "very long line " * 40, "- short two"]
    text = fit_lines(lines, 40, est)
    kept = text.split("\n")
    assert kept[0] == "- short one" and len(kept) == 2
    assert kept[1].endswith("…") and " ".join(kept[1][:-1].split()) == kept[1][:-1].strip()
    assert est(text) <= 40 and est(text + " word") > 38
    # Fewer than 24 tokens left: the long line is skipped, the next still fits.
    text = fit_lines(lines, 20, est)
    assert text == "- short one\n- short two"


def test_one_overlong_fact_never_empties_the_section(make_store: Any) -> None:
    mem = make_store(context_tokens=1024)
    mem.remember("name", "Ada")
    mem.remember("life_story", "once upon a time " * 28)
    mem.remember("pet", "cat")
    section = mem.build_context("hello").sections["user_facts"]
    assert section.startswith("- name: Ada")
    assert "- pet: cat" in section
    assert est(section) <= mem.profile.budgets.facts


def test_lessons_and_summaries_are_cut_only_when_they_do_not_fit(make_store: Any) -> None:
    """A fixed 400-character cap cut them mid-word although the whole line fit."""
    summary = " ".join(f"The user discussed topic number {i} in detail." for i in range(14))
    llm = ScriptedLLM({"summarise-session": summary})
    mem = make_store(llm=llm, tier_override="standard")
    lesson = " ".join(f"step{i:03d} check the value" for i in range(30))  # ~700 characters
    mem.add_lesson(lesson)
    mem.begin_session(at="2025-01-01")
    mem.record_turn("first question about gardening", "answer", at="2025-01-01T10:00:00")
    mem.record_turn("second question about gardening", "answer", at="2025-01-01T10:01:00")
    mem.end_session(wait=True, timeout=10)
    plan = mem.build_context("")
    assert plan.sections["lessons"] == f"- {lesson}"
    assert plan.sections["previous_sessions"] == f"- [2025-01-01] {summary}"
    mem.add_lesson("x" * 5000)  # one that cannot fit is still cut by fitting
    assert plan.tokens["lessons"] <= mem.profile.budgets.lessons
    assert mem.build_context("").tokens["lessons"] <= mem.profile.budgets.lessons


def test_a_tight_sessions_budget_gives_up_the_oldest_session(make_store: Any) -> None:
    topics = ["a trip to Lisbon", "a leaking kitchen tap", "a new laptop", "a half marathon",
              "the wedding dress"]  # fmt: skip

    def summary(prompt: str) -> str:
        topic = next(t for t in topics if t.split()[-1] in prompt)
        return (
            f"The user talked about {topic} and compared several options in detail. "
            "They decided on a plan and asked for a short checklist to follow next week, "
            "with a reminder on the morning before."
        )

    mem = make_store(llm=ScriptedLLM({"summarise-session": summary}), tier_override="standard")
    for day, topic in enumerate(topics, start=1):
        at = f"2025-03-0{day}T10:00:00"
        mem.begin_session(at=at)
        mem.record_turn(f"Let's talk about {topic}.", "Sure.", at=at)
        mem.record_turn(f"More about {topic}, please.", "Okay.", at=f"2025-03-0{day}T10:02:00")
        mem.end_session(wait=True, timeout=10)
    section = mem.build_context("hello again").sections["previous_sessions"]
    dates = [line[3:13] for line in section.split("\n")]
    assert dates == sorted(dates) and dates[-1] == "2025-03-05"  # oldest first, newest kept
    assert len(dates) < 5  # the budget is tight: the oldest went


def test_a_moment_said_twice_is_listed_once(make_store: Any) -> None:
    mem = make_store()
    mem.record_turn("What are my pets' names?", "Biscuit and Mochi.")
    mem.record_turn("I took Biscuit to the vet today.", "Hope he is fine.")
    mem.record_turn("What are my pets' names?", "Biscuit and Mochi.")
    mem.begin_session()
    lines = mem.build_context("how is Biscuit after the vet?").sections["relevant_past_moments"]
    assert len(lines.split("\n")) == len(set(lines.split("\n"))) == 2


def test_a_failing_component_leaves_only_its_section_empty(
    mem: elastimem.Elastimem, monkeypatch: pytest.MonkeyPatch
) -> None:
    mem.record_turn("notes about quinoa salad", "ok")
    mem.remember("name", "Ada")
    mem.add_lesson("Ask about allergies")
    mem.begin_session()

    def boom(*a: Any, **k: Any) -> Any:
        raise RuntimeError("retrieval exploded")

    monkeypatch.setattr(assembly, "_past_hits", boom)
    plan = mem.build_context("quinoa salad")
    assert plan.sections["relevant_past_moments"] == ""
    assert plan.sections["user_facts"] == "- name: Ada"
    assert plan.sections["lessons"] == "- Ask about allergies"
    monkeypatch.setattr(assembly, "_read_facts", boom)
    monkeypatch.setattr(assembly, "fit_lines", boom)  # every section fits its lines
    monkeypatch.setattr(assembly, "fit_lines_indexed", boom)
    plan = mem.build_context("quinoa salad")
    assert isinstance(plan, elastimem.ContextPlan)


def test_build_context_never_raises_on_hostile_input(mem: elastimem.Elastimem) -> None:
    mem.record_turn("something", "else")
    for text in ("", None, "\x00", "\ud800", '"AND OR*', "x" * 1_000_000, 42):
        plan = mem.build_context(text)  # type: ignore[arg-type]
        assert isinstance(plan, elastimem.ContextPlan)


def test_previous_sessions_are_the_five_newest_oldest_first(mem: elastimem.Elastimem) -> None:
    for day in range(1, 8):
        mem.begin_session(at=f"2024-02-0{day}")
        mem.record_turn(f"session on day {day}", "ok", at=f"2024-02-0{day}")
    mem.begin_session()
    lines = mem.build_context("").sections["previous_sessions"].split("\n")
    assert [line[3:13] for line in lines] == [f"2024-02-0{d}" for d in range(3, 8)]


LEVELS = st.sampled_from(["lite", "standard", "full"])


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    context_tokens=st.integers(1024, 16384),
    static=st.integers(0, 3000),
    tier=LEVELS,
    fact_sizes=st.lists(st.integers(1, 600), max_size=8),
    chunk_sizes=st.lists(st.integers(1, 3000), max_size=6),
    lesson_sizes=st.lists(st.integers(1, 300), max_size=4),
)
def test_no_section_ever_exceeds_its_budget(
    make_store: Any,
    context_tokens: int,
    static: int,
    tier: str,
    fact_sizes: list[int],
    chunk_sizes: list[int],
    lesson_sizes: list[int],
) -> None:
    mem = make_store(
        ":memory:", context_tokens=context_tokens, static_prompt_tokens=static, tier_override=tier
    )
    for i, size in enumerate(fact_sizes):
        mem.remember(f"note_{i}", ("zebra " * size)[:size])
    for i, size in enumerate(chunk_sizes):
        mem.record_turn(("zebra word " * size)[:size] + f" {i}", "ok")
    for i, size in enumerate(lesson_sizes):
        mem.add_lesson(f"lesson {i} " + "x" * size)
    mem.begin_session()
    plan = mem.build_context("zebra word")
    budgets = mem.profile.budgets
    tokens = {k: est(v) for k, v in plan.sections.items()}
    assert tokens["user_facts"] <= budgets.facts
    assert tokens["graph_context"] <= budgets.graph
    assert tokens["graph_context"] + tokens["relevant_past_moments"] <= budgets.episodic
    assert tokens["previous_sessions"] <= budgets.sessions
    assert tokens["lessons"] <= budgets.lessons
    assert plan.tokens == tokens
    mem.close()


def test_stored_text_is_rendered_as_inert_data(mem: elastimem.Elastimem) -> None:
    hostile = "colour \x1b[2J\x1b[31mred\x07 \u202eevil\u2066 \x9b text"
    mem.record_turn(f"my paint {hostile}", "noted")
    mem.remember("paint", hostile)
    mem.add_lesson(f"lesson {hostile}\nsecond line")
    mem.begin_session()
    rendered = mem.build_context("paint colour").render()
    assert "colour" in rendered and "red" in rendered
    bad = [c for c in rendered if (ord(c) < 32 and c != "\n") or 0x7F <= ord(c) <= 0x9F
           or 0x202A <= ord(c) <= 0x202E or 0x2066 <= ord(c) <= 0x2069]  # fmt: skip
    assert bad == []
    assert mem.facts()["paint"] == hostile.strip()  # stored exactly; only rendering is inert
