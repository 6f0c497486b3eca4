"""The LLM extraction prompt and its tolerant parser (SPEC §5.12).

One completion yields facts about the person (called ``USER`` in the prompt), entities and
relationships as one JSON object. Small local models rarely answer in clean JSON, so
:func:`parse_extraction` accepts prose around the object, code fences, trailing commas,
single-quoted Python-style dicts, a bare flat fact map and an object cut off by ``max_tokens``,
and it never raises: whatever the reply, it returns an :class:`Extraction`, possibly empty.

Storage (facts through §5.3, the graph through §5.7) is the caller's business; this module
only builds prompts and validates shapes.
"""

from __future__ import annotations

import ast
import json
import logging
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .guards import is_unsafe_llm_text
from .prompts import strip_think
from .text import collapse_whitespace, sanitize

logger = logging.getLogger("elastimem")

# §5.12 input limits.
USER_TEXT_LIMIT = 1500
ASSISTANT_TEXT_LIMIT = 400
PROMPT_TURN_CHARS = 3000
# §5.12 output limits.
MAX_FACTS = 12
MAX_ENTITIES = 16
MAX_RELATIONSHIPS = 16
FACT_VALUE_LIMIT = 200
ENTITY_NAME_LIMIT = 80

ELLIPSIS = "…"
ENTITY_TYPES = ("person", "place", "org", "thing")
REJECT_BAD_TYPE = "bad type"
REJECT_TOO_LONG = "too long"
# The quarantine table keeps keys ≤ 200 and values ≤ 500 characters (§4.2).
REJECTED_KEY_LIMIT = 200
REJECTED_VALUE_LIMIT = 500
# An unknown entity type is passed on for the graph layer to map to "entity"; this only bounds it.
ENTITY_TYPE_LIMIT = 80

# Parser safety limits. A reply is at most 2·worker_max_tokens tokens (a few KB), so anything
# past 64K characters is noise from a host LLM that ignored max_tokens.
MAX_REPLY_CHARS = 65_536
# A well-formed extraction nests 3 deep ({facts:{…}} or {entities:[{…}]}); 32 leaves room for
# odd wrappers while keeping json/ast far from the interpreter's recursion limit.
MAX_NESTING = 32
# Stop after this many candidate objects: a reply with more is not an extraction.
MAX_CANDIDATE_BLOCKS = 32
# ast.literal_eval compiles its input, so only short blocks get the Python-literal fallback.
LITERAL_EVAL_LIMIT = 20_000

_TOP_KEYS = ("facts", "entities", "relationships")
_FENCE = re.compile(r"```[A-Za-z0-9_+-]*")
_TRAILING_COMMA = re.compile(r",\s*([}\]])")
_DOUBLE_QUOTE_TOKENS = re.compile(r'[{}\[\]",\\]')
_ANY_QUOTE_TOKENS = re.compile(r"[{}\[\]\"',\\]")
_OPENERS = {"{": "}", "[": "]"}


@dataclass(frozen=True)
class Turn:
    """One exchange to extract from: texts as recorded, the turn number and its ISO time."""

    user: str
    assistant: str = ""
    turn: int = 0
    at: str = ""


@dataclass(frozen=True)
class Extraction:
    """A validated extraction.

    ``facts`` are ``(key, value)`` pairs with values as strings; ``rejected`` holds
    ``(key, value preview, reason)`` for the quarantine, reason ``bad type`` or ``too long``.
    Entities are ``{"name", "type"[, "confidence"]}``; relationships are
    ``{"source", "relation", "target"[, "confidence"]}``.
    """

    facts: tuple[tuple[str, str], ...] = ()
    rejected: tuple[tuple[str, str, str], ...] = ()
    entities: tuple[dict[str, Any], ...] = ()
    relationships: tuple[dict[str, Any], ...] = ()

    @property
    def is_empty(self) -> bool:
        """True when there is nothing to store and nothing to quarantine."""
        return not (self.facts or self.rejected or self.entities or self.relationships)


EMPTY_EXTRACTION = Extraction()


# ---------------------------------------------------------------------------------------------
# Prompt


