"""Rule capture (SPEC §5.5): each trigger, value shape and cleaning step, and no crash."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from elastimem.rules import (
    CALL_ME_STOPLIST,
    FORBIDDEN_FIRST_WORDS,
    NAME_STARTS,
    capture_rules,
    clean_value,
)
from elastimem.text import normalize_key

# --- the behaviours the spec names ---------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("call me later", []),
        ("call me back tomorrow", []),
        ("my wife name is Anna", []),
        ("my wife's name is Anna", []),
        ("My name is Anna Smith", [("name", "Anna Smith")]),
        ("my name is anna and I like tea", [("name", "anna")]),
        ("I work at Google", [("employer", "Google")]),
        ("I live in Austin, Texas", [("location", "Austin, Texas")]),
        ("I'm from Lyon", [("hometown", "Lyon")]),
        ("I work as a nurse", [("occupation", "nurse")]),
        # "and" is a lowercase filler after a value word, so the cut applies (§5.5 step 2).
        ("I'm allergic to peanuts and shellfish", [("allergies", "peanuts")]),
        ("I am vegan", [("diet", "vegan")]),
        ("my favorite color is teal by the way", [("favorite_color", "teal")]),
        ("My favourite band is Right Said Fred", [("favorite_band", "Right Said Fred")]),
        ("you can call me Sam", [("name", "Sam")]),
    ],
)
def test_spec_examples(text: str, expected: list[tuple[str, str]]) -> None:
    assert capture_rules(text) == expected


# --- name ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "qualifier", ["full", "real", "first", "given", "legal", "actual", "proper"]
)
def test_name_qualifiers(qualifier: str) -> None:
    assert capture_rules(f"My {qualifier} name is Jean-Luc Picard.") == [
        ("name", "Jean-Luc Picard")
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("My name is Anna Maria Smith", "Anna Maria"),  # at most two words
        ("My name is Anna and I code", "Anna"),  # a lowercase word ends the run
        ("my name is Anna.\nSmith is my boss", "Anna"),
        ("MY NAME IS ZOË O'BRIEN", "ZOË O'BRIEN"),
        ("my name is sam smith", "sam"),  # a lowercase match takes one word
    ],
)
def test_name_shape(text: str, expected: str) -> None:
    assert capture_rules(text) == [("name", expected)]


@pytest.mark.parametrize(
    "text",
    ["my surname is Smith", "my nickname is Bo", "my dog's name is Rex", "my name is 42"],
)
def test_other_names_capture_nothing(text: str) -> None:
    assert capture_rules(text) == []


@pytest.mark.parametrize("word", sorted(CALL_ME_STOPLIST))
def test_call_me_stoplist(word: str) -> None:
    assert capture_rules(f"call me {word}") == []
    assert capture_rules(f"Call me {word.capitalize()}!") == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Please call me Sam.", "Sam"),
        ("just call me sam", "sam"),
        ("Call me Ishmael Smith", "Ishmael"),  # one word
        ("call me later. Actually, call me Sam.", "Sam"),  # the first match that fits
    ],
)
def test_call_me(text: str, expected: str) -> None:
    assert capture_rules(text) == [("name", expected)]


def test_call_me_needs_a_word_boundary() -> None:
    assert capture_rules("I cannot recall me Sam") == []


def test_earlier_name_wins() -> None:
    assert capture_rules("My name is Robert. You can call me Bob.") == [("name", "Robert")]
    assert capture_rules("Call me Bob; my name is Robert.") == [("name", "Bob")]


# --- location and hometown ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I live in New York City, New York and love it", "New York City, New York"),
        ("I stay in Rio De Janeiro these days", "Rio De Janeiro"),  # three words
        ("I'm based in Berlin.", "Berlin"),
        ("I’m based in Berlin", "Berlin"),  # curly apostrophe
        ("i moved to Paris, France last year", "Paris, France"),
        ("I relocated to Lisbon, and I'm happy", "Lisbon"),  # nothing capitalised after ","
        ("I live in paris now", "paris"),  # a lowercase match takes one word
        ("I live in Austin\nTexas is big", "Austin"),  # a newline ends the value
        ("I live in Austin,Texas", "Austin,Texas"),
    ],
)
def test_location_shape(text: str, expected: str) -> None:
    assert capture_rules(text) == [("location", expected)]


@pytest.mark.parametrize(
    "text",
    ["I live in a flat", "I live in the UK", "I live in 2024", "I'm based in here", "I live in"],
)
def test_location_junk_captures_nothing(text: str) -> None:
    assert capture_rules(text) == []


def test_first_location_trigger_wins() -> None:
    text = "I moved to Berlin in 2019 and I'm based in Paris"
    assert capture_rules(text) == [("location", "Berlin")]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I am from Lyon, France.", "Lyon, France"),
        ("im from Lyon", None),
        ("I'm from the north", None),
    ],
)
def test_hometown(text: str, expected: str | None) -> None:
    assert capture_rules(text) == ([("hometown", expected)] if expected else [])


# --- occupation, employer, allergies, diet ---------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I work as a software engineer at Google in Zurich", "software engineer"),
        ("I work as an R&D lead.", "R&D lead"),
        ("I'm a nurse by trade", "nurse"),
        ("I am an electrician by profession, mostly", "electrician"),
    ],
)
def test_occupation(text: str, expected: str) -> None:
    assert capture_rules(text) == [("occupation", expected)]


def test_occupation_stops_at_40_chars_on_a_word_boundary() -> None:
    text = "I work as a " + "senior " * 10 + "engineer"
    [(key, value)] = capture_rules(text)
    assert key == "occupation"
    assert len(value) <= 40
    assert value == ("senior " * 5).strip()


def test_occupation_word_longer_than_the_limit_is_no_match() -> None:
    assert capture_rules("I work as a " + "x" * 41) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I work at Google!!!", "Google"),
        ("I work for Johnson & Johnson", "Johnson & Johnson"),
        ("I work at AT&T, in sales", "AT&T"),
        ("i work for myself", "myself"),
    ],
)
def test_employer(text: str, expected: str) -> None:
    assert capture_rules(text) == [("employer", expected)]


@pytest.mark.parametrize("text", ["I work at home", "I work for a startup", "I work at X"])
def test_employer_junk_captures_nothing(text: str) -> None:
    assert capture_rules(text) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I'm allergic to peanuts, shellfish.", "peanuts, shellfish"),
        ("I am allergic to cats", "cats"),
        ("i’m allergic to tree-nuts", "tree-nuts"),
    ],
)
def test_allergies(text: str, expected: str) -> None:
    assert capture_rules(text) == [("allergies", expected)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I'm vegetarian", "vegetarian"),
        ("I AM PESCATARIAN!", "pescatarian"),
        ("i'm Vegan now", "vegan"),
        ("I'm a vegan", "vegan"),  # issue 15: ordinary phrasing
    ],
)
def test_diet(text: str, expected: str) -> None:
    assert capture_rules(text) == [("diet", expected)]


@pytest.mark.parametrize(
    "text", ["I'm not vegan", "I'm veganish", "we are vegan", "my friend is a vegan"]
)
def test_diet_needs_the_exact_phrase(text: str) -> None:
    assert capture_rules(text) == []


# --- favourites ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "my favorite ice cream is mint chocolate chip",
            [("favorite_ice_cream", "mint chocolate chip")],
        ),
        ("My preferred editor is Vim.", [("favorite_editor", "Vim")]),
        ("My favorite song is Is This Love", [("favorite_song", "Is This Love")]),
        ("my favorite number is 3.5. Yours?", [("favorite_number", "3.5")]),
        ("my favourite 80s band is a-ha", [("favorite_80s_band", "a-ha")]),
        ("my favorite color is teal, by the way", [("favorite_color", "teal")]),
        ("my favorite city is Paris; I go often", [("favorite_city", "Paris")]),
        ("my favorite word is btw", [("favorite_word", "btw")]),  # a first-word filler stays
    ],
)
def test_favorite(text: str, expected: list[tuple[str, str]]) -> None:
    assert capture_rules(text) == expected


def test_every_favorite_is_captured_in_text_order() -> None:
    text = "My favorite color is teal. My favourite food is sushi. My favorite color is red."
    assert capture_rules(text) == [("favorite_color", "teal"), ("favorite_food", "sushi")]


def test_favorite_subject_is_at_most_three_words() -> None:
    assert capture_rules("my favorite ice cream flavor type is mint") == []
    assert capture_rules("my favorite is mint") == []


# --- cleaning --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("  teal!?;:,. ", "teal"),
        ("teal by the way", "teal"),
        ("teal, by the way", "teal"),
        ("Right Said Fred", "Right Said Fred"),  # a capitalised filler is not cut
        ("Right Said Fred and friends", "Right Said Fred"),  # the first *lowercase* filler cuts
        ("sushi In Tokyo", "sushi In Tokyo"),
        ("now", "now"),  # a filler must follow a value word
        ("Google in Zurich", "Google"),
        ("standing", "standing"),  # "and" inside a word is not a filler
    ],
)
def test_clean_value(raw: str, expected: str) -> None:
    assert clean_value(raw) == expected


@pytest.mark.parametrize("word", sorted(FORBIDDEN_FIRST_WORDS))
def test_forbidden_first_words_drop_the_capture(word: str) -> None:
    assert clean_value(f"{word} thing") is None


def test_capitalised_proper_nouns_keep_a_forbidden_looking_first_word() -> None:
    assert capture_rules("My favourite band is The Beatles") == [("favorite_band", "The Beatles")]
    assert capture_rules("I work at Home Depot") == [("employer", "Home Depot")]
    assert capture_rules("I work at home") == []
    assert capture_rules("My name is The Rock") == [("name", "The Rock")]


@pytest.mark.parametrize("word", sorted(FORBIDDEN_FIRST_WORDS - NAME_STARTS))
def test_forbidden_words_that_start_no_name_drop_the_capture_in_any_case(word: str) -> None:
    """§5.5 matches case-insensitively: "Not blue" is no value, whatever its case."""
    assert clean_value(f"{word.capitalize()} thing") is None
    assert clean_value(f"{word.upper()} thing") is None


def test_capitalised_adverbs_are_not_values() -> None:
    assert capture_rules("My favorite color is Not blue") == []
    assert capture_rules("I'm from Very far away") == []


def test_now_before_a_value_says_when_not_what() -> None:
    assert capture_rules("My favorite color is now forest green.") == [
        ("favorite_color", "forest green")
    ]
    assert capture_rules("My name is now Ada Lovelace") == [("name", "Ada Lovelace")]
    assert capture_rules("my favorite color is still teal") == []  # "still": forbidden


def test_a_favorite_subject_may_hold_hyphenated_words() -> None:
    assert capture_rules("My favorite sci-fi movie is Dune") == [("favorite_sci_fi_movie", "Dune")]
    assert capture_rules("my favourite ice-cream is mint") == [("favorite_ice_cream", "mint")]


@pytest.mark.parametrize("raw", ["", "   ", "...", "!?"])
def test_empty_values_are_dropped(raw: str) -> None:
    assert clean_value(raw) is None


def test_several_rules_in_one_message_come_back_in_text_order() -> None:
    text = (
        "Hi! I work as a nurse, I'm from Lyon and I live in Austin, Texas. "
        "My name is Anna. I'm vegan and I'm allergic to cats."
    )
    assert capture_rules(text) == [
        ("occupation", "nurse"),
        ("hometown", "Lyon"),
        ("location", "Austin, Texas"),
        ("name", "Anna"),
        ("diet", "vegan"),
        ("allergies", "cats"),
    ]


# --- properties ------------------------------------------------------------------------------

_FRAGMENTS = [
    "my name is ", "My favorite ", " color is ", "call me ", "you can ", "I live in ",
    "I'm based in ", "I moved to ", "I'm from ", "I am from ", "I work as a ", "I work at ",
    "I work for ", "I'm allergic to ", "I am vegan", " by trade", "Anna ", "Smith", ", ",
    "Texas", " and ", " by ", "the ", "later", ".", "!", "\n", "teal", "é", "İ", "\x00",
]  # fmt: skip
messages = st.lists(st.sampled_from(_FRAGMENTS) | st.text(max_size=8), max_size=30).map("".join)


@given(st.text() | messages)
def test_any_text_gives_normalised_keys_and_short_values(text: str) -> None:
    captures = capture_rules(text)
    keys = [key for key, _ in captures]
    assert len(keys) == len(set(keys))
    for key, value in captures:
        assert key and normalize_key(key) == key
        assert value and value == value.strip()
        assert len(value) <= len(text)
        assert value in text or value in text.lower()


@given(st.text())
def test_clean_value_never_grows(raw: str) -> None:
    cleaned = clean_value(raw)
    assert cleaned is None or (cleaned and cleaned in raw)
