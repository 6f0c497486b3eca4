"""Rule capture (SPEC §5.5): profile facts read from fixed phrases in the user's own words.

``capture_rules`` runs over one user message and returns ``(key, value)`` pairs in text order.
It costs a few regex scans, so it runs on every turn at every tier, with no LLM.

Each rule is a trigger phrase ("i work at") plus a *value shape* that says how much of the
following text is the value. The shape is part of the match: "call me later" is not a match of
the call-me rule at all, so a later "call me Sam" in the same message is that rule's first
match. Cleaning (trailing punctuation, filler cut, forbidden first word) then applies to that
one match; a value dropped by cleaning does not fall back to a later match.

Triggers are case-insensitive. Whether a word is capitalised is judged on the text as written,
which is what tells a name ("Anna Smith") from the words after it ("anna and ...").

The module is pure: no I/O, no state. Writing captures (source "rule") is the caller's job.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from .text import normalize_key

# A word of a name or place: letters, with inner apostrophes or hyphens (O'Brien, Jean-Luc).
# The lookahead stops "R2D2" from yielding "R".
_LETTER_WORD = r"[^\W\d_]+(?:['’\-][^\W\d_]+)*(?![\w'’\-])"
_LETTER_WORD_RE = re.compile(_LETTER_WORD)
# Spaces or tabs between the words of one value; a newline ends the value.
_INLINE_GAP_RE = re.compile(r"[ \t]+")
# "Austin, Texas": the comma that may join a place to its region.
_REGION_COMMA_RE = re.compile(r",[ \t]*")

# Words split for cleaning: letters or digits, with inner apostrophes or hyphens.
_CLEAN_WORD_RE = re.compile(r"[^\W_]+(?:['’\-][^\W_]+)*")

_I_AM = r"\bi(?:['’]m|\s+am)\s+"  # "I'm" (straight or curly apostrophe) or "I am"

TRAILING_PUNCTUATION = ".,!?;:"

# Words that end a value when they follow at least one value word and are lowercase in the
# text: "teal by the way" → "teal", while "Right Said Fred" keeps its capitalised "Right".
# fmt: off
FILLER_WORDS = frozenset({
    "by", "though", "actually", "anyway", "btw", "honestly", "right", "now", "these", "at",
    "for", "in", "so", "but", "and",
})
# fmt: on

# A capture whose first word is one of these is not a value ("I live in a flat",
# "I work at home", "I'm from the north"). Compared case-insensitively, except for
# NAME_STARTS: capitalised, those begin proper nouns ("The Beatles", "Home Depot", "A Tribe
# Called Quest"), while no name starts with "Not" or "Very" ("my favorite color is Not blue").
# fmt: off
FORBIDDEN_FIRST_WORDS = frozenset({
    "not", "no", "very", "so", "too", "really", "just", "kind", "sort", "a", "an", "the",
    "still", "also", "actually", "basically", "literally", "work", "home", "here", "there",
    "moment",
})
NAME_STARTS = frozenset({"a", "an", "the", "work", "home", "here", "there", "moment", "kind"})
# fmt: on

# "call me <word>" words that are not names ("call me later", "call me back").
# fmt: off
CALL_ME_STOPLIST = frozenset({
    "later", "back", "tomorrow", "tonight", "now", "soon", "again", "anytime", "sometime",
    "whenever", "when", "if", "after", "before", "at", "on", "up", "please", "maybe", "crazy",
    "that", "this", "it", "a", "an", "the",
})
# fmt: on

DIET_WORDS = ("vegetarian", "vegan", "pescatarian")

MAX_NAME_WORDS = 2
MAX_PLACE_WORDS = 3  # before the comma, and again after it
MAX_FAVORITE_SUBJECT_WORDS = 3
FAVORITE_KEY_PREFIX = "favorite"


# A shape reads the value that follows a trigger; None means "no match here".
Shape = Callable[[str, re.Match[str]], str | None]


@dataclass(frozen=True)
class Rule:
    """One row of the §5.5 table: a key, its trigger patterns and the shape of its value."""

    key: str
    patterns: tuple[re.Pattern[str], ...]
    shape: Shape


def _compile(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE)


def _is_capitalised(word: str) -> bool:
    return word[:1].isupper()


def _capitalised_run(text: str, pos: int, limit: int) -> int:
    """End of up to ``limit`` capitalised words starting at ``pos`` (``pos`` itself if none)."""
    end = pos
    for _ in range(limit):
        gap = _INLINE_GAP_RE.match(text, end) if end > pos else None
        start = gap.end() if gap else end
        word = _LETTER_WORD_RE.match(text, start)
        if word is None or not _is_capitalised(word.group()):
            break
        end = word.end()
    return end


def _proper_noun(max_words: int, *, region: bool) -> Shape:
    """1–``max_words`` capitalised words (plus ", Region" if ``region``); a lowercase match
    takes one word."""

    def shape(text: str, match: re.Match[str]) -> str | None:
        start = match.end()
        first = _LETTER_WORD_RE.match(text, start)
        if first is None:
            return None
        if not _is_capitalised(first.group()):
            return first.group()
        end = _capitalised_run(text, start, max_words)
        if region:
            comma = _REGION_COMMA_RE.match(text, end)
            if comma:
                tail_end = _capitalised_run(text, comma.end(), max_words)
                if tail_end > comma.end():
                    end = tail_end
        return text[start:end]

    return shape


def _call_me_word(text: str, match: re.Match[str]) -> str | None:
    word = _LETTER_WORD_RE.match(text, match.end())
    if word is None or word.group().casefold() in CALL_ME_STOPLIST:
        return None
    return word.group()


def _value_group(text: str, match: re.Match[str]) -> str | None:
    return match.group("value")


def _diet_word(text: str, match: re.Match[str]) -> str | None:
    # The trigger only matches the three diet words, in any case; store the canonical form
    # so "I'm Vegan" and "I'm vegan" are the same value.
    word = match.group("value")
    return word.lower() if word.lower() in DIET_WORDS else word


# "2–40 chars of words, spaces and <extra>", never ending inside a word.
def _phrase(extra: str) -> str:
    chars = rf"\w '’\-{extra}"
    return rf"(?P<value>\w[{chars}]{{1,39}})(?![\w'’\-{extra}])"


_OCCUPATION_PHRASE = _phrase("&")
_ALLERGY_PHRASE = _phrase(",")

_PLACE = _proper_noun(MAX_PLACE_WORDS, region=True)

RULES: tuple[Rule, ...] = (
    Rule(
        "name",
        (
            _compile(
                r"\bmy\s+(?:(?:full|real|first|given|legal|actual|proper)\s+)?name\s+is\s+"
                r"(?:(?:now|currently)\s+)?"
            ),
        ),
        _proper_noun(MAX_NAME_WORDS, region=False),
    ),
    Rule("name", (_compile(r"\b(?:(?:you\s+can|please|just)\s+)?call\s+me\s+"),), _call_me_word),
    Rule(
        "location",
        (
            _compile(r"\bi\s+(?:live|stay)\s+in\s+"),
            _compile(r"\bi['’]m\s+based\s+in\s+"),
            _compile(r"\bi\s+(?:moved|relocated)\s+to\s+"),
        ),
        _PLACE,
    ),
    Rule("hometown", (_compile(_I_AM + r"from\s+"),), _PLACE),
    Rule(
        "occupation",
        (
            _compile(r"\bi\s+work\s+as\s+an?\s+" + _OCCUPATION_PHRASE),
            # The second form takes one word: "I'm a nurse by trade".
            _compile(_I_AM + r"an?\s+(?P<value>\w[\w'’\-]*)\s+by\s+(?:profession|trade)\b"),
        ),
        _value_group,
    ),
    Rule("employer", (_compile(r"\bi\s+work\s+(?:at|for)\s+" + _OCCUPATION_PHRASE),), _value_group),
    Rule("allergies", (_compile(_I_AM + r"allergic\s+to\s+" + _ALLERGY_PHRASE),), _value_group),
    Rule(
        "diet",
        (_compile(_I_AM + r"(?P<value>" + "|".join(DIET_WORDS) + r")\b"),),
        _diet_word,
    ),
)

# "my favorite ice cream is X": the subject is 1–3 words (never "is"); the lazy repeat picks
# the first "is", so "my favorite song is Is This Love" keys on "song". The value runs to the
# end of the clause: a comma, ; : ! ? ( ) — –, a newline, or a period followed by a space or
# the end (so "3.5" and "Node.js" stay whole).
_SUBJECT_WORD = r"(?!is\b)[^\W_]+(?:['’-][^\W_]+)*"  # "sci-fi", "e-mail", "mom's"
_CLAUSE = r"(?:[^,;:!?()\n\r—–.]|\.(?=\S))*"
FAVORITE_RE = _compile(
    r"\bmy\s+(?:favou?rite|preferred)\s+"
    rf"(?P<subject>{_SUBJECT_WORD}(?:[ \t]+{_SUBJECT_WORD}){{0,{MAX_FAVORITE_SUBJECT_WORDS - 1}}}?)"
    # "is now forest green": a leading "now"/"currently" says when, not what (the filler
    # cut only removes fillers after the first value word).
    rf"\s+is\s+(?:(?:now|currently)\s+)?(?P<value>{_CLAUSE})"
)


def clean_value(raw: str) -> str | None:
    """Apply the §5.5 cleaning steps to a raw capture; None drops it.

    ``raw`` is a slice of the message, so "lowercase in the text" is judged on what the user
    typed.
    """
    value = _strip(raw)
    for index, word in enumerate(_CLEAN_WORD_RE.finditer(value)):
        token = word.group()
        if index > 0 and token in FILLER_WORDS:  # exact match, so only the lowercase form
            # Strip again: the cut can leave "teal," from "teal, by the way".
            value = _strip(value[: word.start()])
            break
    first = _CLEAN_WORD_RE.search(value)
    if first is None or _forbidden_first(first.group()):
        return None
    return value


def _forbidden_first(word: str) -> bool:
    """See FORBIDDEN_FIRST_WORDS: "the office" is no value, "The Hague" is."""
    lowered = word.lower()
    if lowered not in FORBIDDEN_FIRST_WORDS:
        return False
    return word == lowered or lowered not in NAME_STARTS


def _strip(value: str) -> str:
    return value.strip().rstrip(TRAILING_PUNCTUATION).strip()


def _first_capture(rule: Rule, text: str) -> tuple[int, str] | None:
    """The earliest trigger in ``text`` whose value fits the rule's shape, as (start, value)."""
    best: tuple[int, str] | None = None
    for pattern in rule.patterns:
        for match in pattern.finditer(text):
            if best is not None and match.start() >= best[0]:
                break
            raw = rule.shape(text, match)
            if raw is not None:
                best = (match.start(), raw)
                break
    return best


def capture_rules(text: str) -> list[tuple[str, str]]:
    """The ``(key, value)`` pairs the §5.5 rules capture from one user message, in text order.

    Each rule uses its first match; ``favorite_<subject>`` captures every match. When two
    captures share a key, the one earlier in the text wins.
    """
    captures: list[tuple[int, str, str]] = []
    for rule in RULES:
        found = _first_capture(rule, text)
        if found is None:
            continue
        start, raw = found
        value = clean_value(raw)
        if value is not None:
            captures.append((start, rule.key, value))
    for match in FAVORITE_RE.finditer(text):
        key = normalize_key(f"{FAVORITE_KEY_PREFIX} {match.group('subject')}")
        value = clean_value(match.group("value"))
        if value is not None:
            captures.append((match.start(), key, value))

    captures.sort(key=lambda capture: capture[0])
    seen: set[str] = set()
    result: list[tuple[str, str]] = []
    for _, key, value in captures:
        if key not in seen:
            seen.add(key)
            result.append((key, value))
    return result