def _clip(text: object, limit: int) -> str:
    """Sanitise, collapse whitespace and cut to ``limit`` characters plus "…"."""
    flat = collapse_whitespace(sanitize(text))
    return flat if len(flat) <= limit else flat[:limit] + ELLIPSIS


def _turn_texts(turn: Turn) -> tuple[str, str]:
    return _clip(turn.user, USER_TEXT_LIMIT), _clip(turn.assistant, ASSISTANT_TEXT_LIMIT)


def _turn_chars(turn: Turn) -> int:
    user, assistant = _turn_texts(turn)
    return len(user) + len(assistant)


def pack_turns(turns: Iterable[Turn], min_query_words: int) -> list[list[Turn]]:
    """Group turns, in order, into prompts of at most 3000 characters of (cut) turn text.

    Turns whose user text has fewer than ``min_query_words`` whitespace-separated words are
    skipped. A turn that does not fit the current group starts a new one; a single turn always
    forms a group of its own even if it were over the limit.
    """
    groups: list[list[Turn]] = []
    current: list[Turn] = []
    used = 0
    for turn in turns:
        if len(sanitize(turn.user).split()) < min_query_words:
            continue
        size = _turn_chars(turn)
        if current and used + size > PROMPT_TURN_CHARS:
            groups.append(current)
            current, used = [], 0
        current.append(turn)
        used += size
    if current:
        groups.append(current)
    return groups


_EXTRACT_INSTRUCTIONS = (
    "TASK: extract",
    "Find durable information about the person called USER in the conversation below: who "
    "they are, their people, places, work, preferences, plans and lasting circumstances. "
    "Ignore small talk, questions and what ASSISTANT suggests.",
    "Reply with ONE JSON object with three keys:",
    '- "facts": a flat map of snake_case key -> short value, about USER only. Relations '
    'become keys, e.g. "sister_name".',
    '- "entities": a list of {"name", "type"} for people, places, organisations and things '
    "USER mentions; type is person, place, org or thing. Never list USER.",
    '- "relationships": a list of {"source", "relation", "target"}; write USER for the person.',
    "If there is nothing durable, reply NONE.",
    "",
    "Example",
    "USER: My sister Zorya moved to Quillby and I started at Brightfold Labs.",
)
# The example uses names unlikely to occur in real chats, so a small model that copies it
# verbatim produces facts that are obviously wrong rather than plausible ones.
_EXTRACT_EXAMPLE = {
    "facts": {"sister_name": "Zorya", "employer": "Brightfold Labs"},
    "entities": [
        {"name": "Zorya", "type": "person"},
        {"name": "Quillby", "type": "place"},
        {"name": "Brightfold Labs", "type": "org"},
    ],
    "relationships": [
        {"source": "USER", "relation": "sister", "target": "Zorya"},
        {"source": "Zorya", "relation": "lives_in", "target": "Quillby"},
        {"source": "USER", "relation": "works_at", "target": "Brightfold Labs"},
    ],
}


def build_extract_prompt(turns: Iterable[Turn]) -> str:
    """The ``extract`` prompt for one packed group of turns (§5.12)."""
    lines = [*_EXTRACT_INSTRUCTIONS, json.dumps(_EXTRACT_EXAMPLE), "", "Conversation"]
    for turn in turns:
        user, assistant = _turn_texts(turn)
        if user:
            lines.append(f"USER: {user}")
        if assistant:
            lines.append(f"ASSISTANT: {assistant}")
    lines += ["", "JSON:"]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Finding candidate objects


