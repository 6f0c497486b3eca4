"""Endings (issue 15): a user message that says a fact no longer holds.

``find_endings`` reads "I'm no longer vegetarian", "I don't live in Chicago anymore", "I quit
my job at Acme", "I left Google" as ``Ending``s naming a key and the value the user named;
``retired_keys`` decides which live facts they end: only one whose live value is the one
named (``ends``), and never a key the same message captures anew ("I left Google and joined
Stripe" stores Stripe as a new version). Writing is the caller's job: the live version is
invalidated as ``forget`` does, so its history keeps it.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .capture import (
    _ADVERBS,
    _ALLERGY_PHRASE,
    _CLAUSE,
    _CLEAN_WORD_RE,
    _DIET,
    _FAVORITE_HEAD,
    _I_AM,
    _OCCUPATION_PHRASE,
    _PLACE,
    DIET_WORDS,
    FILLER_WORDS,
    MAX_PLACE_WORDS,
    MAX_RULE_TEXT,
    MAX_TRIGGERS,
    TRAILING_PUNCTUATION,
    Shape,
    _compile,
    _proper_noun,
    _strip,
    clean_value,
    favorite_key,
)
from .context import SENTENCE_WINDOW, asserted, subject_start


@dataclass(frozen=True)
class Ending:
    """A statement that a fact has ended: "I'm no longer vegetarian" (diet, "vegetarian").

    ``keys`` are the facts it may end ("I left Portland" may be a place or an employer);
    ``value`` is what the user named, matched against the live value by ``ends``. None ends
    any diet ("I started eating meat again").
    """

    keys: tuple[str, ...]
    value: str | None
    start: int


# Keys whose value is a proper noun that may be named in part: "I don't live in Austin
# anymore" ends location "Austin, Texas", "I left Google" ends employer "Google LLC".
_PARTIAL_MATCH_KEYS = frozenset({"location", "employer", "hometown", "name"})

_ANYMORE_RE = _compile(r"\b(?:anymore|any\s+more|any\s+longer|these\s+days)\b")
_ANYMORE_TAIL_RE = _compile(r"\s+(?:anymore|any\s+more|any\s+longer)\b.*$")
# What may follow "I left <X>" when it ends a job or a home, not a trip: the end of the
# clause, "for good", "behind", "after ...", "to join ...", "... years ago", "in 2019",
# "and moved/joined ...". "I left Portland this morning" or "... at 5pm" ends nothing.
_MONTH = (
    r"(?:january|february|march|april|may|june|july|august|september|october|november|"
    r"december|spring|summer|fall|autumn|winter)"
)
_LEFT_TAIL_RE = _compile(
    r"\s*(?:$|[.,;!?)\n]|(?:for\s+good|behind|after|in\s+(?:\d{4}|" + _MONTH + r")|"
    r"last\s+(?:year|month|" + _MONTH + r")|"
    r"(?:a|an|one|two|three|four|five|six|seven|eight|nine|ten|\d+|several|a\s+few|many)"
    r"\s+(?:years?|months?|weeks?)\s+ago|years\s+ago|months\s+ago|"
    r"to\s+(?:join|work|start|move|live|take|pursue|found|launch|focus|freelance)|"
    r"and\s+(?:i\s+|i['’]ve\s+|have\s+|then\s+)?(?:moved|joined|started|relocated|now|"
    r"never|am\s+now|i['’]m\s+now|took\s+a))\b)"
)
_NO_LONGER = r"no\s+longer\s+"
_STOPPED_BEING = r"(?:(?:have|['’]ve)\s+)?(?:stopped|quit|gave\s+up|given\s+up)\s+being\s+"
_I_OR_WE = r"\b(?P<subj>i|we)"
_BE_OR_ARE = r"(?:['’]m|['’]re|\s+am|\s+are)\s+"
_DONT = r"\s+(?:don['’]?t|do\s+not)\s+"


@dataclass(frozen=True)
class _EndingRule:
    keys: tuple[str, ...]
    pattern: re.Pattern[str]
    shape: Shape | None  # None: the pattern's "value" group, or no value at all
    needs_anymore: bool = False
    tail: re.Pattern[str] | None = None


def _ending(
    keys: str | tuple[str, ...],
    pattern: str,
    shape: Shape | None = None,
    *,
    anymore: bool = False,
    tail: re.Pattern[str] | None = None,
) -> _EndingRule:
    keys = (keys,) if isinstance(keys, str) else keys
    return _EndingRule(keys, _compile(pattern), shape, anymore, tail)


ENDING_RULES: tuple[_EndingRule, ...] = (
    # diet
    _ending("diet", _I_AM + _NO_LONGER + rf"(?:an?\s+)?(?P<value>{_DIET})\b"),
    _ending("diet", _I_AM + rf"not\s+(?:an?\s+)?(?P<value>{_DIET})\b", anymore=True),
    _ending("diet", rf"\b(?P<subj>i)\s+{_STOPPED_BEING}(?:an?\s+)?(?P<value>{_DIET})\b"),
    _ending("diet", rf"\b(?P<subj>i)\s+used\s+to\s+be\s+(?:an?\s+)?(?P<value>{_DIET})\b"),
    _ending(
        "diet",
        rf"\b(?P<subj>i)(?:['’]ve|\s+have)?\s+{_ADVERBS}(?:started|began|begun)\s+eating\s+"
        r"(?:meat|chicken|beef|pork)\b",
    ),
    _ending("diet", r"\b(?P<subj>i)\s+(?:now\s+)?eat\s+meat\s+(?:again|now)\b"),
    # location
    _ending(
        "location",
        _I_OR_WE + r"\s+(?:no\s+longer|used\s+to)\s+(?:live|stay|reside)\s+in\s+",
        _PLACE,
    ),
    _ending("location", _I_OR_WE + _DONT + r"(?:live|stay|reside)\s+in\s+", _PLACE, anymore=True),
    _ending("location", _I_OR_WE + _BE_OR_ARE + _NO_LONGER + r"(?:living|based)\s+in\s+", _PLACE),
    _ending(
        "location", _I_OR_WE + _BE_OR_ARE + r"not\s+(?:living|based)\s+in\s+", _PLACE, anymore=True
    ),
    _ending(
        "location",
        _I_OR_WE + rf"(?:['’]ve|\s+have)?\s+{_ADVERBS}(?:moved|relocated)\s+"
        r"(?:away\s+from|out\s+of|from)\s+",
        _PLACE,
    ),
    # "I left Portland" / "I left Google": whichever the live fact names.
    _ending(
        ("employer", "location"),
        rf"\b(?P<subj>i|we)\s+{_ADVERBS}(?:left|quit)\s+",
        _proper_noun(MAX_PLACE_WORDS, region=False, lowercase="never"),
        tail=_LEFT_TAIL_RE,
    ),
    # employer
    _ending(
        "employer",
        r"\b(?P<subj>i)\s+(?:no\s+longer|used\s+to)\s+work\s+(?:at|for)\s+" + _OCCUPATION_PHRASE,
    ),
    _ending(
        "employer", rf"\b(?P<subj>i){_DONT}work\s+(?:at|for)\s+" + _OCCUPATION_PHRASE, anymore=True
    ),
    _ending(
        "employer",
        _I_AM
        + _NO_LONGER
        + r"(?:(?:working|employed)\s+(?:at|for|by|with)|at|with)\s+"
        + _OCCUPATION_PHRASE,
    ),
    _ending(
        "employer",
        _I_AM
        + r"not\s+(?:(?:working|employed)\s+(?:at|for|by|with)|at|with)\s+"
        + _OCCUPATION_PHRASE,
        anymore=True,
    ),
    _ending(
        "employer",
        rf"\b(?P<subj>i)(?:['’]ve|\s+have)?\s+{_ADVERBS}(?:quit|left)\s+my\s+"
        r"(?:job|position|role|post)\s+(?:at|with)\s+" + _OCCUPATION_PHRASE,
    ),
    _ending(
        "employer",
        rf"\b(?P<subj>i)(?:['’]ve|\s+have)?\s+{_ADVERBS}(?:resigned|retired)\s+from\s+"
        + _OCCUPATION_PHRASE,
    ),
    _ending(
        "employer",
        r"\b(?P<subj>i)\s+(?:was|got|have\s+been|['’]ve\s+been)\s+(?:laid\s+off|fired|let\s+go|"
        r"made\s+redundant)\s+(?:from|by|at)\s+" + _OCCUPATION_PHRASE,
    ),
    # occupation
    _ending("occupation", _I_AM + _NO_LONGER + r"an?\s+" + _OCCUPATION_PHRASE),
    _ending("occupation", _I_AM + r"not\s+an?\s+" + _OCCUPATION_PHRASE, anymore=True),
    _ending(
        "occupation",
        rf"\b(?P<subj>i)\s+(?:{_STOPPED_BEING}|used\s+to\s+be\s+)an?\s+" + _OCCUPATION_PHRASE,
    ),
    _ending(
        "occupation",
        r"\b(?P<subj>i)\s+(?:no\s+longer|used\s+to)\s+work\s+as\s+an?\s+" + _OCCUPATION_PHRASE,
    ),
    _ending(
        "occupation", rf"\b(?P<subj>i){_DONT}work\s+as\s+an?\s+" + _OCCUPATION_PHRASE, anymore=True
    ),
    # allergies
    _ending("allergies", _I_AM + _NO_LONGER + r"allergic\s+to\s+" + _ALLERGY_PHRASE),
    _ending("allergies", _I_AM + r"not\s+allergic\s+to\s+" + _ALLERGY_PHRASE, anymore=True),
    _ending("allergies", r"\b(?P<subj>i)\s+used\s+to\s+be\s+allergic\s+to\s+" + _ALLERGY_PHRASE),
    _ending(
        "allergies",
        r"\b(?P<subj>i)(?:['’]ve|\s+have)?\s+(?:outgrew|outgrown)\s+my\s+"
        r"(?P<value>[^\W\d_][\w\-]{1,30})\s+allerg(?:y|ies)\b",
    ),
)

# "my favorite band is no longer Muse", "my favorite band used to be Muse".
FAVORITE_ENDING_RE = _compile(
    _FAVORITE_HEAD + rf"\s+(?:is\s+no\s+longer|used\s+to\s+be)\s+(?P<value>{_CLAUSE})"
)


def find_endings(text: str) -> list[Ending]:
    """Every stated ending in the first MAX_RULE_TEXT characters of ``text``, in text order
    (see ``Ending``)."""
    text = text[:MAX_RULE_TEXT]
    found: list[Ending] = []
    for rule in ENDING_RULES:
        for match in itertools.islice(rule.pattern.finditer(text), MAX_TRIGGERS):
            if not asserted(text, subject_start(match)):
                continue
            if rule.needs_anymore and not _ANYMORE_RE.search(_clause_from(text, match.start())):
                continue
            fits, value = _ending_value(rule, text, match)
            if fits:
                found.append(Ending(rule.keys, value, match.start()))
    for match in itertools.islice(FAVORITE_ENDING_RE.finditer(text), MAX_TRIGGERS):
        key = favorite_key(match.group("subject"))
        if key is None or not asserted(text, match.start()):
            continue
        value = clean_value(_ANYMORE_TAIL_RE.sub("", match.group("value")))
        if value is not None:
            found.append(Ending((key,), value, match.start()))
    found.sort(key=lambda ending: ending.start)
    return found


def _clause_from(text: str, pos: int) -> str:
    stop = min(len(text), pos + SENTENCE_WINDOW)
    end = _CLAUSE_END_RE.search(text, pos, stop)
    return text[pos : end.start() if end else stop]


_CLAUSE_END_RE = re.compile(r"[.;!?\n]")


def _ending_value(rule: _EndingRule, text: str, match: re.Match[str]) -> tuple[bool, str | None]:
    """(whether the trigger is an ending, the value it names): a trigger whose value does not
    fit the rule's shape is none ("I left my keys")."""
    if rule.shape is not None:
        raw = rule.shape(text, match)
        if raw is None:
            return False, None
        end = match.end() + len(raw)
        if rule.tail is not None and not rule.tail.match(text, end):
            return False, None
    elif "value" in match.re.groupindex:
        raw = match.group("value")
    else:
        return True, None
    # Not clean_value: the value is only compared with a live one, which may well start
    # with a word no capture starts with ("I quit my job at the hospital").
    value = _strip(_ANYMORE_TAIL_RE.sub("", raw))
    for index, word in enumerate(_CLEAN_WORD_RE.finditer(value)):
        if index > 0 and word.group() in FILLER_WORDS:
            value = _strip(value[: word.start()])
            break
    return bool(value), value or None


