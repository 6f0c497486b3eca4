"""Facts: versions and the invalidation chain, guards and quarantine, rules, timeline, lessons."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

import elastimem
from elastimem import clock
from tests.rows import one, rows


def test_every_change_is_a_new_version(mem: elastimem.Elastimem) -> None:
    assert mem.remember("Location", "Porto") == (True, "stored")
    assert mem.remember("location", "Porto") == (False, "already stored")
    assert mem.remember("LOCATION ", "Lisbon") == (True, "stored")
    history = mem.fact_history("location")
    assert [f.value for f in history] == ["Porto", "Lisbon"]
    old, new = history
    assert old.invalidated_at == new.valid_from and old.invalidated_by == new.id
    assert new.invalidated_at is None and new.category == "profile" and new.source == "explicit"
    assert new.importance == 1.0
    assert mem.facts() == {"location": "Lisbon"}
    assert mem.stats()["fact_versions"] == 2


def test_values_never_change_in_place(mem: elastimem.Elastimem) -> None:
    mem.remember("pet", "cat")
    mem.remember("pet", "dog")
    mem.remember("pet", "cat")
    stored = rows(mem, "SELECT id, value FROM facts ORDER BY id")
    assert [r[1] for r in stored] == ["cat", "dog", "cat"]


def test_numbers_are_stored_as_text_and_sources_set_importance(mem: elastimem.Elastimem) -> None:
    mem.remember("age", 41)
    mem.remember("height_m", 1.82, source="import")
    mem.remember("hobby", "chess", source="auto")
    mem.remember("team", "Benfica", source="rule")
    facts = {
        f.key: f for f in (mem.fact_history(k)[0] for k in ("age", "height_m", "hobby", "team"))
    }
    assert facts["age"].value == "41" and facts["height_m"].value == "1.82"
    assert [facts[k].importance for k in ("age", "height_m", "team", "hobby")] == [
        1.0,
        0.8,
        0.7,
        0.5,
    ]


def test_facts_order_profile_first_then_importance(mem: elastimem.Elastimem) -> None:
    mem.remember("hobby", "chess", source="auto")
    mem.remember("team", "Benfica", source="rule")
    mem.remember("name", "Ada", source="auto")
    mem.remember("drink", "tea")
    assert list(mem.facts()) == ["name", "drink", "team", "hobby"]


def test_older_backdated_value_does_not_replace_a_newer_one(mem: elastimem.Elastimem) -> None:
    mem.remember("employer", "Acme", at="2025-01-01")
    assert mem.remember("employer", "Initech", at="2024-01-01") == (
        False,
        "older than current value",
    )
    assert mem.facts() == {"employer": "Acme"}


def test_a_year_before_1000_keeps_timestamps_fixed_width(mem: elastimem.Elastimem) -> None:
    """strftime writes year 999 as "999": string order then stopped being time order, and
    a value dated in 999 replaced one dated 2020."""
    assert clock.format_ts(datetime(999, 6, 1)) == "0999-06-01T00:00:00.000000Z"
    assert clock.to_ts("0007-01-02") == "0007-01-02T00:00:00.000000Z"
    mem.remember("city", "Paris", at="2020-01-01")
    assert mem.remember("city", "Rome", at="0999-06-01") == (False, "older than current value")
    assert mem.facts() == {"city": "Paris"}
    mem.record_turn("I adore quokkas", "nice", at="2024-05-05")
    assert mem.recall("quokkas", since="0500-01-01")
    assert not mem.recall("quokkas", until="0500-01-01")


def test_an_undated_write_replaces_a_value_dated_in_the_future(mem: elastimem.Elastimem) -> None:
    """Only a write dated with ``at`` can be older than the live value (§5.3 step 4)."""
    mem.remember("trip", "Tokyo", at="2099-01-01")
    assert mem.remember("trip", "Lima") == (True, "stored")
    assert mem.facts() == {"trip": "Lima"}
    assert mem.remember("trip", "Oslo", at="2024-01-01") == (False, "older than current value")
    assert [f.value for f in mem.fact_history("trip")] == ["Lima", "Tokyo"]  # by valid_from


def test_short_auto_value_keeps_the_existing_one(mem: elastimem.Elastimem) -> None:
    mem.remember("shoe_size", "42", source="auto")
    assert mem.remember("shoe_size", "9", source="auto") == (False, "kept existing value")
    assert mem.facts()["shoe_size"] == "42"
    assert mem.quarantine_entries()[-1]["reason"] == "kept existing value"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("allergies", "none"),
        ("favorite_model", "I run on a laptop as an AI assistant"),
        ("user_message", "hello"),
        ("xkcdqzt", "v"),
    ],
)
def test_explicit_placeholder_and_self_referential_values_are_stored(
    mem: elastimem.Elastimem, key: str, value: str
) -> None:
    changed, _ = mem.remember(key, value)
    assert changed


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("allergies", "none", "placeholder"),
        ("bio", "I am an AI assistant", "self-referential"),
        ("user_message", "hello", "transcript"),
        ("xkcdqzt", "v", "gibberish"),
        ("what_user_said", "hi", "transcript"),
        ("", "x", "key has no letters or digits"),
        ("k", "  ", "empty value"),
        ("k", "x" * 501, "too long"),
    ],
)
def test_auto_writes_that_fail_a_guard_are_quarantined(
    mem: elastimem.Elastimem, key: str, value: str, reason: str
) -> None:
    changed, message = mem.remember(key, value, source="auto")
    assert not changed and message.startswith("rejected: ") and reason in message
    entry = mem.quarantine_entries()[-1]
    assert entry["source"] == "auto" and reason in entry["reason"]
    assert mem.facts() == {}


@pytest.mark.parametrize(
    "key", ["response_time", "user_interface_pref", "html", "sync", "mysql", "rhythm", "myth"]
)
def test_auto_key_checks_accept_real_words(mem: elastimem.Elastimem, key: str) -> None:
    assert mem.remember(key, "value", source="auto")[0]


def test_reserved_keys_are_always_rejected(make_store: Any) -> None:
    mem = make_store(reserved_keys={"Agent Name"})
    for key in ("agent_name", "my_agent_name", "the agent name"):
        assert mem.remember(key, "Bob")[1] == "rejected: reserved key"
    assert mem.facts() == {}


def test_quarantine_is_capped_and_oldest_first(make_store: Any) -> None:
    mem = make_store(quarantine_cap=3)
    for i in range(6):
        mem.remember(f"user_said_{i}", "hi", source="auto")
    entries = mem.quarantine_entries(10)
    assert [e["key"] for e in entries] == ["user_said_3", "user_said_4", "user_said_5"]
    assert mem.quarantine_entries(1)[0]["key"] == "user_said_5"


def test_bad_arguments_write_nothing(mem: elastimem.Elastimem) -> None:
    for bad in ((None, "v"), ("k", None), ("k", b"v"), ("k", False)):
        with pytest.raises(elastimem.ConfigError):
            mem.remember(*bad)  # type: ignore[arg-type]
    assert mem.stats()["fact_versions"] == 0


def test_unicode_and_nul_values_are_stored_safely(mem: elastimem.Elastimem) -> None:
    assert mem.remember("città", "Zürich \x00 🚲")[0]
    assert mem.facts() == {"città": "Zürich \ufffd 🚲"}


def test_forget_invalidates_without_a_successor(mem: elastimem.Elastimem) -> None:
    mem.remember("employer", "Acme")
    assert mem.forget("Employer") is True
    assert mem.forget("employer") is False
    assert mem.facts() == {}
    (only,) = mem.fact_history("employer")
    assert only.invalidated_at is not None and only.invalidated_by is None
    assert mem.remember("employer", "Acme")[0]  # can be asserted again


def test_rule_capture_in_record_turn(mem: elastimem.Elastimem) -> None:
    mem.record_turn("Hi, my name is Ada Lovelace and I live in Austin, Texas.", "Hello!")
    mem.record_turn("Please call me later about it", "Sure")
    mem.record_turn("My wife name is Anna. I work at Initech.", "Nice")
    facts = mem.facts()
    assert facts["name"] == "Ada Lovelace"
    assert facts["location"] == "Austin, Texas"
    assert facts["employer"] == "Initech"
    history = mem.fact_history("name")
    assert len(history) == 1 and history[0].source == "rule"
    importance = [r[0] for r in rows(mem, "SELECT importance FROM chunks ORDER BY id")]
    assert importance[0] >= 0.8 and importance[1] == 0.5 and importance[2] >= 0.8


def test_rule_captures_are_dated_at_the_turn(mem: elastimem.Elastimem) -> None:
    mem.begin_session(at="2023-06-01")
    mem.record_turn("I live in Oslo", "ok", at="2023-06-01T12:00:00Z")
    assert mem.fact_history("location")[0].valid_from == "2023-06-01T12:00:00.000000Z"


def test_timeline_exact_search_and_none(mem: elastimem.Elastimem) -> None:
    mem.remember("employer", "Acme", at="2020-01-01")
    mem.remember("employer", "Initech", at="2023-01-01")
    exact = mem.timeline("Employer")
    assert exact.resolved_by == "exact" and exact.key == "employer"
    assert [f.value for f in exact.versions] == ["Acme", "Initech"]
    search = mem.timeline("where did I work at Acme?")
    assert search.resolved_by == "search" and search.key == "employer"
    assert mem.timeline("nothing matches zzz").resolved_by == "none"
    for weird in ("", '"', "AND OR NOT", "\x00", "*" * 1000, "'); DROP TABLE facts;--"):
        assert mem.timeline(weird).resolved_by in ("none", "search", "exact")
    assert mem.facts() == {"employer": "Initech"}


def test_timeline_answers_the_readme_question(mem: elastimem.Elastimem) -> None:
    """ "where did I live before?" names neither the key (location) nor a value: the
    question's words hint at the keys rule capture and extraction write."""
    mem.record_turn("I live in Portland.", "Nice city.")
    mem.record_turn("I moved to Denver!", "Congratulations!")
    found = mem.timeline("where did I live before?")
    assert (found.key, found.resolved_by) == ("location", "search")
    assert [f.value for f in found.versions] == ["Portland", "Denver"]
    mem.remember("employer", "Acme")
    assert mem.timeline("where did I work before?").key == "employer"
    assert mem.timeline("where did I sleep?").resolved_by == "none"


