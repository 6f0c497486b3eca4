"""Checks and conversions of the host's arguments to the facade (SPEC §1.2).

Each helper turns one argument into the value the layers below take, or raises
``ConfigError`` naming the argument and what to pass instead. ``failure`` is how the
never-raise methods log what they caught.
May import: the base modules only (errors, clock, text, config).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import Any

from .clock import to_ts
from .config import ElastimemConfig
from .errors import ConfigError, StoreError
from .text import sanitize

VALID_KINDS = frozenset({"chunk", "fact"})
# Queries are cut to this many characters before anything else: retrieval keeps at most 16
# terms anyway, while folding, seed detection and key normalisation are linear in the length
# (a 10 MB query took 5-22 s in each of recall, explain, timeline and build_context).
MAX_QUERY_CHARS = 16_384

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
REMEMBER_SOURCES = ("explicit", "auto", "rule", "import")


def failure(exc: BaseException) -> str:
    """A caught failure as logged by the never-raise methods.

    A store error is ours: its message names the file and the fix. Anything else may come
    from a host callable (LLM, embedder, tokenizer, a ``__str__``) whose message can quote the
    user's text, so only its type is logged.
    """
    if isinstance(exc, StoreError):
        return f"{type(exc).__name__}: {exc}"
    return type(exc).__name__


def query_text(value: object) -> str:
    """A query (or build_context input) as searchable text, cut to ``MAX_QUERY_CHARS``."""
    if isinstance(value, str) and len(value) > MAX_QUERY_CHARS:
        value = value[:MAX_QUERY_CHARS]
    return sanitize(value)[:MAX_QUERY_CHARS]


def pick_alias(name: str, value: Any, alias: str, alias_value: Any) -> Any:
    """``value``, else the one given under its alias; both given (and different) is an error."""
    if value is not None and alias_value is not None and value is not alias_value:
        raise ConfigError(f"both {name}= and its alias {alias}= were given; pass only {name}=")
    return value if value is not None else alias_value


def parse_at(value: object, name: str) -> str | None:
    """A moment (datetime or ISO-8601 string) as a stored timestamp; None stays None."""
    if value is None:
        return None
    try:
        return to_ts(value)
    except (ValueError, TypeError, OverflowError):
        raise ConfigError(
            f"{name}={value!r} is not a readable time; pass a datetime or an ISO-8601 string"
        ) from None


def int_arg(value: object, name: str) -> int:
    """An integer argument, clamped to the 64-bit range a store holds: a count past it means
    "all", an id past it names nothing (bound unclamped, it raised OverflowError)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name}={value!r} is invalid; pass an integer")
    return max(INT64_MIN, min(INT64_MAX, value))


def timeout_arg(value: object, name: str = "timeout") -> float:
    """A wait in seconds: a real number >= 0 (infinity waits for good)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ConfigError(f"{name}={value!r} is invalid; pass a number of seconds >= 0")
    return float(value)


def min_score_arg(value: object) -> float:
    """``recall``'s ``min_score``: a finite real number, or None for no cut (-inf)."""
    if value is None:
        return float("-inf")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not -1e9 < value < 1e9:
        raise ConfigError(f"min_score={value!r} is invalid; pass a number (or None: no cut)")
    return float(value)


def parse_kinds(kinds: Iterable[str] | None) -> frozenset[str]:
    """The kinds of hits a recall may return: a subset of ``VALID_KINDS`` (None: all)."""
    if kinds is None:
        return VALID_KINDS
    if isinstance(kinds, str):
        kinds = [kinds]
    try:
        wanted = frozenset(kinds)
    except TypeError:
        raise ConfigError(
            f"kinds={kinds!r} is invalid; use a subset of {{'chunk', 'fact'}}"
        ) from None
    if not wanted <= VALID_KINDS:
        raise ConfigError(
            f"kinds={sorted(map(str, wanted))!r} is invalid; use a subset of {{'chunk', 'fact'}}"
        )
    return wanted


def check_open(path: object, create: object, user_id: object = None) -> str | None:
    """The store's address, ``create`` flag and ``user_id`` as ``Elastimem(path, create=...,
    user_id=...)`` takes them; returns the checked user id (None when not given).

    ``storage.open_database`` says whether the address needs the id (a PostgreSQL one does).
    """
    if not isinstance(path, (str, os.PathLike)):
        raise ConfigError(
            f"path={path!r} is invalid; pass a file path, ':memory:' or a postgresql:// address"
        )
    if not isinstance(create, bool):
        raise ConfigError(f"create={create!r} is invalid; pass True or False")
    return None if user_id is None else check_user_id(user_id)


def check_callables(**functions: object) -> None:
    """Each of the host's functions is callable or None."""
    for name, fn in functions.items():
        if fn is not None and not callable(fn):
            raise ConfigError(f"{name}={fn!r} is not callable; pass a function or None")


def config_arg(config: object) -> ElastimemConfig:
    """The configuration passed at open: an ``ElastimemConfig``, or the defaults for None."""
    if config is None:
        return ElastimemConfig()
    if not isinstance(config, ElastimemConfig):
        raise ConfigError(f"config={config!r} is invalid; pass an ElastimemConfig or None")
    return config


def key_arg(key: object) -> str:
    """A fact key as given (normalised by the caller where it looks a key up)."""
    if not isinstance(key, str):
        raise ConfigError(f"key={key!r} is invalid; fact keys are strings")
    return key


def optional_text(value: object, name: str) -> str | None:
    """A label the host may leave out (``host_tag``, ``tag``): a string or None."""
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"{name}={value!r} is invalid; pass a string or None")
    return value


def fact_value(value: object) -> str:
    """A fact value (str, int or float) as the text stored."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ConfigError(f"value={value!r} is invalid; pass a str, int or float")
    try:
        return sanitize(value)
    except ValueError:  # str() refuses ints longer than sys.get_int_max_str_digits()
        raise ConfigError(
            "value is an integer too long to store; a fact value holds at most 500 characters"
        ) from None


def source_arg(source: object) -> str:
    """Where a remembered fact came from: one of ``REMEMBER_SOURCES``."""
    if source not in REMEMBER_SOURCES:
        raise ConfigError(f"source={source!r} is invalid; use one of {', '.join(REMEMBER_SOURCES)}")
    return str(source)


USER_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_WINDOWS_DEVICES = frozenset(
    {"con", "prn", "aux", "nul"}
    | {f"com{i}" for i in range(1, 10)}
    | {f"lpt{i}" for i in range(1, 10)}
)


def check_user_id(user_id: object) -> str:
    """The id itself when it is safe as a file name under the root; else ``ConfigError``."""
    if not isinstance(user_id, str) or not USER_ID_PATTERN.fullmatch(user_id):
        raise ConfigError(
            f"user_id={user_id!r} is invalid; use 1-128 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    # Windows maps a device name to the device whatever its extension ("nul.tar.gz").
    if user_id in (".", "..") or user_id.split(".")[0].casefold() in _WINDOWS_DEVICES:
        raise ConfigError(f"user_id={user_id!r} is a reserved name; choose another id")
    return user_id
