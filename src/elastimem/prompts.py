"""Prompt builders and reply cleaners for the small LLM jobs (SPEC §5.7, §5.9, §5.14).

Every prompt starts with a ``TASK: <kind>`` line (kinds ``condense``, ``summarise-session``,
``merge``, ``same-entity``, ``label``; ``extract`` lives in :mod:`elastimem.extraction`), so test
fakes can route on that first line. The prompts are short and end with a cue line because they
are written for small local models, which follow a terse instruction plus a clear answer slot
better than a long system-style brief.

The cleaners turn a raw completion into the value a job stores: they never raise.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from .text import collapse_whitespace, one_line, sanitize

# §5.9: each side of an evicted turn is cut to this many characters for the condense prompt.
CONDENSE_TURN_CHARS = 200
# A digest item is already one short clause or sentence; this only bounds a runaway item.
CONDENSE_DIGEST_ITEM_CHARS = 240
# §5.9: the session summary sees the last 12 user turns, each cut to 160 characters.
SESSION_SUMMARY_TURNS = 12
SESSION_SUMMARY_TURN_CHARS = 160
# §5.14: fact values are ≤ 200 characters; the cut only bounds hand-built calls.
MERGE_VALUE_CHARS = 200
# §5.7: entity names are canonicalised to ≤ 80 characters.
ENTITY_NAME_CHARS = 80
ENTITY_TYPE_CHARS = 40
# §5.7: a cluster label prompt lists at most 12 member names; a label is ≤ 60 characters.
LABEL_MAX_NAMES = 12
LABEL_MAX_CHARS = 60

_THINK_OPEN = re.compile(r"<think\b[^<>]{0,64}>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think\s*>", re.IGNORECASE)
# Pairs of quotes a model wraps a bare answer in.
_QUOTE_PAIRS = {'"': '"', "'": "'", "`": "`", "\u201c": "\u201d", "\u2018": "\u2019", "«": "»"}
# A list marker at the start of a line: "-", "*", "•", "1.", "2)".
_BULLET = re.compile(r"^\s*(?:[-*\u2022]+|\d{1,3}[.)])\s+")
# Split after ., ! or ? (optionally followed by a closing quote/bracket) and whitespace.
_SENTENCE_END = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"'\u201d\u2019)\]]))\s+")
_YES_NO = re.compile(r"^(yes|no)\b", re.IGNORECASE)
# "Value: X", "Answer - X", "Label: X": a leading label a model adds despite being told not to.
_ANSWER_LABEL = re.compile(
    r"^(?:the\s+)?(?:answer|value|current\s+value|new\s+value|label|topic)\s*[:\-\u2013]\s*",
    re.IGNORECASE,
)


def strip_think(text: str) -> str:
    """Remove ``<think>…</think>`` reasoning blocks from a completion.

    Also handles the two broken shapes local servers produce: an unclosed ``<think>``
    (generation stopped while thinking, so nothing from it on is an answer) and a lone
    ``</think>`` whose opening tag was part of the chat template (everything before it is
    reasoning). Linear in the length of the text, whatever the tags.
    """
    kept: list[str] = []
    pos = 0
    while True:
        opened = _THINK_OPEN.search(text, pos)
        if opened is None:
            kept.append(text[pos:])
            break
        kept.append(text[pos : opened.start()])
        closed = _THINK_CLOSE.search(text, opened.end())
        if closed is None:
            break
        pos = closed.end()
    result = "".join(kept)
    cut = max((match.end() for match in _THINK_CLOSE.finditer(result)), default=0)
    return result[cut:]


def _strip_quotes(text: str) -> str:
    text = text.strip()
    while len(text) >= 2 and _QUOTE_PAIRS.get(text[0]) == text[-1]:
        text = text[1:-1].strip()
    return text


def clean_llm_text(reply: object) -> str:
    """Strip whitespace, ``<think>`` blocks and surrounding quotes from a reply."""
    if not isinstance(reply, str):
        return ""
    return _strip_quotes(strip_think(sanitize(reply)))


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


def clean_value(reply: object) -> str:
    """The answer to a "reply with just the value" prompt: first line, no label, no quotes."""
    line = _first_line(clean_llm_text(reply))
    return _strip_quotes(_ANSWER_LABEL.sub("", line, count=1))


def split_sentences(text: object) -> list[str]:
    """Split a summary reply into sentences: one per bullet line, then at ``.``/``!``/``?``."""
    sentences: list[str] = []
    for line in clean_llm_text(text).splitlines():
        line = collapse_whitespace(_BULLET.sub("", line, count=1))
        for piece in _SENTENCE_END.split(line):
            piece = piece.strip()
            if piece:
                sentences.append(piece)
    return sentences


def parse_yes_no(reply: object) -> bool | None:
    """True for a reply starting with the word "yes", False for "no", else None.

    Case-insensitive, after removing reasoning blocks, quotes and leading markup such as
    ``**``. A whole word is required, so "not sure" and "yesterday" give None.
    """
    text = clean_llm_text(reply).lstrip("*_#>`'\"([ \t\r\n")
    match = _YES_NO.match(text)
    if match is None:
        return None
    return match.group(1).lower() == "yes"


def clean_label(reply: object) -> str | None:
    """A cluster label from a reply: first line, quotes and trailing period removed, ≤ 60 chars."""
    label = collapse_whitespace(clean_value(reply)).rstrip(".").strip()
    label = _strip_quotes(label)
    if not label or len(label) > LABEL_MAX_CHARS:
        return None
    return label


def _turn_sides(turn: object) -> tuple[str, str]:
    """(user, assistant) from a pair or from an object with ``user``/``assistant`` attributes."""
    if hasattr(turn, "user"):
        return sanitize(getattr(turn, "user", "")), sanitize(getattr(turn, "assistant", ""))
    if isinstance(turn, Sequence) and not isinstance(turn, str):
        user = turn[0] if len(turn) > 0 else ""
        assistant = turn[1] if len(turn) > 1 else ""
        return sanitize(user), sanitize(assistant)
    return sanitize(turn), ""


def _digest_item(item: object) -> str:
    return one_line(_BULLET.sub("", sanitize(item), count=1), CONDENSE_DIGEST_ITEM_CHARS)


def build_condense_prompt(digest_items: Iterable[str], evicted_turns: Iterable[object]) -> str:
    """The ``condense`` prompt (§5.9): 2–3 past-tense sentences for the rolling digest.

    ``evicted_turns`` holds ``(user, assistant)`` pairs (or objects with those attributes);
    each side is cut to 200 characters.
    """
    lines = [
        "TASK: condense",
        "Summarise the earlier part of a conversation between USER and ASSISTANT in 2-3 short "
        'sentences in the past tense, like "The user asked about X and decided Y." Keep names, '
        "numbers and decisions. "
        "Reply with only the sentences.",
    ]
    items = [text for text in (_digest_item(item) for item in digest_items) if text]
    if items:
        lines += ["", "Summary so far:"] + [f"- {text}" for text in items]
    turn_lines: list[str] = []
    for turn in evicted_turns:
        user, assistant = _turn_sides(turn)
        user = one_line(user, CONDENSE_TURN_CHARS)
        assistant = one_line(assistant, CONDENSE_TURN_CHARS)
        if user:
            turn_lines.append(f"USER: {user}")
        if assistant:
            turn_lines.append(f"ASSISTANT: {assistant}")
    if turn_lines:
        lines += ["", "Later turns:"] + turn_lines
    lines += ["", "Sentences:"]
    return "\n".join(lines)


def build_session_summary_prompt(user_turns: Sequence[str]) -> str:
    """The ``summarise-session`` prompt (§5.9): the last 12 user turns, each ≤ 160 characters."""
    recent = [one_line(sanitize(text), SESSION_SUMMARY_TURN_CHARS) for text in user_turns]
    recent = [text for text in recent if text][-SESSION_SUMMARY_TURNS:]
    lines = [
        "TASK: summarise-session",
        "Below are the messages USER wrote in one chat session. Summarise the session in 1-2 "
        'short sentences in the past tense, like "The user planned X and asked about Y." Reply '
        "with only the sentences.",
        "",
        "Messages:",
    ]
    lines += [f"- {text}" for text in recent]
    lines += ["", "Summary:"]
    return "\n".join(lines)


def build_fact_merge_prompt(
    key: str, old_value: str, old_at: str, new_value: str, new_at: str
) -> str:
    """The ``merge`` prompt (§5.14): which value of a fact about USER is true now."""
    return "\n".join(
        [
            "TASK: merge",
            f"A fact about USER changed. Key: {one_line(sanitize(key), MERGE_VALUE_CHARS)}",
            f"Older value ({one_line(sanitize(old_at), 40)}): "
            f"{one_line(sanitize(old_value), MERGE_VALUE_CHARS)}",
            f"Newer value ({one_line(sanitize(new_at), 40)}): "
            f"{one_line(sanitize(new_value), MERGE_VALUE_CHARS)}",
            "What is the value that is true now? Usually it is the newer value. Combine the two "
            "only if both still hold (e.g. two hobbies). Reply with just the value, no "
            "explanation.",
            "",
            "Value:",
        ]
    )


def build_same_entity_prompt(name_a: str, type_a: str, name_b: str, type_b: str) -> str:
    """The ``same-entity`` prompt (§5.7): do two graph nodes name the same thing?"""
    first = one_line(sanitize(name_a), ENTITY_NAME_CHARS)
    second = one_line(sanitize(name_b), ENTITY_NAME_CHARS)
    kind_a = one_line(sanitize(type_a), ENTITY_TYPE_CHARS) or "entity"
    kind_b = one_line(sanitize(type_b), ENTITY_TYPE_CHARS) or "entity"
    return "\n".join(
        [
            "TASK: same-entity",
            "In notes about one person's life, do these two names refer to the same real "
            "person, place, organisation or thing?",
            f"A: {first} ({kind_a})",
            f"B: {second} ({kind_b})",
            "Answer yes or no.",
            "",
            "Answer:",
        ]
    )


def build_cluster_label_prompt(names: Sequence[str]) -> str:
    """The ``label`` prompt (§5.7): a 1–4 word topic for up to 12 related names."""
    shown = [one_line(sanitize(name), ENTITY_NAME_CHARS) for name in names]
    shown = [name for name in shown if name][:LABEL_MAX_NAMES]
    return "\n".join(
        [
            "TASK: label",
            "These names are related in one person's life: " + ", ".join(shown) + ".",
            "Name the topic that connects them in 1-4 words. Reply with only the topic.",
            "",
            "Topic:",
        ]
    )
