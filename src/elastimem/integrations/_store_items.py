"""How a key-value item of a framework store is kept as an elastimem fact.

An item ``(namespace, key) -> value`` (``value`` a JSON object) is one fact of the user's store:

- its fact key is ``<namespace slug>_<hash>``, e.g. ``memories_3f9a1c0b2d4e``: the namespace
  after the user (lowercase letters, digits and ``_``) shows in ``facts()``, the CLI and the
  web views what kind of memory it is; 12 hex digits of SHA-256 over the exact namespace and
  key tell items apart (fact keys hold 64 characters and fold case, so the item's own key
  cannot be the fact key).
- its fact value is the item's words, then on a last line the JSON list
  ``[namespace, key, how]``. A value with one text field (``{"content": "Vegetarian"}``, what
  langmem stores) is kept as that text, ``how`` naming the field: ``Vegetarian`` and
  ``[["alice", "memories"], "diet", "content"]``. Any other value is kept whole as ``how``,
  after its text fields as words for search.

The item's words come first and as plain text because the fact's embedding (``my <key> is
<value>``) and keyword search read them: with the built-in model a question's cosine to a
short memory was 0.41 as plain text, 0.25 wrapped as ``{"content": ...}`` with its namespace
and key; recall drops facts below 0.33. The embedded text (``memory.fact_vectors.fact_text``)
leaves out the key's digest and the JSON trailer, so an item's score does not depend on its
user's id or key.

So a re-put is a new version of the fact (the earlier value stays in ``fact_history``), a
delete is ``forget`` (history kept), recall, build_context, export and erase see items as
they see any fact, and an item's ``created_at``/``updated_at`` are its fact versions' dates.
A fact value holds at most 500 characters (elastimem's limit for one fact), which bounds an
item's text with its namespace and key.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

MAX_FACT_VALUE = 500  # elastimem's limit for one fact value (guards.MAX_VALUE_LENGTH)
_SLUG_CHARS = 40
_HASH_CHARS = 12
_NOT_SLUG = re.compile(r"[^a-z0-9]+")


def fact_key(namespace: tuple[str, ...], key: str) -> str:
    """The fact key of an item; already in elastimem's normal form (so ``facts()`` shows it)."""
    exact = json.dumps([list(namespace), key], ensure_ascii=False)
    digest = hashlib.sha256(exact.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_CHARS]
    readable = "_".join(namespace[1:]).casefold()
    slug = _NOT_SLUG.sub("_", readable).strip("_")[:_SLUG_CHARS].strip("_") or "item"
    return f"{slug}_{digest}"


def encode(namespace: tuple[str, ...], key: str, value: Mapping[str, Any]) -> str:
    """The fact value of an item: ``TypeError`` for a value JSON cannot hold (as LangGraph's
    PostgreSQL store raises), ``ValueError`` when it is longer than a fact holds."""
    if not isinstance(value, Mapping):
        raise TypeError(f"an item's value is a dict, not {type(value).__name__}")
    value = dict(value)
    json.dumps(value)  # TypeError for what JSON cannot hold, before anything is built
    field = _only_text_field(value)
    if field is not None:
        text = f"{value[field]}\n{_json([list(namespace), key, field])}"
    else:
        meta = _json([list(namespace), key, value])
        words = "; ".join(_words(value))[: max(0, MAX_FACT_VALUE - len(meta) - 1)].strip()
        text = f"{words or '-'}\n{meta}"  # never empty: a fact value is stripped when stored
    if len(text) > MAX_FACT_VALUE:
        raise ValueError(
            f"the item {namespace}/{key!r} takes {len(text)} characters with its namespace and "
            f"key; an elastimem item holds at most {MAX_FACT_VALUE}: store a shorter value or "
            "split it into several items"
        )
    return text


def _only_text_field(value: dict[str, Any]) -> str | None:
    """The field of a value that is one text field, kept as plain text: a text that the
    store keeps exactly (no edge whitespace, which is stripped; no NUL or lone surrogate,
    which are replaced)."""
    if len(value) != 1:
        return None
    ((field, text),) = value.items()
    if not isinstance(text, str) or not text or text != text.strip() or not _utf8_clean(text):
        return None
    return str(field)


def _json(data: Any) -> str:
    text = json.dumps(data, ensure_ascii=False)
    # A lone surrogate would be replaced when stored: escape everything instead.
    return text if _utf8_clean(text) else json.dumps(data)


def _words(data: Any) -> list[str]:
    """The text fields of a JSON value, in order, for search."""
    if isinstance(data, str):
        return [data] if data.strip() and _utf8_clean(data) else []
    if isinstance(data, dict):
        return [w for item in data.values() for w in _words(item)]
    if isinstance(data, list):
        return [w for item in data for w in _words(item)]
    return []


def _utf8_clean(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in text


def decode(text: str) -> tuple[tuple[str, ...], str, dict[str, Any]] | None:
    """``(namespace, key, value)`` of a fact value written by ``encode``; None for any other."""
    if "\n" not in text:
        return None
    words, meta_line = text.rsplit("\n", 1)
    try:
        meta = json.loads(meta_line)
    except ValueError:
        return None
    if not isinstance(meta, list) or len(meta) != 3:
        return None
    namespace, key, how = meta
    if not isinstance(namespace, list) or not all(isinstance(label, str) for label in namespace):
        return None
    if not isinstance(key, str):
        return None
    if isinstance(how, str):
        return tuple(namespace), key, {how: words}
    if isinstance(how, dict):
        return tuple(namespace), key, how
    return None


def parse_time(stamp: str | None) -> datetime:
    """A fact's stored date (ISO 8601, ``Z`` for UTC) as an aware datetime."""
    text = stamp or "1970-01-01T00:00:00+00:00"
    # Python 3.10's fromisoformat does not read the ``Z`` suffix.
    return datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)


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
