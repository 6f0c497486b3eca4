"""``elastimem.arguments``: the facade's argument checks, any input in, a value or a
``ConfigError`` naming the argument out."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from elastimem import ConfigError, arguments

ANYTHING = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True),
    st.text(),
    st.lists(st.text(max_size=8), max_size=4),
    st.frozensets(st.sampled_from(["chunk", "fact", "x"])),
)


def value_or_config_error(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except ConfigError as exc:
        return exc


@given(ANYTHING)
def test_int_arg_clamps_integers_and_refuses_the_rest(value: Any) -> None:
    got = value_or_config_error(arguments.int_arg, value, "n")
    if isinstance(value, int) and not isinstance(value, bool):
        assert got == max(arguments.INT64_MIN, min(arguments.INT64_MAX, value))
    else:
        assert isinstance(got, ConfigError) and "n=" in str(got)


@given(ANYTHING)
def test_timeout_arg_takes_non_negative_numbers_only(value: Any) -> None:
    got = value_or_config_error(arguments.timeout_arg, value)
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if number and not math.isnan(value) and value >= 0:
        assert got == float(value)
    else:
        assert isinstance(got, ConfigError) and "timeout=" in str(got)


@given(ANYTHING)
def test_parse_kinds_is_a_subset_of_the_valid_kinds_or_an_error(value: Any) -> None:
    got = value_or_config_error(arguments.parse_kinds, value)
    assert isinstance(got, ConfigError) or got <= arguments.VALID_KINDS


@given(st.text())
def test_query_text_is_cut_and_clean(value: str) -> None:
    text = arguments.query_text(value * 3)
    assert len(text) <= arguments.MAX_QUERY_CHARS and "\x00" not in text


def test_query_text_cuts_a_huge_query_first() -> None:
    assert len(arguments.query_text("w" * 10_000_000)) == arguments.MAX_QUERY_CHARS


@pytest.mark.parametrize(
    ("fn", "args", "name"),
    [
        (arguments.parse_at, ("yesterday-ish", "since"), "since="),
        (arguments.check_open, (42, True), "path="),
        (arguments.check_open, ("x.db", "yes"), "create="),
        (arguments.check_callables, (), None),
        (arguments.config_arg, ({"tier": "full"},), "config="),
        (arguments.key_arg, (7,), "key="),
        (arguments.optional_text, (3, "tag"), "tag="),
        (arguments.fact_value, (True,), "value="),
        (arguments.fact_value, (10**5000,), "too long"),
        (arguments.source_arg, ("robot",), "source="),
        (arguments.pick_alias, ("llm", print, "complete_fn", len), "both llm="),
    ],
)
def test_each_check_names_what_was_wrong(fn: Any, args: tuple[Any, ...], name: str | None) -> None:
    if name is None:
        with pytest.raises(ConfigError, match="embedder="):
            arguments.check_callables(llm=None, embedder="not callable")
        return
    with pytest.raises(ConfigError, match=name):
        fn(*args)


def test_the_checks_pass_good_values_through() -> None:
    assert arguments.parse_at(None, "at") is None
    assert arguments.parse_at("2025-01-02T03:04:05Z", "at") == "2025-01-02T03:04:05.000000Z"
    assert arguments.fact_value(3.5) == "3.5" and arguments.source_arg("auto") == "auto"
    assert arguments.optional_text(None, "tag") is None and arguments.key_arg("k") == "k"
    assert arguments.pick_alias("llm", None, "complete_fn", len) is len
    assert arguments.config_arg(None).tier_override is None
