"""How a key-value item of a framework store is kept as an elastimem fact.

An item ``(namespace, key) -> value`` (``value`` a JSON object) is one fact of the user's store:

- its fact key is ``lg_<readable slug>_<hash>``: the slug (namespace after the user, then the
  key, in lowercase letters, digits and ``_``) shows where it came from in ``facts()``, the
  CLI and the web views; 12 hex digits of SHA-256 over the exact namespace and key keep two
  items apart whose slugs fold together ("Notes" and "notes"). Fact keys hold 64 characters.
- its fact value is the JSON text ``{"value": ..., "namespace": [...], "key": "..."}``: the
  value first, so keyword search and the embedding of the fact read the item's own words
  first; namespace and key exactly as given, so the item is read back without the key.

So a re-put is a new version of the fact (the earlier value stays in ``fact_history``), a
delete is ``forget`` (history kept), recall, build_context, export and erase see items as
they see any fact, and an item's ``created_at``/``updated_at`` are its fact versions' dates.
A fact value holds at most 500 characters (elastimem's limit for one fact), which bounds an
item's JSON text with its namespace and key.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

KEY_PREFIX = "lg_"
MAX_FACT_VALUE = 500  # elastimem's limit for one fact value (guards.MAX_VALUE_LENGTH)
_SLUG_CHARS = 40
_HASH_CHARS = 12
_NOT_SLUG = re.compile(r"[^a-z0-9]+")


def fact_key(namespace: tuple[str, ...], key: str) -> str:
    """The fact key of an item; already in elastimem's normal form (so ``facts()`` shows it)."""
    exact = json.dumps([list(namespace), key], ensure_ascii=False)
    digest = hashlib.sha256(exact.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_CHARS]
    readable = "_".join([*namespace[1:], key]).casefold()
    slug = _NOT_SLUG.sub("_", readable).strip("_")[:_SLUG_CHARS].strip("_")
    return f"{KEY_PREFIX}{slug}_{digest}" if slug else f"{KEY_PREFIX}{digest}"


def encode(namespace: tuple[str, ...], key: str, value: Mapping[str, Any]) -> str:
    """The fact value of an item: ``TypeError`` for a value JSON cannot hold (as LangGraph's
    PostgreSQL store raises), ``ValueError`` when the text is longer than a fact holds."""
    if not isinstance(value, Mapping):
        raise TypeError(f"an item's value is a dict, not {type(value).__name__}")
    record = {"value": dict(value), "namespace": list(namespace), "key": key}
    text = json.dumps(record, ensure_ascii=False)
    if not _utf8_clean(text):  # a lone surrogate would be replaced when stored: escape it
        text = json.dumps(record)
    if len(text) > MAX_FACT_VALUE:
        raise ValueError(
            f"the item {namespace}/{key!r} is {len(text)} characters as JSON with its namespace "
            f"and key; an elastimem item holds at most {MAX_FACT_VALUE}: store a shorter value "
            "or split it into several items"
        )
    return text


def _utf8_clean(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in text


def decode(text: str) -> tuple[tuple[str, ...], str, dict[str, Any]] | None:
    """``(namespace, key, value)`` of a fact value written by ``encode``; None for any other."""
    try:
        record = json.loads(text)
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    namespace, key, value = record.get("namespace"), record.get("key"), record.get("value")
    if not isinstance(namespace, list) or not all(isinstance(p, str) for p in namespace):
        return None
    if not isinstance(key, str) or not isinstance(value, dict):
        return None
    return tuple(namespace), key, value


def parse_time(stamp: str | None) -> datetime:
    """A fact's stored date (ISO 8601, ``Z`` for UTC) as an aware datetime."""
    return datetime.fromisoformat(stamp or "1970-01-01T00:00:00+00:00")


# -- matching, as LangGraph's own stores match -------------------------------------------------


def has_prefix(namespace: tuple[str, ...], prefix: tuple[str, ...]) -> bool:
    return namespace[: len(prefix)] == prefix


def matches_condition(namespace: tuple[str, ...], match_type: str, path: tuple[str, ...]) -> bool:
    """A ``MatchCondition``: ``path`` at the start (``prefix``) or end (``suffix``), ``*``
    standing for any one label."""
    if len(namespace) < len(path):
        return False
    if match_type == "prefix":
        pairs = zip(namespace, path)
    elif match_type == "suffix":
        pairs = zip(reversed(namespace), reversed(path))
    else:
        raise ValueError(f"unsupported match type {match_type!r}; use 'prefix' or 'suffix'")
    return all(want == "*" or have == want for have, want in pairs)


def matches_filter(value: Mapping[str, Any], wanted: Mapping[str, Any] | None) -> bool:
    """A search ``filter``: each field equal (nested dicts and lists compared as JSON), or
    compared with ``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``."""
    return all(_compare(value.get(name), want) for name, want in (wanted or {}).items())


def _compare(have: Any, want: Any) -> bool:
    if isinstance(want, dict):
        if any(name.startswith("$") for name in want):
            return all(_operator(have, op, operand) for op, operand in want.items())
        return isinstance(have, dict) and all(
            _compare(have.get(name), sub) for name, sub in want.items()
        )
    if isinstance(want, (list, tuple)):
        return (
            isinstance(have, (list, tuple))
            and len(have) == len(want)
            and all(_compare(h, w) for h, w in zip(have, want))
        )
    return bool(have == want)


def _operator(have: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return bool(have == operand)
    if op == "$ne":
        return bool(have != operand)
    if op not in ("$gt", "$gte", "$lt", "$lte"):
        raise ValueError(f"unsupported filter operator {op!r}; use $eq $ne $gt $gte $lt $lte")
    try:
        left, right = float(have), float(operand)
    except (TypeError, ValueError):
        return False  # a missing or non-numeric field is not in any range
    return {"$gt": left > right, "$gte": left >= right, "$lt": left < right, "$lte": left <= right}[
        op
    ]