def _fold(value: str) -> str:
    folded = " ".join(value.casefold().replace("’", "'").split())
    folded = folded.strip(TRAILING_PUNCTUATION + " ")
    return folded[4:] if folded.startswith("the ") else folded


def ends(key: str, stated: str | None, live: str) -> bool:
    """Whether an ending of ``key`` naming ``stated`` ends the live value ``live``.

    Compared folded (case, spacing, a leading "the"). A proper noun may be named in part
    ("Austin" ends "Austin, Texas"); a diet ends when its word is the live one's; an ending
    that names nothing ends any diet.
    """
    live_folded = _fold(live)
    if key == "diet":
        words = set(re.findall(r"\w+", live_folded))
        if stated is None:
            return bool(words.intersection(DIET_WORDS))
        return _fold(stated) in words
    if stated is None:
        return False
    said = _fold(stated)
    if not said:
        return False
    if said == live_folded:
        return True
    # "I'm no longer allergic to penicillin apparently": the live value, then more words.
    if said.startswith(live_folded) and said[len(live_folded)] == " ":
        return True
    if key not in _PARTIAL_MATCH_KEYS:
        return False
    short, long = sorted((said, live_folded), key=len)
    return _leading_part(short, long)


def names_part_of(key: str, value: str, live: str) -> bool:
    """Whether a captured ``value`` names the live value ``live`` in part, as a shorter
    mention of the same proper noun ("Daniel" of "Daniel Reyes", "Austin" of "Austin,
    Texas"): then the capture re-affirms ``live`` rather than replacing it."""
    if key not in _PARTIAL_MATCH_KEYS:
        return False
    said, held = _fold(value), _fold(live)
    return bool(said) and len(said) < len(held) and _leading_part(said, held)


def _leading_part(short: str, long: str) -> bool:
    return long.startswith(short) and long[len(short)] in " ,("


def retired_keys(
    endings: Iterable[Ending], captured: Iterable[str], live: Mapping[str, str]
) -> list[str]:
    """The keys whose live value (``live``) the ``endings`` end, in text order.

    A key captured in the same message is left to that capture ("I moved from Chicago to
    Portland" stores Portland as a new version), so it is never retired here.
    """
    skip = set(captured)
    result: list[str] = []
    for ending in endings:
        for key in ending.keys:
            if key in skip or key in result or key not in live:
                continue
            if ends(key, ending.value, live[key]):
                result.append(key)
    return result


def ending_keys(endings: Iterable[Ending]) -> list[str]:
    """Every key the ``endings`` may end: the live values the caller must read."""
    keys: list[str] = []
    for ending in endings:
        keys.extend(key for key in ending.keys if key not in keys)
    return keys
