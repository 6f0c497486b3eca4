"""Tests for the small-job prompt builders and the reply cleaners."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from elastimem.extraction import Turn, build_extract_prompt
from elastimem.prompts import (
    LABEL_MAX_CHARS,
    build_cluster_label_prompt,
    build_condense_prompt,
    build_fact_merge_prompt,
    build_same_entity_prompt,
    build_session_summary_prompt,
    clean_label,
    clean_llm_text,
    clean_value,
    parse_yes_no,
    split_sentences,
    strip_think,
)


def task_of(prompt: str) -> str:
    first = prompt.splitlines()[0]
    assert first.startswith("TASK: ")
    return first.removeprefix("TASK: ")


def test_every_prompt_starts_with_its_task_line() -> None:
    prompts = {
        "extract": build_extract_prompt([Turn("I live in Oslo", "ok", 1, "2024-01-01")]),
        "condense": build_condense_prompt(["- The user said hi."], [("hello", "hi")]),
        "summarise-session": build_session_summary_prompt(["I like tea", "I live in Oslo"]),
        "merge": build_fact_merge_prompt("city", "Oslo", "2023-01-01", "Bergen", "2024-01-01"),
        "same-entity": build_same_entity_prompt("Bob", "person", "Robert", "entity"),
        "label": build_cluster_label_prompt(["Ana", "Lisbon"]),
    }
    for kind, prompt in prompts.items():
        assert task_of(prompt) == kind


def test_condense_prompt() -> None:
    prompt = build_condense_prompt(
        ["- The user asked about Rome.", "The user booked a hotel."],
        [("u" * 500, "a" * 500), Turn("I fly on Monday", "Safe trip", 3, ""), ("", "only me")],
    )
    assert "2-3" in prompt and "past tense" in prompt
    assert "- The user asked about Rome." in prompt
    assert "- The user booked a hotel." in prompt
    assert "- - " not in prompt
    assert "USER: " + "u" * 200 + "…" in prompt
    assert "u" * 201 not in prompt
    assert "ASSISTANT: " + "a" * 200 + "…" in prompt
    assert "USER: I fly on Monday" in prompt and "ASSISTANT: Safe trip" in prompt
    assert "ASSISTANT: only me" in prompt
    assert "USER: \n" not in prompt


def test_condense_prompt_without_digest() -> None:
    prompt = build_condense_prompt([], [("hello there", "hi")])
    assert "Summary so far" not in prompt
    assert "USER: hello there" in prompt


def test_session_summary_prompt_keeps_last_twelve() -> None:
    turns = [f"message number {i}" for i in range(20)] + ["x" * 400, "   "]
    prompt = build_session_summary_prompt(turns)
    assert "1-2" in prompt and "past tense" in prompt
    assert "message number 8\n" not in prompt
    assert "- message number 9\n" in prompt
    assert "- " + "x" * 160 + "…" in prompt
    assert "x" * 161 not in prompt
    assert sum(line.startswith("- ") for line in prompt.splitlines()) == 12


def test_merge_prompt() -> None:
    prompt = build_fact_merge_prompt(
        "hobby", "chess", "2023-01-01T00:00:00Z", "climbing", "2024-06-01T00:00:00Z"
    )
    for text in ("hobby", "chess", "climbing", "2023-01-01", "2024-06-01", "true now"):
        assert text in prompt
    assert "both still hold" in prompt
    assert "just the value" in prompt


def test_same_entity_and_label_prompts() -> None:
    prompt = build_same_entity_prompt("Bob", "person", "Robert Smith", "")
    assert "Bob (person)" in prompt and "Robert Smith (entity)" in prompt
    assert "yes or no" in prompt
    names = [f"name{i}" for i in range(20)]
    prompt = build_cluster_label_prompt(names)
    assert "name11" in prompt and "name12" not in prompt
    assert "1-4 words" in prompt


def test_prompts_sanitise_text() -> None:
    prompt = build_condense_prompt(["a\x00b"], [("c\ud800d", "e")])
    prompt.encode("utf-8")
    prompt = build_fact_merge_prompt("k\x00", "v\ud800", "", "w", "")
    prompt.encode("utf-8")


# --- cleaners ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("  hello  ", "hello"),
        ('"hello"', "hello"),
        ("'hello'", "hello"),
        ("\u201chello\u201d", "hello"),
        ("\"'nested'\"", "nested"),
        ('"unbalanced', '"unbalanced'),
        ("<think>hmm</think> answer", "answer"),
        ("<THINK>a</THINK>b<think>c</think>d", "bd"),
        ("<think>never closed", ""),
        ("answer <think>trailing thoughts", "answer"),
        ("reasoning from the template</think>\nanswer", "answer"),
        ("", ""),
    ],
)
def test_clean_llm_text(reply: str, expected: str) -> None:
    assert clean_llm_text(reply) == expected


def test_clean_llm_text_non_string() -> None:
    assert clean_llm_text(None) == ""
    assert clean_llm_text(42) == ""


def test_strip_think_is_linear_on_hostile_input() -> None:
    assert strip_think("<think>" * 100_000) == ""
    assert strip_think("<think" * 100_000) == "<think" * 100_000
    assert strip_think("</think>" * 100_000) == ""


def test_split_sentences() -> None:
    text = (
        "The user planned a trip. They asked about hotels! Did they book?  Yes.\n"
        "- Bullet one\n2. Numbered two"
    )
    assert split_sentences(text) == [
        "The user planned a trip.",
        "They asked about hotels!",
        "Did they book?",
        "Yes.",
        "Bullet one",
        "Numbered two",
    ]
    assert split_sentences("") == []
    assert split_sentences("  \n\n ") == []
    assert split_sentences('"He said "hi." Then left."') == ['He said "hi."', "Then left."]
    assert split_sentences("Version 2.5 shipped.") == ["Version 2.5 shipped."]


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("yes", True),
        ("Yes.", True),
        ("  YES, they are the same", True),
        ("**Yes**", True),
        ('"yes"', True),
        ("<think>maybe no</think>yes", True),
        ("no", False),
        ("No.", False),
        ("NO - different people", False),
        ("not sure", None),
        ("nope", None),
        ("yesterday", None),
        ("maybe", None),
        ("", None),
        ("I think yes", None),
    ],
)
def test_parse_yes_no(reply: str, expected: bool | None) -> None:
    assert parse_yes_no(reply) is expected


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("Family", "Family"),
        ('"Work at Acme"', "Work at Acme"),
        ("Topic: Travel plans.", "Travel plans"),
        ("  Music\nBecause they are bands.", "Music"),
        ("<think>hmm</think>Cooking", "Cooking"),
        ("", None),
        ('""', None),
        ("x" * (LABEL_MAX_CHARS + 1), None),
        ("x" * LABEL_MAX_CHARS, "x" * LABEL_MAX_CHARS),
    ],
)
def test_clean_label(reply: str, expected: str | None) -> None:
    assert clean_label(reply) == expected


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("Bergen", "Bergen"),
        ('"Bergen"\nBecause the newer value wins.', "Bergen"),
        ("Value: chess and climbing", "chess and climbing"),
        ("<think>x</think>\n\n  climbing ", "climbing"),
        ("", ""),
    ],
)
def test_clean_value(reply: str, expected: str) -> None:
    assert clean_value(reply) == expected


@given(st.text())
def test_cleaners_never_raise(text: str) -> None:
    clean_llm_text(text)
    clean_value(text)
    split_sentences(text)
    assert parse_yes_no(text) in (True, False, None)
    label = clean_label(text)
    assert label is None or 0 < len(label) <= LABEL_MAX_CHARS