def test_lessons_dedupe_cap_and_order(make_store: Any) -> None:
    mem = make_store(max_lessons=3, lessons_in_prompt=2)
    assert mem.add_lesson("  ") is False
    for text in ("Check the date", "Ask before deleting", "Cite sources", "Be brief"):
        assert mem.add_lesson(text, tag="style")
    assert mem.stats()["lessons"] == 3  # "Check the date" archived by the cap
    assert mem.add_lesson("Check the date")  # revived, now most recently used
    assert mem.stats()["lessons"] == 3
    assert mem.lessons(10) == ["Cite sources", "Be brief", "Check the date"]
    assert mem.lessons() == ["Be brief", "Check the date"]  # top 2 by use_count then recency
    assert one(mem, "SELECT use_count FROM lessons WHERE text = 'Check the date'") == 2


CONCURRENT_WRITER = textwrap.dedent(
    """
    import sys, elastimem
    mem = elastimem.Elastimem(sys.argv[1], disable_builtin_embedder=True)
    for i in range(40):
        mem.remember("counter", f"{sys.argv[2]}-{i}")
    mem.close()
    """
)


def test_one_live_version_even_with_two_writing_processes(store_path: Path) -> None:
    elastimem.Elastimem(str(store_path), disable_builtin_embedder=True).close()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CONCURRENT_WRITER, str(store_path), name],
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("a", "b")
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    with elastimem.Elastimem(str(store_path), disable_builtin_embedder=True) as mem:
        history = mem.fact_history("counter")
        assert len(history) == 80
        assert sum(1 for f in history if f.invalidated_at is None) == 1
        chain = {f.id: f.invalidated_by for f in history}
        assert sum(1 for v in chain.values() if v is None) == 1