def _scan_blocks(text: str, token_re: re.Pattern[str], quotes: str) -> Iterator[str]:
    """Yield balanced top-level ``{…}`` blocks, in order, respecting strings and escapes.

    Brackets inside strings do not count; a backslash inside a string escapes the next
    character. Blocks nested deeper than ``MAX_NESTING`` are skipped. If the text ends inside
    a block (a reply cut off by ``max_tokens``), the block is repaired once: cut back to the last
    complete value and closed with the brackets still open at that point.
    """
    start = -1
    stack: list[str] = []
    in_string = ""
    escaped_at = -1
    too_deep = False
    last_cut: tuple[int, str] | None = None
    for match in token_re.finditer(text):
        pos = match.start()
        char = match.group()
        if start < 0:
            if char == "{":
                start, stack, too_deep, last_cut = pos, ["{"], False, None
            continue
        if in_string:
            if pos == escaped_at:
                continue
            if char == "\\":
                escaped_at = pos + 1
            elif char == in_string:
                in_string = ""
            continue
        if char in quotes:
            in_string = char
        elif char in _OPENERS:
            stack.append(char)
            if len(stack) > MAX_NESTING:
                too_deep = True
        elif char in "}]":
            stack.pop()
            if not stack:
                if not too_deep:
                    yield text[start : pos + 1]
                start = -1
                continue
            if not too_deep:
                last_cut = (pos + 1, _closers(stack))
        elif char == "," and not too_deep:
            last_cut = (pos, _closers(stack))
    if start >= 0 and not too_deep and last_cut is not None:
        cut, closers = last_cut
        yield text[start:cut] + closers


def _closers(stack: list[str]) -> str:
    return "".join(_OPENERS[opener] for opener in reversed(stack))


def _decode(block: str, python_literals: bool) -> object:
    """``json.loads``, then without trailing commas, then (optionally) ``ast.literal_eval``."""
    try:
        return json.loads(block)
    except (ValueError, RecursionError):
        pass
    try:
        return json.loads(_TRAILING_COMMA.sub(r"\1", block))
    except (ValueError, RecursionError):
        pass
    if python_literals and len(block) <= LITERAL_EVAL_LIMIT:
        try:
            return ast.literal_eval(block)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            pass
    return None


def _candidate_dicts(text: str) -> Iterator[dict[Any, Any]]:
    """Every decodable dict: a JSON pass first, then a pass that also honours single quotes."""
    passes = ((_DOUBLE_QUOTE_TOKENS, '"', False), (_ANY_QUOTE_TOKENS, "\"'", True))
    seen = 0
    for token_re, quotes, python_literals in passes:
        found = False
        for block in _scan_blocks(text, token_re, quotes):
            seen += 1
            if seen > MAX_CANDIDATE_BLOCKS:
                return
            value = _decode(block, python_literals)
            if isinstance(value, dict):
                found = True
                yield value
        if found:
            return


def _has_top_key(value: Mapping[Any, Any]) -> bool:
    return any(key in value for key in _TOP_KEYS)


def _unwrap(value: dict[Any, Any]) -> dict[Any, Any]:
    """``{"result": {"facts": …}}`` → the inner dict; a lone wrapper key is a common slip."""
    if len(value) == 1:
        (inner,) = value.values()
        if isinstance(inner, dict) and _has_top_key(inner):
            return inner
    return value


def _select(text: str) -> dict[Any, Any] | None:
    """The first dict with a top key, else the first dict (§5.12 step 5)."""
    first: dict[Any, Any] | None = None
    for value in _candidate_dicts(text):
        value = _unwrap(value)
        if _has_top_key(value):
            return value
        if first is None:
            first = value
    return first


# ---------------------------------------------------------------------------------------------
# Type checks


def _preview(value: object) -> str:
    """The value as the quarantine stores it: strings as-is, anything else as its repr."""
    try:
        text = value if isinstance(value, str) else repr(value)
    except Exception:  # a pathological repr must not break parsing
        text = f"<{type(value).__name__}>"
    return sanitize(text[:REJECTED_VALUE_LIMIT])


def _fact_value(value: object) -> str | None:
    """The value as a string if its type is acceptable, else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        return sanitize(value).strip()
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return str(value) if math.isfinite(value) else None
    return None


def _check_facts(
    raw: object,
) -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str, str], ...]]:
    if not isinstance(raw, dict):
        return (), ()
    facts: list[tuple[str, str]] = []
    rejected: list[tuple[str, str, str]] = []

    def reject(key: object, value: object, reason: str) -> None:
        if len(rejected) < MAX_FACTS:
            key_text = key if isinstance(key, str) else _preview(key)
            rejected.append((sanitize(key_text)[:REJECTED_KEY_LIMIT], _preview(value), reason))

    for key, value in raw.items():
        if len(facts) >= MAX_FACTS:
            break
        if not isinstance(key, str):
            reject(key, value, REJECT_BAD_TYPE)
            continue
        text = _fact_value(value)
        if text is None:
            reject(key, value, REJECT_BAD_TYPE)
        elif len(text) > FACT_VALUE_LIMIT:
            reject(key, text, REJECT_TOO_LONG)
        else:
            facts.append((sanitize(key).strip(), text))
    return tuple(facts), tuple(rejected)


def _confidence(item: Mapping[Any, Any]) -> float | None:
    value = item.get("confidence")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int too large for a float: out of range like any other
        return None
    return number if 0.0 <= number <= 1.0 else None


def _name(value: object, limit: int | None = None) -> str | None:
    """A stripped, sanitised, non-blank string (optionally ≤ ``limit``), else None.

    None too for text that addresses the model or is markup debris (guards checks 8 and
    9): names and relation types go into later prompts verbatim, through graph context.
    """
    if not isinstance(value, str):
        return None
    text = sanitize(value).strip()
    if not text or (limit is not None and len(text) > limit) or is_unsafe_llm_text(text):
        return None
    return text


def _check_entities(raw: object) -> tuple[dict[str, Any], ...]:
    if not isinstance(raw, list):
        return ()
    entities: list[dict[str, Any]] = []
    for item in raw:
        if len(entities) >= MAX_ENTITIES:
            break
        if not isinstance(item, dict):
            continue
        name = _name(item.get("name"), ENTITY_NAME_LIMIT)
        if name is None:
            continue
        kind = _name(item.get("type"))
        entity: dict[str, Any] = {
            "name": name,
            "type": kind.lower()[:ENTITY_TYPE_LIMIT] if kind else "entity",
        }
        confidence = _confidence(item)
        if confidence is not None:
            entity["confidence"] = confidence
        entities.append(entity)
    return tuple(entities)


def _check_relationships(raw: object) -> tuple[dict[str, Any], ...]:
    if not isinstance(raw, list):
        return ()
    relationships: list[dict[str, Any]] = []
    for item in raw:
        if len(relationships) >= MAX_RELATIONSHIPS:
            break
        if not isinstance(item, dict):
            continue
        parts = {field: _name(item.get(field)) for field in ("source", "relation", "target")}
        if any(part is None for part in parts.values()):
            continue
        relationship: dict[str, Any] = dict(parts)
        confidence = _confidence(item)
        if confidence is not None:
            relationship["confidence"] = confidence
        relationships.append(relationship)
    return tuple(relationships)


# ---------------------------------------------------------------------------------------------
# Entry point


def _is_none_reply(text: str) -> bool:
    return not text or text[:4].upper() == "NONE"


def parse_extraction(reply: object) -> Extraction:
    """Parse an extraction reply (§5.12). Never raises; an unusable reply gives an empty result."""
    try:
        return _parse(reply)
    except Exception:  # the contract is "never raises"; log the shape, not the reply
        logger.warning("could not parse an extraction reply; ignoring it", exc_info=True)
        return EMPTY_EXTRACTION


def _parse(reply: object) -> Extraction:
    if not isinstance(reply, str):
        return EMPTY_EXTRACTION
    # NUL would stop ast.literal_eval; surrogates and NUL never reach the store anyway.
    text = strip_think(sanitize(reply)).strip()
    if _is_none_reply(text):
        return EMPTY_EXTRACTION
    text = _FENCE.sub("", text[:MAX_REPLY_CHARS]).strip()
    if _is_none_reply(text):
        return EMPTY_EXTRACTION
    chosen = _select(text)
    if chosen is None:
        return EMPTY_EXTRACTION
    if _has_top_key(chosen):
        facts, rejected = _check_facts(chosen.get("facts"))
        entities = _check_entities(chosen.get("entities"))
        relationships = _check_relationships(chosen.get("relationships"))
    else:
        facts, rejected = _check_facts(chosen)
        entities, relationships = (), ()
    return Extraction(facts, rejected, entities, relationships)
